import asyncio
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0)
        # Runs on the event loop itself: record it so the test can check.
        self.last_thread = threading.current_thread().name
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", data + 1)
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
