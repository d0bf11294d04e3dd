"""Version 1: OUT = IN + 1 (the same code reads its version from args)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out = pb_utils.Tensor("OUT", data + self.version)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
