"""The server application's arguments: ``args`` in ``serve_config.yaml`` and ``rayton serve``'s.

Its own module because both the application builders and the repository controller (which
runs on them) read it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from cluster.memory_budget import check_budget_setting, gpu_budget_bytes
from deployments.command_flag import Flag
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.observability.log_settings import LogSettings
from repo_adapter.backends.backend_files import (
    DEFAULT_BACKEND_DIRECTORY,
    BackendSettings,
    parse_backend_configs,
)

DEFAULT_POLL_SECS = 15.0
# A model whose replicas are not all up by then is UNAVAILABLE (its application is removed).
DEFAULT_LOAD_TIMEOUT_S = 300.0
DEFAULT_ON_DEMAND_TIMEOUT_S = 60.0


def _valid_budget(setting: str | None) -> str | None:
    return None if setting is None else check_budget_setting(setting)


def _valid_gpu_budget(setting: str | None) -> str | None:
    if setting is not None:
        gpu_budget_bytes(setting)
    return setting


# Triton's --http-max-input-size; `rayton build` and `rayton serve` both take it.
HttpMaxInputSize = Annotated[
    int,
    Field(gt=0, description="largest inference request body accepted (default 64 MiB, as Triton)"),
    Flag(metavar="BYTES"),
]


# Where python model instances run; `rayton build` and `rayton serve` both take it.
PythonInstances = Annotated[
    Literal["in-replica", "stub-process"],
    Field(
        description="stub-process: each python model instance runs in a process of its own, "
        "as in Triton (a crashing model fails only its own requests and is started again); "
        "in-replica: on a thread of its replica (no copies between processes, but a crashing "
        "model takes the replica and its other models down)"
    ),
    Flag(),
]
DEFAULT_PYTHON_INSTANCES = "stub-process"

# How requests reach a model's batcher; `rayton build` and `rayton serve` both take it.
BatchAdmission = Annotated[
    Literal["direct", "serve-batch"],
    Field(
        description="direct: requests go straight into the model's batch queue, which applies "
        "Triton's dynamic batching rules; serve-batch: through Ray Serve's @serve.batch first "
        "(its batch size, wait and utilization metrics on the Ray dashboard per model, at "
        "more CPU per request)"
    ),
    Flag(),
]
DEFAULT_BATCH_ADMISSION = "direct"


def _valid_backend_config(entries: list[str] | None) -> list[str] | None:
    parse_backend_configs(entries or ())  # ValueError names the entry not in the form
    return entries


# Triton's --backend-config: settings a C/C++ backend gets (TRITONBACKEND_BackendConfig).
BackendConfig = Annotated[
    list[str] | None,
    AfterValidator(_valid_backend_config),
    Field(
        description="a setting for a C/C++ backend, as Triton's --backend-config (repeatable): "
        "it reads them with TRITONBACKEND_BackendConfig"
    ),
    Flag(metavar="NAME,KEY=VALUE"),
]


def parse_cache_config(entries: list[str] | None) -> int:
    """Triton's ``--cache-config`` entries (``local,size=BYTES``): the local cache's size
    in bytes (0: no cache).

    Raises:
        ValueError: an entry not in that form, or a cache other than ``local``.
    """
    size = 0
    for entry in entries or ():
        cache, _, setting = entry.partition(",")
        key, equals, value = setting.partition("=")
        if not (cache and equals and key):
            raise ValueError(
                f"--cache-config option format is '<cache name>,<setting>=<value>', got '{entry}'"
            )
        if cache != "local":
            raise ValueError(
                f"--cache-config: only the 'local' response cache is supported, got '{cache}'"
            )
        if key != "size":
            raise ValueError(f"--cache-config: the local cache has no setting '{key}'")
        if not value.isdigit():
            raise ValueError(f"--cache-config: size must be a number of bytes, got '{value}'")
        size = int(value)
    return size


def _valid_cache_config(entries: list[str] | None) -> list[str] | None:
    parse_cache_config(entries)
    return entries


# Triton's --cache-config: the response cache, here one per node that its replicas share.
CacheConfig = Annotated[
    list[str] | None,
    AfterValidator(_valid_cache_config),
    Field(
        description="the response cache, as Triton's --cache-config local,size=BYTES: models "
        "whose config has response_cache { enable: true } answer a repeated request from it; "
        "each node keeps one cache of up to BYTES that its replicas share"
    ),
    Flag(metavar="local,size=BYTES"),
]


# Where C/C++ backends not kept in a model's own directory are; `rayton build` takes it too.
BackendDirectory = Annotated[
    str,
    Field(
        description='where a model\'s C/C++ backend (backend: "<name>" naming none of '
        "rayton's) is looked for after the model's version and model directories: "
        "DIR/<name>/libtriton_<name>.so, as Triton's --backend-directory"
    ),
    Flag(metavar="DIR"),
]


class ServerAppArgs(BaseModel):
    """``args`` of the server application in ``serve_config.yaml`` (and of ``rayton serve``).

    ``deploy_models`` False (a Serve config): the config's own model applications serve the
    models and the repository controller only watches them, so only ``model_control_mode:
    none`` applies. True (``rayton serve``): the controller deploys and changes them.

    The fields marked :class:`Flag` are ``rayton serve``'s flags as well.
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())
    model_repository: Annotated[str, Flag()] = Field(description="the model repository")
    models: list[str] | None = None  # a config's model selection; None: every model
    model_control_mode: Annotated[Literal["none", "poll", "explicit"], Flag()] = Field(
        "none",
        description="none: serve the repository as it is; poll: reload what changes on disk; "
        "explicit: serve --load-model models, then what the repository API loads",
    )
    load_models: Annotated[list[str] | None, Flag("--load-model", metavar="NAME")] = Field(
        None,
        description="explicit mode: load these models at start-up (repeatable; '*' for all)",
    )
    repository_poll_secs: Annotated[float, Flag()] = Field(
        DEFAULT_POLL_SECS,
        gt=0,
        description=f"poll mode: seconds between repository scans (default {DEFAULT_POLL_SECS:g})",
    )
    model_load_timeout_secs: Annotated[float, Flag()] = Field(
        DEFAULT_LOAD_TIMEOUT_S,
        gt=0,
        description="a model whose replicas are not all up by then is UNAVAILABLE "
        f"(default {DEFAULT_LOAD_TIMEOUT_S:g})",
    )
    load_on_demand: Annotated[bool, Flag()] = Field(
        False,
        description="list every model of the repository but load each on its first request "
        "(inference, metadata or config), which waits for it; with --model-control-mode "
        "explicit, the repository API loads and unloads as well",
    )
    load_on_demand_timeout_secs: Annotated[float, Flag()] = Field(
        DEFAULT_ON_DEMAND_TIMEOUT_S,
        gt=0,
        description="how long a request waits for its model to load on demand before it is "
        f"answered UNAVAILABLE (default {DEFAULT_ON_DEMAND_TIMEOUT_S:g})",
    )
    memory_budget: Annotated[
        str | None, AfterValidator(_valid_budget), Flag(metavar="BYTES|N%")
    ] = Field(
        None,
        description="with --load-on-demand: the memory loaded models may take on each node "
        "(500MB, 8GiB, or a percentage of the node's memory); above it the least recently used "
        "idle models are unloaded (they load again on their next request)",
    )
    gpu_memory_budget: Annotated[
        str | None, AfterValidator(_valid_gpu_budget), Flag(metavar="BYTES")
    ] = Field(
        None,
        description="with --load-on-demand: the GPU memory loaded models may take on each GPU "
        "a node declares by its rayton_gpu_<i> resource (20GiB); each GPU model goes to one "
        "GPU, the one with room, and the least recently used idle models there are unloaded "
        "to make it",
    )
    strict_readiness: Annotated[bool, Flag()] = Field(
        True, description="true: /v2/health/ready fails while a model failed to load (as Triton)"
    )
    deploy_models: bool = False
    cpu_models: Annotated[Literal["shared", "dedicated"], Flag()] = Field(
        "shared",
        description="shared: CPU models run together in one host application (one process "
        "holds many models, as in Triton); dedicated: each model gets its own application and "
        "one replica per instance (per-model scaling, ~150 MB per replica)",
    )
    host_replicas: Annotated[int, Flag(metavar="N")] = Field(
        1,
        ge=1,
        description="replicas of the shared CPU-model host; each holds every hosted model "
        "(N times the memory) and brings its own event loop, so N processes share a node's "
        "cores and a request goes on to another replica while one restarts",
    )
    python_instances: PythonInstances = DEFAULT_PYTHON_INSTANCES
    batch_admission: BatchAdmission = DEFAULT_BATCH_ADMISSION
    backend_directory: BackendDirectory = DEFAULT_BACKEND_DIRECTORY
    backend_config: BackendConfig = None
    cache_config: CacheConfig = None
    allow_client_shm: Annotated[bool, Flag()] = Field(
        False,
        description="let clients register system shared-memory regions and name them for "
        "inputs and outputs (default false, as Triton since 2.71); clients must run on the "
        "head node, where the regions are registered",
    )
    # None refuses Triton's file: parameters (model code from the network).
    model_file_override_dir: Annotated[str | None, Flag(metavar="DIR")] = Field(
        None,
        description="allow repository loads with file: parameters (model files sent by the "
        "client, code included) and write them under DIR (shared storage on several nodes); "
        "refused without it",
    )
    http_max_input_size: HttpMaxInputSize = DEFAULT_MAX_INPUT_SIZE
    # Triton's --log-* start-up settings (the logging extension changes all but the file).
    log_file: Annotated[str, Flag(metavar="PATH")] = Field(
        "", description="also write rayton's and the python models' log lines to PATH on each node"
    )
    log_info: Annotated[bool, Flag()] = Field(True, description="info lines")
    log_warning: Annotated[bool, Flag()] = Field(True, description="warning lines")
    log_error: Annotated[bool, Flag()] = Field(True, description="error lines")
    log_verbose_level: Annotated[int, Flag("--log-verbose", metavar="LEVEL")] = Field(
        0, ge=0, description="verbose lines when > 0"
    )
    log_format: Annotated[Literal["default", "ISO8601"], Flag()] = "default"
    # Triton's --trace-config start-up settings (the trace extension changes all but the file);
    # `rayton serve --trace-config` sets them (parse_trace_config).
    trace_file: str = ""
    trace_level: list[Literal["OFF", "TIMESTAMPS", "TENSORS"]] = Field(default_factory=list)
    trace_rate: int = Field(1000, gt=0, lt=2**32)
    trace_count: int = Field(-1, ge=-1)
    trace_log_frequency: int = Field(0, ge=0, lt=2**32)
    trace_mode: Literal["triton", "opentelemetry"] = "triton"
    trace_otel_url: str = "http://localhost:4318/v1/traces"  # OTLP/HTTP traces endpoint
    trace_otel_resource: dict[str, str] = Field(default_factory=dict)

    def backend_settings(self) -> BackendSettings:
        """Where backends rayton does not have are found, and their --backend-config."""
        return BackendSettings.from_flags(self.backend_directory, self.backend_config)

    def response_cache_bytes(self) -> int:
        """Each node's response cache size (0: no response cache)."""
        return parse_cache_config(self.cache_config)

    def log_settings(self) -> LogSettings:
        """The start-up log settings these args describe (the ``log_*`` fields)."""
        return LogSettings(**self.model_dump(include={field.name for field in fields(LogSettings)}))

    @model_validator(mode="after")
    def _config_owned_models_do_not_change(self) -> ServerAppArgs:
        if not self.deploy_models and self.model_control_mode != "none":
            raise ValueError(
                f"model_control_mode '{self.model_control_mode}' needs rayton to deploy the "
                "models itself ('rayton serve'); in a Serve config the config owns the model "
                "applications: change it and 'serve deploy' it again"
            )
        return self

    @model_validator(mode="after")
    def _on_demand_needs_deploys(self) -> ServerAppArgs:
        if self.load_on_demand and not self.deploy_models:
            raise ValueError(
                "load_on_demand needs rayton to deploy the models itself ('rayton serve'); a "
                "Serve config deploys every model it lists"
            )
        if self.load_on_demand and self.model_control_mode == "poll":
            raise ValueError("load_on_demand works with model_control_mode none or explicit")
        budgets = (self.memory_budget, self.gpu_memory_budget)
        if any(b is not None for b in budgets) and not self.load_on_demand:
            raise ValueError(
                "a memory budget unloads models that must load again on their next request: "
                "it needs load_on_demand (--load-on-demand)"
            )
        return self

    @model_validator(mode="after")
    def _traces_need_a_file(self) -> ServerAppArgs:
        tracing = [level for level in self.trace_level if level != "OFF"]
        if tracing and not self.trace_file and self.trace_mode == "triton":
            raise ValueError(
                "tracing needs a trace file: --trace-config triton,file=PATH (trace_file)"
            )
        if "OFF" in self.trace_level and tracing:
            raise ValueError("trace level OFF cannot be combined with other levels")
        return self


