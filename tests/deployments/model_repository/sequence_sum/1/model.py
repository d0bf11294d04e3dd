import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _control(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy()
    return [array.dtype.str, list(array.shape), array.tolist()]


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
            sequence = request.correlation_id()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            if start.reshape(-1)[0]:
                self.sums[sequence] = 0
            self.sums[sequence] = self.sums.get(sequence, 0) + value
            seen = {
                "batch": len(requests),
                "corr": sequence,
                "flags": request.flags(),
                **{name: _control(request, name) for name in ("START", "END", "READY", "CORRID")},
            }
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SUM", np.array([[self.sums[sequence]]], np.int32)),
                        pb_utils.Tensor(
                            "SEEN", np.array([[json.dumps(seen).encode()]], np.object_)
                        ),
                    ]
                )
            )
        return responses
