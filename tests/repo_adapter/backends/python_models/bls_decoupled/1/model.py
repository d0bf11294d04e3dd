"""BLS to the decoupled test model with exec(decoupled=True): its responses' values and how
many responses came (the final flag alone is an empty one), or its error."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [self._answer(request) for request in requests]

    def _answer(self, request):
        count = pb_utils.get_input_tensor_by_name(request, "COUNT")
        call = pb_utils.InferenceRequest(
            model_name="decoupled",
            requested_output_names=["OUTPUT0"],
            inputs=[pb_utils.Tensor("INPUT0", count.as_numpy())],
        )
        values, responses = [], 0
        for response in call.exec(decoupled=True):
            responses += 1
            if response.has_error():
                return pb_utils.InferenceResponse(error=response.error())
            output = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
            if output is not None:
                values.extend(output.as_numpy().tolist())
        return pb_utils.InferenceResponse(
            [
                pb_utils.Tensor("VALUES", np.array(values, np.float32)),
                pb_utils.Tensor("RESPONSES", np.array([responses], np.int32)),
            ]
        )
