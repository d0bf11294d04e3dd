"""BLS through the server: forwards IN to the model named in TARGET, one BLS call per request.

``TARGET`` "sync:<model>" uses the blocking ``exec()`` (from a worker thread, as a synchronous
model would), "<model>" the awaitable ``async_exec()``; the calls of one batch run
concurrently, so they can share an execution at the target (its BATCH_REQUESTS says so).
"""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        return await asyncio.gather(*(self._forward(request) for request in requests))

    async def _forward(self, request):
        target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0, 0].decode()
        data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
        blocking = target.startswith("sync:")
        target = target.removeprefix("sync:")
        bls = pb_utils.InferenceRequest(
            model_name=target,
            requested_output_names=["OUT", "BATCH_REQUESTS"],
            inputs=[pb_utils.Tensor("IN", data)],
        )
        response = await (asyncio.to_thread(bls.exec) if blocking else bls.async_exec())
        if response.has_error():
            return pb_utils.InferenceResponse(error=response.error())
        rows = data.shape[0]
        # is_model_ready blocks like Triton's: call it off the event loop in async execute.
        ready = await asyncio.to_thread(pb_utils.is_model_ready, target)
        return pb_utils.InferenceResponse(
            [
                pb_utils.get_output_tensor_by_name(response, "OUT"),
                pb_utils.get_output_tensor_by_name(response, "BATCH_REQUESTS"),
                pb_utils.Tensor("TARGET_READY", np.full((rows, 1), ready, np.bool_)),
            ]
        )
