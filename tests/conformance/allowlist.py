"""The one list of differences between rayton and the reference Triton (tritonserver 2.51).

Two kinds, each entry with a one-line reason:

* :data:`ALLOWED`: deliberate. Either rayton is a different server (name, version, the
  extensions it really implements), rayton follows current Triton (2.73 sources) where the
  2.51 reference binary is older, or rayton deliberately deviates from a Triton quirk.
* :data:`KNOWN_GAPS`: real differences not fixed yet, each naming the file where the fix
  belongs. Cases hitting only these are reported as expected failures (xfail).

An entry names case(s) and observation path(s) as patterns in which ``*`` matches anything
(brackets are literal), and pins the values it expects on each side, so it cannot hide a
regression elsewhere. The suite fails on any difference not listed here, and on any entry that
no longer matches a difference, so the list cannot go stale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.conformance.driver import MISSING

ANY = object()  # an unpinned side: any value is accepted


@dataclass(frozen=True, eq=False)  # identity: entries are compared and hashed as objects
class Difference:
    """A difference explained by ``reason``.

    ``reference`` / ``rayton`` pin each side's value (a callable is a predicate on it);
    ``relation(reference, rayton)``, when given, must hold instead. ``fix_in`` names the file
    to change, for known gaps.
    """

    case: str
    path: str
    reason: str
    reference: Any = ANY
    rayton: Any = ANY
    relation: Callable[[Any, Any], bool] | None = None
    fix_in: str = ""

    def accepts(self, reference: Any, rayton: Any) -> bool:
        if self.relation is not None:
            return bool(self.relation(reference, rayton))
        return _same(self.reference, reference) and _same(self.rayton, rayton)


def _same(expected: Any, value: Any) -> bool:
    if expected is ANY:
        return True
    if callable(expected):
        return bool(expected(value))
    return type(expected) is type(value) and expected == value


def _both_start_with(prefix: str) -> Callable[[Any, Any], bool]:
    def relation(reference: Any, rayton: Any) -> bool:
        return all(isinstance(v, str) and v.startswith(prefix) for v in (reference, rayton))

    return relation


def _entries(case: str, paths: tuple[str, ...], reason: str, **pins: Any) -> list[Difference]:
    """Several paths explained by one reason."""
    return [Difference(case, path, reason, **pins) for path in paths]


def _twice(reference: Any, rayton: Any) -> bool:
    # A count (a JSON number over HTTP, a uint64 string in gRPC's JSON) that is exactly doubled.
    if type(reference) is not type(rayton) or not isinstance(reference, (int, str)):
        return False
    try:
        return int(reference) == 2 * int(rayton) > 0
    except ValueError:
        return False


_NEWER_READY = (
    "Triton 2.51 answers 400 'Model version not ready' for an unknown model or version; "
    "current Triton (2.73 core GetModel) answers 404 'Request for unknown model: ...', as rayton."
)
_JSON_CLIENT_ERROR = (
    "Triton answers 500 for malformed request JSON only because TritonJson errors default to "
    "INTERNAL (still so in 2.73); rayton answers 400 for this client mistake."
)

_MAX_INFLIGHT = (
    "ensemble_scheduling.max_inflight_requests was added to ModelConfig after 2.51; current "
    "Triton prints it with its default like every other field."
)
ALLOWED: tuple[Difference, ...] = (
    Difference(
        "server_metadata",
        "/body/name",
        "A different server reports its own name.",
        reference="triton",
        rayton="rayton",
    ),
    Difference(
        "server_metadata",
        "/body/version",
        "A different server reports its own version.",
        reference="2.51.0",
        rayton="0.1.0",
    ),
    Difference(
        "*",
        "/content_type",
        "Triton sends errors raised before a request is parsed (unknown route or model, wrong "
        "method, bad headers) without a Content-Type, so evhtp labels the JSON body text/plain "
        "(2.73 too); rayton labels every JSON error body application/json.",
        reference="text/plain",
        rayton="application/json",
    ),
    *_entries("model_ready[*]", ("/status",), _NEWER_READY, reference=400, rayton=404),
    *_entries(
        "model_ready[*]",
        ("/body/error",),
        _NEWER_READY,
        reference="Model version not ready",
        rayton=lambda v: isinstance(v, str) and v.startswith("Request for unknown model: "),
    ),
    *_entries(
        "*config*",
        ("/body/ensemble_scheduling/max_inflight_requests", "/*/ensemble_scheduling/*"),
        _MAX_INFLIGHT,
        reference=MISSING,
        rayton=0,
    ),
    *_entries("error[malformed JSON]", ("/status",), _JSON_CLIENT_ERROR, reference=500, rayton=400),
    Difference(
        "error[malformed JSON]",
        "/body/error",
        "The parser's own detail after the common prefix differs (Python json, not rapidjson).",
        relation=_both_start_with("failed to parse the request JSON buffer: "),
    ),
    *_entries(
        "error[data count mismatch]", ("/status",), _JSON_CLIENT_ERROR, reference=500, rayton=400
    ),
    Difference(
        "error[data count mismatch]",
        "/body/error",
        "rayton's message names the input and both element counts after Triton's prefix.",
        relation=_both_start_with("Unable to parse 'data'"),
    ),
    *[
        Difference(
            case,
            "/body",
            "Triton 2.51 answers the health routes with an empty body; the Open Inference "
            "Protocol specifies a JSON body, which KServe's SDK reads (its is_server_live / "
            "is_server_ready fail on Triton's). Same status codes: tritonclient reads only those.",
            reference=None,
            rayton=body,
        )
        for case, body in (("server_live", {"live": True}), ("server_ready", {"ready": True}))
    ],
    Difference(
        "stats*",
        "/model_stats/pipeline:1/inference_stats/fail/count",
        "Triton counts a failed ensemble request twice (the error response and the request "
        "tracker both record a failure; same in 2.73 core); rayton counts it once.",
        relation=_twice,
    ),
)

_TRACE_STRICTER = (
    "Triton 2.51 accepts this and changes nothing (or wraps the number to 2^32-1); rayton "
    "refuses it with a 400 that names the setting, as bad input gets a clear error."
)
ALLOWED += (
    *_entries(
        "trace[not a string]",
        ("/status",),
        "Triton answers 500 for a setting of the wrong JSON type only because TritonJson "
        "errors default to INTERNAL; rayton answers 400 with the same message.",
        reference=500,
        rayton=400,
    ),
    *_entries("trace[not json]", ("/status",), _JSON_CLIENT_ERROR, reference=500, rayton=400),
    Difference(
        "trace[not json]",
        "/body/error",
        "The parser's own detail after the common prefix differs (Python json, not rapidjson).",
        relation=_both_start_with("failed to parse the request JSON buffer: "),
    ),
    *[
        Difference(case, path, _TRACE_STRICTER, **pins)
        for case in ("trace[unknown level]", "trace[negative rate]")
        for path, pins in (
            ("/status", {"reference": 200, "rayton": 400}),
            ("/body*", {}),
        )
    ],
)

ALLOWED += (
    *_entries(
        "logging[bad *]",
        ("/status",),
        "Triton answers 500 for a setting of the wrong JSON type only because TritonJson "
        "errors default to INTERNAL; rayton answers 400 with the same message.",
        reference=500,
        rayton=400,
    ),
    *_entries("logging[not json]", ("/status",), _JSON_CLIENT_ERROR, reference=500, rayton=400),
    Difference(
        "logging[not json]",
        "/body/error",
        "The parser's own detail after the common prefix differs (Python json, not rapidjson).",
        relation=_both_start_with("failed to parse the request JSON buffer: "),
    ),
    Difference(
        "logging[bad format]",
        "/status",
        "Triton answers 503 (UNAVAILABLE) for an unknown log_format, which clients may retry; "
        "rayton answers 400 with the same message: the request is wrong, not the server.",
        reference=503,
        rayton=400,
    ),
    Difference(
        "metrics[counts]",
        "/nv_inference_request_failure{model=pipeline,reason=OTHER,version=1}",
        "Triton counts a failed ensemble request twice in its metrics too (as in its "
        "statistics); rayton counts it once.",
        relation=lambda reference, rayton: reference == 2 * rayton > 0,
    ),
    Difference(
        "metrics[families]",
        "/nv_model_load_duration_secs",
        "Load durations per model version are a newer Triton family (not in 2.51); rayton "
        "reports them.",
        reference=MISSING,
    ),
    Difference(
        "metrics[families]",
        "/rayton_model_*",
        "rayton's own families: each model version's state, the replicas serving each model "
        "and how many it scaled up and down by (autoscaling, scale to zero, recycling); Triton "
        "is one process.",
        reference=MISSING,
    ),
    Difference(
        "metrics[families]",
        "/nv_pinned_memory_pool_*",
        "Triton's pinned host memory pool for GPU copies; rayton has none (the frameworks "
        "manage their own pinned buffers).",
        rayton=MISSING,
    ),
)

KNOWN_GAPS: tuple[Difference, ...] = ()

# Differences in the explicit-model-control sequences (:mod:`tests.conformance.explicit_cases`),
# checked for staleness by their own module.
EXPLICIT_ALLOWED: tuple[Difference, ...] = ()

# Differences for a model served by a C backend (:mod:`tests.conformance.native_cases`),
# checked for staleness by their own module.
NATIVE_ALLOWED: tuple[Difference, ...] = ()
NATIVE_KNOWN_GAPS: tuple[Difference, ...] = ()

# Differences for decoupled models (:mod:`tests.conformance.decoupled_cases`), checked for
# staleness by their own module.
DECOUPLED_ALLOWED: tuple[Difference, ...] = (
    Difference(
        "ensemble_decoupled_config",
        "/ensemble_scheduling/max_inflight_requests",
        _MAX_INFLIGHT,
        reference=MISSING,
        rayton=0,
    ),
    Difference(
        "ensemble_decoupled_stats",
        "/model_stats/decoupled_pipeline:1/inference_stats/fail/count",
        "Triton 2.51 counts a failure when gRPC ModelInfer refuses a decoupled ensemble (not "
        "when HTTP infer refuses it, nor for a decoupled model that is no ensemble); rayton "
        "counts no refused request.",
        reference="2",
        rayton="1",
    ),
    *_entries("generate_bad_json", ("/status",), _JSON_CLIENT_ERROR, reference=500, rayton=400),
    Difference(
        "generate_bad_json",
        "/body/error",
        "The parser's own detail after the common prefix differs (Python json, not rapidjson).",
        relation=_both_start_with("failed to parse the request JSON buffer: "),
    ),
    *_entries("generate_type_error", ("/status",), _JSON_CLIENT_ERROR, reference=500, rayton=400),
    Difference(
        "generate_type_error",
        "/body/error",
        "rayton words a generate value's type error as its /infer JSON errors, naming the "
        "input after Triton's prefix.",
        relation=_both_start_with("Unable to parse 'data'"),
    ),
)

# Differences for sequence models (:mod:`tests.conformance.sequence_cases`), checked for
# staleness by their own module.
_DIRECT_SLOTS = (
    "rayton's direct strategy does not bind a sequence to a batch slot, so it never pads a "
    "batch with READY=false requests for slots whose sequences sent nothing: Triton 2.51 gave "
    "this START request a batch of 2 (a null request for the sequence still holding slot 0)"
)
_PYTHON_STATE = (
    "Triton 2.51's python backend never updates implicit state (it does not call "
    "TRITONBACKEND_StateUpdate): each request sees the initial state again. rayton carries a "
    "request's state outputs to the next request for every backend, as Triton's own "
    "onnxruntime, pytorch and tensorrt backends do."
)
SEQUENCE_ALLOWED: tuple[Difference, ...] = (
    # outputs (by name): STEPS is 1 each time in Triton, 2 and 3 in rayton; SUM_OUT is
    # 100 + IN in Triton, the running sum (103, 106) in rayton
    Difference(
        "state_steps", "/1/outputs/0/decoded/values/0/0", _PYTHON_STATE, reference=1, rayton=2
    ),
    Difference(
        "state_steps", "/2/outputs/0/decoded/values/0/0", _PYTHON_STATE, reference=1, rayton=3
    ),
    Difference(
        "state_steps",
        "/1/outputs/1/decoded/values/0/0",
        _PYTHON_STATE,
        reference=102,
        rayton=103,
    ),
    Difference(
        "state_steps",
        "/2/outputs/1/decoded/values/0/0",
        _PYTHON_STATE,
        reference=103,
        rayton=106,
    ),
    Difference(
        "sequence_direct_idle",
        "/0/outputs/0/decoded/values/0/0",
        _DIRECT_SLOTS,
        relation=lambda reference, rayton: b'"batch": 2' in reference and b'"batch": 1' in rayton,
    ),
    Difference(
        "sequence_direct_stats", "/model_stats/sequence_direct:1/batch_stats", _DIRECT_SLOTS
    ),
)

# The response cache (tests/conformance/test_response_cache.py).
_WHOLE_ENTRY = (
    "Triton 2.51 answers a hit with every output of the cached response, whatever the request "
    "names (its key is the inputs alone); rayton answers the outputs named, and runs the "
    "request when the entry lacks one of them"
)
_CACHE_GAUGES = (
    "Triton 2.51 updates its local cache's server-wide counters late (a scrape right after the "
    "requests reads 0 or part of the counts; only nv_cache_util is current); rayton reports "
    "its node caches' counts as they are at the scrape"
)
CACHE_ALLOWED: tuple[Difference, ...] = (
    Difference("cache_hit_named", "/outputs", _WHOLE_ENTRY),
    Difference("cache_partial_entry", "/1/outputs/0/*", _WHOLE_ENTRY),
    Difference(
        "cache_metrics_counts",
        "/nv_cache_*{}",
        _CACHE_GAUGES,
        relation=lambda reference, rayton: rayton not in (0, False) and reference < rayton,
    ),
)

# The system shared-memory extension (tests/conformance/test_shared_memory.py).
SHM_ALLOWED: tuple[Difference, ...] = (
    Difference(
        "cuda_register*",
        "*",
        "Neither server has a GPU here, so both refuse a CUDA region; rayton adds which GPU "
        "and how many the node has (Triton says only 'invalid args').",
        relation=_both_start_with("failed to register shared memory region: invalid args"),
    ),
    Difference(
        "cuda_register_handle",
        "/exception/message",
        "Over gRPC, Triton reads 64 bytes from a handle of any length and fails to open it; "
        "rayton refuses a handle that is not 64 bytes, as both servers do over HTTP.",
        reference="failed to register shared memory region: invalid args",
        rayton="'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
    ),
)