def parse_trace_config(values: list[str]) -> dict[str, Any]:
    """Triton's ``--trace-config`` values as :class:`ServerAppArgs` fields.

    ``rate=N``, ``count=N``, ``level=TIMESTAMPS|TENSORS|OFF`` (repeatable),
    ``mode=triton|opentelemetry``, ``triton,file=PATH``, ``triton,log-frequency=N``,
    ``opentelemetry,url=URL``, ``opentelemetry,resource=KEY=VALUE`` (repeatable).

    Raises:
        ValueError: a setting that is unknown, malformed, or not supported.
    """
    fields: dict[str, Any] = {}
    for value in values:
        mode, comma, setting = value.partition(",")
        if not comma or "=" in mode:  # no mode: a global setting (its value may hold commas)
            mode, setting = "", value
        name, equals, text = setting.partition("=")
        if not equals:
            raise ValueError(f"--trace-config expects [MODE,]SETTING=VALUE, got '{value}'")
        key = (mode, name)
        if key == ("", "level"):
            fields.setdefault("trace_level", []).append(text)
        elif key == ("", "mode"):
            if text not in ("triton", "opentelemetry"):
                raise ValueError(f"--trace-config: unknown trace mode '{text}'")
            fields["trace_mode"] = text
        elif key == ("opentelemetry", "url"):
            fields["trace_otel_url"] = text
        elif key == ("opentelemetry", "resource"):
            resource, equals, resource_value = text.partition("=")
            if not equals or not resource:
                raise ValueError(f"--trace-config: resource expects KEY=VALUE, got '{text}'")
            fields.setdefault("trace_otel_resource", {})[resource] = resource_value
        elif key in (("", "rate"), ("", "count"), ("triton", "log-frequency")):
            try:
                number = int(text)
            except ValueError:
                raise ValueError(
                    f"--trace-config: {name} must be an integer, got '{text}'"
                ) from None
            field = {"rate": "trace_rate", "count": "trace_count"}.get(name, "trace_log_frequency")
            fields[field] = number
        elif key == ("triton", "file"):
            fields["trace_file"] = text
        else:
            raise ValueError(f"--trace-config: unknown setting '{value}'")
    return fields
