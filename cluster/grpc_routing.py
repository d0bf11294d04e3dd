"""Triton's gRPC ``ModelInfer`` routed by HAProxy straight to the model's replicas.

Serve's HAProxy routes a gRPC call to an application by its ``application`` metadata, which
``tritonclient`` never sends; without it every call went through rayton's gRPC frontend
replica and a deployment handle (a second hop that cost the model replica twice its HTTP CPU).
This edit of the config Serve writes makes HAProxy read the model name itself:
``ModelInferRequest`` field 1 (``model_name``) is the first field protobuf writes, so the
first bytes of the body name the model however large the tensors are. HAProxy sets that name
as the ``application`` header, and Serve's own rules send the call to the model's application
(named after the model), whose replicas answer it through Serve's direct gRPC ingress
(``ServedModelDeployment.ModelInfer``). A ``ModelStreamInfer`` stream goes where its first
request's model is, and that replica answers every request of it (one naming another model
through that model's deployment). A model of the shared CPU host has no application of its
own: its calls go to the host's (named so on the way), and so do calls whose name cannot be
read (a compressed or malformed request), which the host answers as the frontend would.
Every other call (health, metadata, repository, statistics) goes to rayton's gRPC frontend.

A unary ``ModelInfer`` goes further: HAProxy ends HTTP/2 and sends it over HTTP/1.1 to the
same replicas' HTTP port, where rayton's HTTP server answers it with gRPC's framing and
trailers (:mod:`deployments.grpc.over_http`) at an HTTP inference's cost. The backend for
that (``rayton-grpc-h1-<app>``) lists the application's replicas as its HTTP backend does,
following their health checks (``track``), and Serve's gRPC fallback proxy as its backup, so
while no replica is up a call still goes where it went before: over HTTP/2 to Serve.

Run by the HAProxy wrapper (:mod:`cluster.haproxy_wrapper`) on the file Serve passes with
``-f``, before the real binary starts: ``python -m cluster.grpc_routing FRONTEND HOST_APP FILE``.
"""

from __future__ import annotations

import re
import sys

FRONTEND_BACKEND = "rayton_grpc_frontend"
H1_BACKEND_PREFIX = "rayton-grpc-h1-"
_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
_STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
# Enough of a large body to hold the model name; a small body is read whole.
_HEAD_BYTES = "4k"
# A unary call's body follows its headers at once; this only bounds a client that stalls.
_BODY_WAIT = "30s"
# A stream's body never ends while it is open, and HAProxy answers 408 when the wait runs out
# before ``at-least`` bytes came, so a stream waits for its first bytes only (the first
# request arrives in one HTTP/2 DATA frame, up to 16 KB: the name leads it) and as long as
# Serve's client timeout lets any idle connection live (1 h by default).
_STREAM_WAIT = "1d"
# What a client reads when HAProxy found no replica to answer (also the HTTP error page's)
NO_REPLICA_ANSWERED = (
    "no replica of the model answered: it stopped, is restarting or timed out; retry shortly"
)
# HAProxy's own answer when the replica it sent a call to did not answer (it died with the
# call, or in the moment before HAProxy saw it go): a gRPC error, UNAVAILABLE with the reason,
# in place of the HTTP error page a gRPC client reads as UNKNOWN.
_GRPC_UNAVAILABLE = 14
_GRPC_ERRORS = [
    *(
        f"    http-error status {status} "
        f'hdr grpc-status {_GRPC_UNAVAILABLE} hdr grpc-message "{NO_REPLICA_ANSWERED}"'
        for status in (502, 503, 504)
    ),
    "    http-after-response set-status 200 "
    "if { status 502:504 } { res.hdr(grpc-status) -m found }",
]
_SECTION = re.compile(r"^(frontend|backend|listen|defaults|global)\b")


def _routing_rules() -> list[str]:
    return [
        "    # rayton: ModelInfer, and a stream by its first request, go to the application of",
        "    # the model named (field 1 of ModelInferRequest, after the 5-byte gRPC prefix);",
        "    # see cluster/grpc_routing.py.",
        f"    acl rayton_model_infer path {_INFER_PATH} {_STREAM_PATH}",
        f"    acl rayton_model_stream path {_STREAM_PATH}",
        f"    acl rayton_unary_infer path {_INFER_PATH}",
        "    http-request del-header application",
        f"    http-request wait-for-body time {_BODY_WAIT} at-least {_HEAD_BYTES}"
        " if rayton_model_infer !rayton_model_stream",
        f"    http-request wait-for-body time {_STREAM_WAIT} at-least 1 if rayton_model_stream",
        "    http-request set-header application %[req.body,bytes(5),protobuf(1)]"
        " if rayton_model_infer",
    ]


