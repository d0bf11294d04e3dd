"""The gRPC server (``deployments/grpc/server.py``) on a real port, through
tritonclient.grpc.aio (no Ray)."""

from __future__ import annotations

import pytest
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.utils import InferenceServerException

from repo_adapter.errors import InferenceServerError


async def test_grpc_server_starts_answers_and_refuses_a_busy_port(tmp_path):
    from deployments.core.server_core import ServerCore
    from deployments.grpc.server import GrpcSpec, start_grpc_server
    from tests.support.in_process import InProcessRepository
    from tests.support.ports import free_port

    (tmp_path / "b" / "1").mkdir(parents=True)
    (tmp_path / "b" / "config.pbtxt").write_text('backend: "python"\nbad: 1\n')
    repository = InProcessRepository(tmp_path)
    with pytest.raises(InferenceServerError, match="load failed for model 'b'"):
        await repository.load("b")
    spec = GrpcSpec(port=free_port())
    server, _ = await start_grpc_server(spec, ServerCore(repository, repository, repository))
    try:
        async with aiogrpcclient.InferenceServerClient(spec.address) as client:
            assert await client.is_server_live()
            assert not await client.is_server_ready()  # 'b' failed: strict readiness
            assert not await client.is_model_ready("b")
            with pytest.raises(InferenceServerException, match=r"is not ready: .*bad"):
                await client.get_model_metadata("b")
            with pytest.raises(InferenceServerException, match="unknown model"):
                await client.get_model_config("nope")
            (entry,) = (await client.get_model_repository_index(as_json=True))["models"]
            assert entry["name"] == "b" and entry["state"] == "UNAVAILABLE"
            assert "bad" in entry["reason"]
        with pytest.raises(RuntimeError, match="cannot listen for gRPC"):
            await start_grpc_server(
                spec, ServerCore(repository, repository, repository), bind_wait_s=0.2
            )
    finally:
        await server.stop(None)
