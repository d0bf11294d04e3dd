"""The one small interface every model backend implements, and the shared tensor batching.

A backend instance is one Triton model instance: it loads one model version on one device,
executes a list of requests (a dynamic batch) and unloads. Framework backends (ONNX Runtime,
TorchScript, TensorRT) subclass :class:`TensorBackend`, which concatenates the requests along
the batch dimension, runs once and splits the outputs back; the python backend receives the
request list unchanged, as Triton's python backend does.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.backend_files import is_python_based
from repo_adapter.datatypes import config_to_protocol, protocol_to_numpy
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.implicit_state import backend_inputs, backend_outputs
from repo_adapter.inference_types import (
    BackendReports,
    ComputeTimes,
    InferRequest,
    InferResponse,
    InferTensor,
)


@dataclass(frozen=True)
class InstanceSpec:
    """Where a model instance runs: Triton's instance name, kind (CPU/GPU/MODEL) and device.

    ``gpu_memory_fraction``: the share of the device's memory this instance may take (its
    runtime's memory cap; 0: no cap), so instances packed on one GPU cannot starve each other.
    ``own_process``: run the instance in a process of its own (python models: a stub process,
    as Triton runs them; framework backends run their native code in the replica and ignore
    it).
    """

    name: str
    kind: str = "CPU"
    device_id: int = 0
    gpu_memory_fraction: float = 0.0
    own_process: bool = False

    @classmethod
    def cpu(cls, model_name: str) -> InstanceSpec:
        return cls(name=f"{model_name}_0", kind="CPU", device_id=0)


@dataclass(frozen=True)
class ModelVersion:
    """One version of one model, as found in the repository (normalised config)."""

    name: str
    version: int
    config: mc.ModelConfig
    model_dir: Path
    # A backend rayton does not have: a Triton C/C++ library or a python-based backend's model.py
    backend_file: Path | None = None
    # That backend's settings (TRITONBACKEND_BackendConfig's "cmdline"), for a C/C++ library
    backend_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def version_dir(self) -> Path:
        return self.model_dir / str(self.version)

    @property
    def model_path(self) -> Path:
        if self.python_based_backend:
            return self.backend_file  # the backend's model.py serves every version
        return self.version_dir / self.config.default_model_filename

    @property
    def python_based_backend(self) -> bool:
        """Whether a python-based backend (its ``model.py``) serves this model."""
        return self.backend_file is not None and is_python_based(self.backend_file)


@dataclass
class Execution(Sequence["InferResponse | InferenceServerError"]):
    """What one batch's execution gave: a response or an error per request, in order, and
    how long the backend spent gathering inputs and in the model itself (None: it measured no
    phases, and the batcher counts the whole execution as inference). It reads as the sequence
    of its results."""

    results: list[InferResponse | InferenceServerError]
    compute: ComputeTimes | None = None
    # A backend that reports its own statistics (Triton's C backends): recorded instead of
    # the batcher's measurements.
    reports: BackendReports | None = None

    def __getitem__(self, index):  # type: ignore[override]
        return self.results[index]

    def __len__(self) -> int:
        return len(self.results)


class BatchChain(Protocol):
    """The batcher's side of an instance's batches, for instances that run batches one after
    another on a thread of their own; both methods are thread-safe."""

    def next_batch(self) -> Sequence[InferRequest]:
        """The batch to run now, formed by the batcher's rule; empty when none is due."""

    def finished(self, requests: Sequence[InferRequest], outcome: Execution | Exception) -> None:
        """Hand back one executed batch: its results, or what it raised."""


class Backend(abc.ABC):
    """A loaded model instance; its class describes the backend to the repository scan.

    Subclasses set ``name`` to the config's backend name and the facts below, which Triton's
    core keeps in its own tables (``constants.h``, ``AutoCompleteBackendFields``,
    ``SetDefaultInstanceCount``).
    """

    name: str = ""
    # Platform names that mean this backend; the first is filled in when a config names only
    # the backend. Empty: the backend takes any platform (python).
    platforms: tuple[str, ...] = ()
    # The file (or directory) of a version when the config names none.
    default_model_filename: str = ""
    # Place in core's auto-detection by model file (lower first); None: never detected.
    probe_priority: int | None = None
    # Instances of a KIND_CPU group that gives no count.
    default_cpu_instance_count: int = 1

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        self.model = model
        self.config = model.config
        self.instance = instance

    @classmethod
    def for_instance(cls, model: ModelVersion, instance: InstanceSpec) -> Backend:
        """The backend object that serves ``instance`` (a backend that runs instances in
        several ways picks one here; by default this class)."""
        return cls(model, instance)

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, model_dir: Path) -> None:
        """Fill missing config fields from the model files (Triton's backend auto-complete).

        Called once per model at repository scan time, before normalisation. The default
        completes nothing: such backends need an explicit config.
        """
        return

    @abc.abstractmethod
    def load(self) -> None:
        """Load the model; raise :class:`InferenceServerError` (UNAVAILABLE) on failure."""

    @abc.abstractmethod
    async def execute(self, requests: Sequence[InferRequest]) -> Execution:
        """Run one batch; one response or per-request error per request, in order.

        Raising fails the whole batch (Triton reports INTERNAL to every request).
        """

    def unload(self) -> None:  # noqa: B027 - optional hook
        """Release the model's resources."""


