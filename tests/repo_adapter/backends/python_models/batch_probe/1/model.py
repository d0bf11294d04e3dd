"""Reports how execute saw the batch: number of requests, and each request's own rows."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        assert isinstance(requests, list)
        responses = []
        for request in requests:
            assert isinstance(request, pb_utils.InferenceRequest)
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            rows = data.shape[0]
            outputs = [
                pb_utils.Tensor("BATCH_REQUESTS", np.full((rows, 1), len(requests), np.int32)),
                pb_utils.Tensor("ROWS", np.full((rows, 1), rows, np.int32)),
                pb_utils.Tensor("ECHO", data),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
