"""Breaks the execute contract in the way INPUT0 asks for."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = int(requests[0].inputs()[0].as_numpy()[0])
        response = pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUTPUT0", requests[0].inputs()[0].as_numpy())]
        )
        if mode == 0:
            return tuple(response for _ in requests)
        if mode == 1:
            return [response for _ in requests[1:]]
        if mode == 2:
            return ["not a response" for _ in requests]
        return [None for _ in requests]
