"""OUT_<T> = IN_<T> for every datatype; BOOL is negated so the model's work is visible."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                data = tensor.as_numpy()
                if data.dtype == np.bool_:
                    data = np.logical_not(data)
                outputs.append(pb_utils.Tensor("OUT_" + tensor.name()[3:], data))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
