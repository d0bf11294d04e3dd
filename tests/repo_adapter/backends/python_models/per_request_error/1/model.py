"""Fails requests whose input is negative with NOT_FOUND, answers the others."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (data < 0).any():
                error = pb_utils.TritonError("key not found", pb_utils.TritonError.NOT_FOUND)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                out = pb_utils.Tensor("OUTPUT0", data * 2)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
