"""What a sequence model's router reads of a call, and the directory actor's bookkeeping."""

from __future__ import annotations

import tritonclient.grpc.service_pb2 as pb

from deployments.apps.sequence_directory import SequenceDirectoryActor, _sequence_of
from repo_adapter.inference_types import InferRequest


def test_the_router_reads_the_sequence_of_a_request_object_or_its_wire_bytes():
    request = InferRequest("m", [], parameters={"sequence_id": "a", "sequence_start": True})
    assert _sequence_of(["m", request]) == ("s:a", True, False)
    message = pb.ModelInferRequest(model_name="m")
    message.parameters["sequence_id"].uint64_param = 9
    message.parameters["sequence_end"].bool_param = True
    assert _sequence_of(["m", message.SerializeToString()]) == ("i:9", False, True)
    assert _sequence_of(["m", b"\x0a\x05ab"]) == (None, False, False)  # the replica says why
    assert _sequence_of(["m", InferRequest("m", [])]) == (None, False, False)
    assert _sequence_of(["m"]) == (None, False, False)


def test_the_directory_moves_a_restarted_sequence_and_releases_only_its_holder():
    directory = SequenceDirectoryActor.__ray_actor_class__()
    assert directory.claim("i:1", "r0") is None
    assert directory.claim("i:1", "r1") == "r0"
    directory.release("i:1", "r0")  # the old holder's late release keeps the new one
    assert directory.owner("i:1") == "r1"
    directory.release("i:1", "r1")
    assert directory.owner("i:1") is None and directory.size() == 0
