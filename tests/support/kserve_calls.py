"""Calls of KServe's Python SDK (``kserve`` 0.21) against a server, in a process of their own.

KServe's gRPC stubs and ``tritonclient.grpc`` define the same protobuf symbols
(``inference.ServerLiveRequest``, ...) in the default descriptor pool, so the two cannot be
imported into one process: the test runs this module as a script and reads its JSON.

Usage: ``python -m tests.support.kserve_calls HTTP_BASE_URL GRPC_ADDRESS MODEL`` for
``add_sub``-shaped models (``INPUT0``/``INPUT1`` FP32 [4] -> ``OUTPUT0``/``OUTPUT1``). The test
imports this module for its constants only: ``kserve`` is imported where it is called.
"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np

A = [1.0, 2.0, 3.0, 4.0]
B = [0.5, 0.5, 0.5, 0.5]
REQUEST_ID = "kserve-1"


def add_sub_request(model: str, binary: bool):
    from kserve import InferInput, InferRequest

    inputs = [InferInput("INPUT0", [4], "FP32"), InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(np.array(A, np.float32), binary_data=binary)
    inputs[1].set_data_from_numpy(np.array(B, np.float32), binary_data=binary)
    return InferRequest(model_name=model, infer_inputs=inputs, request_id=REQUEST_ID)


def answer(response) -> dict:
    """What the SDK made of an inference response."""
    return {
        "model_name": response.model_name,
        "id": response.id,
        "outputs": {output.name: output.as_numpy().tolist() for output in response.outputs},
    }


async def rest_calls(base_url: str, model: str) -> dict:
    from kserve import InferenceRESTClient, RESTConfig

    async with InferenceRESTClient(RESTConfig(protocol="v2", timeout=60)) as client:
        json_answer = await client.infer(base_url, add_sub_request(model, False), model)
        binary_answer = await client.infer(base_url, add_sub_request(model, True), model)
        return {
            "server_live": await client.is_server_live(base_url),
            "server_ready": await client.is_server_ready(base_url),
            "model_ready": await client.is_model_ready(base_url, model),
            "unknown_model_ready": await client.is_model_ready(base_url, "no_such_model"),
            "infer_json": answer(json_answer),
            "infer_binary": answer(binary_answer),
        }


async def grpc_calls(address: str, model: str) -> dict:
    from kserve import InferenceGRPCClient

    client = InferenceGRPCClient(address, timeout=60)
    try:
        return {
            "server_live": await client.is_server_live(),
            "server_ready": await client.is_server_ready(),
            "model_ready": await client.is_model_ready(model),
            "infer": answer(await client.infer(add_sub_request(model, True))),
        }
    finally:
        await client.close()


async def all_calls(base_url: str, address: str, model: str) -> dict:
    return {"rest": await rest_calls(base_url, model), "grpc": await grpc_calls(address, model)}


if __name__ == "__main__":
    base_url, address, model = sys.argv[1:4]
    print(json.dumps(asyncio.run(all_calls(base_url, address, model))))
