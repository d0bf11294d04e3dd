"""Sequence models on a live rayton: the article's video-stream shape (one gRPC stream sending
300 frames of one sequence, 300 results in order), and interleaved sequences over HTTP, gRPC
and streams at once, every running sum right."""

from __future__ import annotations

import queue
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

SEQUENCE_SUM = Path(__file__).parents[1] / "deployments" / "model_repository" / "sequence_sum"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("sequences") / "repository"
    shutil.copytree(SEQUENCE_SUM, root / "sequence_sum")
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "none", grpc_port=grpc_port)
    serve_cluster.wait_for_repository()
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def frame(module, value: int):
    tensor = module.InferInput("IN", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], np.int32))
    return tensor


def test_one_stream_sends_300_frames_of_a_sequence_and_gets_300_results_in_order(server):
    _, grpc_url = server
    results: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for index in range(300):
                client.async_stream_infer(
                    "sequence_sum",
                    [frame(grpcclient, index)],
                    request_id=str(index),
                    sequence_id=4242,
                    sequence_start=index == 0,
                    sequence_end=index == 299,
                )
            answers = [results.get(timeout=WAIT_S) for _ in range(300)]
        finally:
            client.stop_stream()
    errors = [str(error) for _, error in answers if error is not None]
    assert not errors, errors[:3]
    assert [result.get_response().id for result, _ in answers] == [str(i) for i in range(300)]
    sums = [int(result.as_numpy("SUM")[0, 0]) for result, _ in answers]
    assert sums == [index * (index + 1) // 2 for index in range(300)]


def test_interleaved_sequences_over_http_grpc_and_streams_keep_their_sums(server):
    http_url, grpc_url = server
    failures: list[str] = []

    def over_http(sequence: int) -> list[int]:
        with httpclient.InferenceServerClient(http_url) as client:
            return [
                int(
                    client.infer(
                        "sequence_sum",
                        [frame(httpclient, 1)],
                        sequence_id=sequence,
                        sequence_start=step == 0,
                        sequence_end=step == 19,
                    ).as_numpy("SUM")[0, 0]
                )
                for step in range(20)
            ]

    def over_grpc(sequence: int) -> list[int]:
        with grpcclient.InferenceServerClient(grpc_url) as client:
            return [
                int(
                    client.infer(
                        "sequence_sum",
                        [frame(grpcclient, 1)],
                        sequence_id=f"seq-{sequence}" if sequence % 2 else sequence,
                        sequence_start=step == 0,
                        sequence_end=step == 19,
                    ).as_numpy("SUM")[0, 0]
                )
                for step in range(20)
            ]

    def run(sequence: int, call) -> None:
        try:
            sums = call(sequence)
            if sums != list(range(1, 21)):
                failures.append(f"sequence {sequence}: {sums}")
        except Exception as err:
            failures.append(f"sequence {sequence}: {err}")

    threads = [
        threading.Thread(target=run, args=(100 + i, over_http if i % 2 else over_grpc))
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not failures
