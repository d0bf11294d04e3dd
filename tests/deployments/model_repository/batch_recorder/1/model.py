"""Echoes IN and reports, per row, how many rows and requests its execution held."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        rows = sum(x.shape[0] for x in inputs)
        time.sleep(0.02)  # a slow model lets a queue build up behind it
        responses = []
        for x in inputs:
            n = x.shape[0]
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUT", x),
                        pb_utils.Tensor("BATCH_ROWS", np.full((n, 1), rows, np.int32)),
                        pb_utils.Tensor("BATCH_REQUESTS", np.full((n, 1), len(requests), np.int32)),
                    ]
                )
            )
        return responses
