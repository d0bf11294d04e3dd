import triton_python_backend_utils as pb_utils
from sibling_helpers import triple


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", triple(r.inputs()[0].as_numpy()))]
            )
            for r in requests
        ]
