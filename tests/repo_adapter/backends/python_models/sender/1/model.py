"""A non-decoupled model answering through the response sender (allowed since 24.06)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data * 10)])
            sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
