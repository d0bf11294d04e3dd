"""A decoupled model: INPUT0 = n sends n responses (OUTPUT0 = 0 .. n-1) from a thread of its
own after execute returned, then the final flag alone; n < 0 answers an error response
(final); n = 1000000 sends until the client stops reading; n = 999 makes execute raise and
n = 998 makes it return a list (both break Triton's rules)."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
FOREVER = 1000000


class TritonPythonModel:
    def initialize(self, args):
        self.cancelled = 0

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()[0])
            if count == 999:
                raise ValueError("refused on purpose")
            if count == 998:
                return [pb_utils.InferenceResponse([]) for _ in requests]
            sender = request.get_response_sender()
            if count < 0:
                error = pb_utils.TritonError("negative count", pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                continue
            threading.Thread(target=self._send, args=(sender, count), daemon=True).start()
        return None

    def _send(self, sender, count):
        index = 0
        while index < count:
            if sender.is_cancelled():
                self.cancelled += 1
                pb_utils.Logger.log_warn("decoupled: the client stopped reading")
                break
            value = np.array([index], dtype=np.float32)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", value)]))
            index += 1
        sender.send(flags=FINAL)
