"""Fails single requests with a TritonError carrying a code; answers the others."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if np.isnan(data).any():
                error = pb_utils.TritonError("NaN input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
            elif (data < 0).any():
                error = pb_utils.TritonError("negative key", pb_utils.TritonError.NOT_FOUND)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                out = pb_utils.Tensor("OUT", data * 2)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
