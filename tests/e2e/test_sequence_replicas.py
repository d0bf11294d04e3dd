"""A sequence model on two replicas: each sequence's requests reach the replica holding it
whichever way they enter (HTTP, gRPC, a gRPC stream, mixed within one sequence), and a killed
replica fails only its own sequences, with UNAVAILABLE, while new sequences run on."""

from __future__ import annotations

import pytest

from tests.support.ports import free_port
from tests.support.sequences import (
    check_a_replica_kill,
    check_mixed_sequences,
    write_sequence_model,
)

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("sequence_replicas") / "repository"
    write_sequence_model(root, replicas=2)
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "none", grpc_port=grpc_port)
    serve_cluster.wait_for_repository()
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def test_32_interleaved_sequences_of_50_requests_over_mixed_transports_keep_their_sums(server):
    check_mixed_sequences(server, replicas=2)


def test_a_killed_replica_fails_only_its_own_sequences_and_new_ones_succeed(server):
    lost, kept, _ = check_a_replica_kill(server, replicas=2)
    print(f"{lost} sequences lost with the replica, {kept} kept")
