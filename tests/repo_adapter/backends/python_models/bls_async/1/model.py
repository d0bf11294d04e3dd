"""Async BLS: two concurrent requests to add_sub, awaited with asyncio.gather."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.Tensor(
                    name, pb_utils.get_input_tensor_by_name(request, name).as_numpy()[None]
                )
                for name in ("INPUT0", "INPUT1")
            ]
            calls = [
                pb_utils.InferenceRequest(
                    model_name="add_sub", requested_output_names=[output], inputs=inputs
                ).async_exec()
                for output in ("OUTPUT0", "OUTPUT1")
            ]
            sum_response, diff_response = await asyncio.gather(*calls)
            for response in (sum_response, diff_response):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
            total = pb_utils.get_output_tensor_by_name(sum_response, "OUTPUT0").as_numpy()[0]
            diff = pb_utils.get_output_tensor_by_name(diff_response, "OUTPUT1").as_numpy()[0]
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("SUM", total), pb_utils.Tensor("DIFF", diff)]
                )
            )
        return responses
