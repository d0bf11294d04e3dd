import numpy as np
import triton_python_backend_utils as pb_utils


def _input(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = _input(request, "SUM_IN") + _input(request, "IN")
            steps = np.concatenate([_input(request, "STEPS_IN"), _input(request, "IN")], axis=1)
            count = np.array([[steps.shape[1] - 1]], np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SUM_OUT", total.astype(np.int32)),
                        pb_utils.Tensor("STEPS_OUT", steps.astype(np.int32)),
                        pb_utils.Tensor("STEPS", count),
                    ]
                )
            )
        return responses