def _frontend_backend(frontend: str) -> list[str]:
    return [
        f"backend {FRONTEND_BACKEND}",
        "    # rayton's gRPC frontend: every call that is not a model's ModelInfer",
        "    mode http",
        "    log global",
        f"    server rayton-grpc-frontend {frontend} proto h2",
    ]


def _sections(lines: list[str]) -> dict[str, list[str]]:
    """Each ``backend NAME`` section's lines (its header first), by name."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if _SECTION.match(line):
            current = (
                sections.setdefault(line.split()[1], []) if line.startswith("backend ") else None
            )
        if current is not None:
            current.append(line)
    return sections


def _servers(section: list[str]) -> list[tuple[str, str, bool]]:
    """``(name, address, backup)`` of each ``server`` line of a backend section."""
    found = []
    for line in section:
        words = line.split()
        if len(words) >= 3 and words[0] == "server":
            found.append((words[1], words[2], "backup" in words))
    return found


def _h1_backend(app: str, sections: dict[str, list[str]]) -> list[str]:
    """The backend sending ``app``'s unary ModelInfer over HTTP/1.1 to its replicas (as its
    HTTP backend lists them), with Serve's gRPC fallback proxy as the backup."""
    lines = [
        f"backend {H1_BACKEND_PREFIX}{app}",
        "    # rayton: unary ModelInfer to the replicas' HTTP servers (grpc/over_http.py)",
        "    mode http",
        "    log global",
        "    http-reuse always",
        f"    http-request set-header application {app}",
        *_GRPC_ERRORS,
    ]
    for name, address, backup in _servers(sections[f"http-{app}"]):
        if not backup:
            lines.append(f"    server {name} {address} track http-{app}/{name}")
    for name, address, backup in _servers(sections[f"grpc-{app}"]):
        if backup:
            lines.append(f"    server {name} {address} proto h2 backup track grpc-{app}/{name}")
    return lines


def route_model_infer(config: str, frontend: str, host_app: str) -> str:
    """``config`` (Serve's HAProxy config) with Triton's gRPC routing; ``frontend`` is the
    ``host:port`` of rayton's gRPC frontend, ``host_app`` the shared CPU host's application.
    A config without Serve's gRPC frontend (gRPC off) comes back unchanged."""
    lines = config.splitlines()
    try:
        start = lines.index("frontend grpc_frontend")
    except ValueError:
        return config
    end = next((i for i in range(start + 1, len(lines)) if _SECTION.match(lines[i])), len(lines))
    section = lines[start:end]
    sections = _sections(lines)
    backends = set(sections)
    host_backend = f"grpc-{host_app}"
    # Applications with both an HTTP and a gRPC backend: their unary calls go over HTTP/1.1.
    h1_apps = [
        name.removeprefix("grpc-")
        for name in sections
        if name.startswith("grpc-") and f"http-{name.removeprefix('grpc-')}" in backends
    ]
    edited = [section[0]]
    rules_added = False
    for line in section[1:]:
        words = line.split()
        if line.strip().startswith("default_backend"):
            if host_backend in backends:  # a model it hosts, or one not (yet) deployed
                if host_app in h1_apps:
                    edited.append(
                        f"    use_backend {H1_BACKEND_PREFIX}{host_app} if rayton_unary_infer"
                    )
                edited.append(f"    use_backend {host_backend} if rayton_model_infer")
            edited.append(f"    default_backend {FRONTEND_BACKEND}")
            continue
        if words[:1] == ["use_backend"] and len(words) == 4 and words[2] == "if":
            app = words[1].removeprefix("grpc-")
            if words[1].startswith("grpc-") and app in h1_apps and words[3] == f"is_grpc-{app}":
                edited.append(
                    f"    use_backend {H1_BACKEND_PREFIX}{app} if {words[3]} rayton_unary_infer"
                )
        edited.append(line)
        if not rules_added and line.strip() == "log global":
            edited.extend(_routing_rules())
            rules_added = True
    if not rules_added:  # Serve's template changed shape: route nothing rather than guess
        return config
    rest = lines[end:]
    if host_backend in backends:
        # Serve's replica answers only calls naming its application: the host's, here.
        at = rest.index(f"backend {host_backend}") + 1
        rest[at:at] = [f"    http-request set-header application {host_app}"]
    h1_backends = [line for app in h1_apps for line in _h1_backend(app, sections)]
    result = [*lines[:start], *edited, *rest, *_frontend_backend(frontend), *h1_backends]
    return "\n".join(result) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Edit the config file in place: ``FRONTEND HOST_APP FILE``."""
    frontend, host_app, path = argv if argv is not None else sys.argv[1:]
    with open(path, encoding="utf-8") as f:
        config = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(route_model_infer(config, frontend, host_app))
    return 0


if __name__ == "__main__":
    sys.exit(main())
