"""SCORES = INPUT0 + BIAS, ARGMAX, the rank BIAS arrives with, and GRID (reshaped output)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            rows = scores.shape[0]
            grid = scores.reshape(rows, 2, 2)
            bias = pb_utils.get_input_tensor_by_name(request, "BIAS")
            rank = 0
            if bias is not None:
                bias = bias.as_numpy()
                rank = bias.ndim
                scores = scores + bias.reshape(rows, 1)
            argmax = np.argmax(scores, axis=1).astype(np.int32).reshape(rows, 1)
            outputs = [
                pb_utils.Tensor("SCORES", scores.astype(np.float32)),
                pb_utils.Tensor("ARGMAX", argmax),
                pb_utils.Tensor("BIAS_RANK", np.full((rows, 1), rank, np.int32)),
                pb_utils.Tensor("GRID", grid),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