class TensorBackend(Backend):
    """Backends that run one forward pass on concatenated tensors.

    Subclasses implement :meth:`run` on a dict of batched numpy inputs. Inputs arrive with
    their config ``reshape`` applied (request validation does it, once, with core's rule) and
    outputs may come back in their ``reshape`` shape, which the model layer reports in the
    config's dims.

    An execution is two steps, :meth:`prepare` (gather the inputs) and :meth:`run_prepared`
    (the forward pass, outputs split per request), and each instance has one thread of its own
    (frameworks with thread-local state always see the same thread): the batcher's scheduler
    (:mod:`deployments.core.batching.scheduling`) decides where each batch runs.
    :meth:`execute` runs one batch on the instance's thread.
    """

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self.thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{instance.name}-exec"
        )
        self._mean_execution_s: float | None = None  # unknown until the first execution
        # The config's inputs, then a sequence model's control and state inputs (the sequence
        # batcher adds them); the config's outputs, then its state outputs
        self._input_names = (
            [tensor.name for tensor in self.config.input]
            + [control.name for control in self.config.sequence_batching.control_input]
            + backend_inputs(self.config)
        )
        self._output_configs = {
            tensor.name: tensor for tensor in [*self.config.output, *backend_outputs(self.config)]
        }

    @abc.abstractmethod
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Forward pass: batched inputs by config name -> outputs by config name."""

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    @property
    def mean_execution_s(self) -> float | None:
        """The recent mean duration of an execution (None before the first one)."""
        return self._mean_execution_s

    async def execute(self, requests: Sequence[InferRequest]) -> Execution:
        requests = list(requests)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.thread, self.run_prepared, requests)

    def run_prepared(
        self, requests: list[InferRequest], prepared: PreparedBatch | None = None
    ) -> Execution:
        """Run the model on ``requests`` (``prepared``: their gathered inputs; None: gather
        them now) and split its outputs per request."""
        start = time.perf_counter()
        try:
            if prepared is None:
                prepared = self.prepare(requests)
            return self._run_gathered(requests, prepared)
        finally:
            elapsed = time.perf_counter() - start
            mean = self._mean_execution_s
            self._mean_execution_s = elapsed if mean is None else 0.8 * mean + 0.2 * elapsed

    def unload(self) -> None:
        self.thread.shutdown(wait=False)

    def prepare(self, requests: list[InferRequest]) -> PreparedBatch:
        """Gather the inputs of ``requests`` into the model's batch; a failure is kept and
        raised when the batch runs, so it fails that batch alone."""
        batching = self.config.max_batch_size > 0
        start = time.monotonic_ns()
        rows = [request_rows(request) if batching else 1 for request in requests]
        try:
            inputs, error = self._gather_inputs(requests, batching), None
        except Exception as err:
            inputs, error = {}, err
        return PreparedBatch(rows, inputs, error, time.monotonic_ns() - start)

    def _run_gathered(self, requests: list[InferRequest], gathered: PreparedBatch) -> Execution:
        if gathered.error is not None:
            raise gathered.error
        infer_start = time.monotonic_ns()
        outputs = self.run(gathered.inputs)
        infer_end = time.monotonic_ns()
        batching = self.config.max_batch_size > 0
        results = self._scatter_outputs(requests, outputs, gathered.rows, batching)
        return Execution(results, ComputeTimes(gathered.input_ns, infer_end - infer_start, 0))

    def _gather_inputs(self, requests: list[InferRequest], batching: bool) -> dict[str, np.ndarray]:
        gathered: dict[str, np.ndarray] = {}
        for name in self._input_names:
            parts = [r.input(name) for r in requests]
            present = [p for p in parts if p is not None]
            if not present:
                continue  # optional input absent from every request
            if len(present) != len(parts):
                raise InferenceServerError(
                    f"optional input '{name}' must be given by every request of a batch",
                    StatusCode.INTERNAL,
                )
            arrays = [p.data for p in present]
            if batching:
                array = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)
            else:
                array = arrays[0]
            gathered[name] = array
        return gathered

    def _scatter_outputs(
        self,
        requests: list[InferRequest],
        outputs: dict[str, np.ndarray],
        rows: list[int],
        batching: bool,
    ) -> Execution:
        tensors: dict[str, tuple[str, list[np.ndarray]]] = {}
        offsets = np.cumsum([0, *rows])
        for name, cfg in self._output_configs.items():
            if name not in outputs:
                raise InferenceServerError(
                    f"output '{name}' was not produced by model '{self.model.name}'",
                    StatusCode.INTERNAL,
                )
            datatype = config_to_protocol(cfg.data_type)
            array = _as_output_dtype(np.asarray(outputs[name]), datatype)
            if batching:
                pieces = [array[offsets[i] : offsets[i + 1]] for i in range(len(requests))]
            else:
                pieces = [array]
            tensors[name] = (datatype, pieces)
        return [
            InferResponse(
                model_name=self.model.name,
                model_version=str(self.model.version),
                id=request.id,
                outputs=[
                    InferTensor(name, datatype, pieces[i])
                    for name, (datatype, pieces) in tensors.items()
                ],
            )
            for i, request in enumerate(requests)
        ]


@dataclass
class PreparedBatch:
    """A batch's inputs concatenated for the model (or why they could not be), its rows per
    request and how long gathering took."""

    rows: list[int]
    inputs: dict[str, np.ndarray]
    error: Exception | None
    input_ns: int


def request_rows(request: InferRequest) -> int:
    """The batch rows ``request`` brings (its first input's leading dimension)."""
    return request.inputs[0].data.shape[0] if request.inputs else 1


def _as_output_dtype(array: np.ndarray, datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        if array.dtype == np.object_ and all(isinstance(x, bytes) for x in array.flat):
            return array
        flat = [x if isinstance(x, bytes) else str(x).encode("utf-8") for x in array.flat]
        result = np.empty(len(flat), dtype=np.object_)
        result[:] = flat
        return result.reshape(array.shape)
    dtype = protocol_to_numpy(datatype)
    return array if array.dtype == dtype else array.astype(dtype)
