"""BLS: forwards INPUT0/INPUT1 to the model named in MODEL_NAME and returns its OUTPUT0."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            # add_sub batches: give the BLS request a batch dimension of 1.
            inputs = [
                pb_utils.Tensor("INPUT0", in_0.as_numpy()[None, :]),
                pb_utils.Tensor("INPUT1", in_1.as_numpy()[None, :]),
            ]
            infer_request = pb_utils.InferenceRequest(
                model_name=model_name.decode(),
                requested_output_names=["OUTPUT0"],
                inputs=inputs,
            )
            infer_response = infer_request.exec()
            if infer_response.has_error():
                error = infer_response.error()
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(error.message(), error.code())
                    )
                )
                continue
            output0 = pb_utils.get_output_tensor_by_name(infer_response, "OUTPUT0")
            out = pb_utils.Tensor("OUTPUT0", output0.as_numpy()[0])
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
