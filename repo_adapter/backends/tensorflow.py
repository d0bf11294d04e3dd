"""Triton's ``tensorflow`` backend for SavedModels (``platform: "tensorflow_savedmodel"``,
``model.savedmodel/``), on TensorFlow 2 in this process.

A version runs one signature of the SavedModel: ``serving_default``, or the one the
``TF_SIGNATURE_DEF`` parameter names, loaded with the ``TF_GRAPH_TAG`` tag set (default
``serve``), as Triton's backend selects them. Inputs and outputs are auto-completed from that
signature (names, types, shapes; a dynamic first dimension everywhere means batching). A
``KIND_GPU`` instance runs on ``/GPU:0`` (the replica's only visible GPU) where TensorFlow sees
one. TensorFlow's thread pools belong to the process: ``TF_NUM_INTRA_THREADS`` /
``TF_NUM_INTER_THREADS`` take effect for the first TensorFlow model a process loads.
GraphDef models (``tensorflow_graphdef``) are not supported.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import InstanceSpec, ModelVersion, TensorBackend
from repo_adapter.backends.model_io import (
    TensorInfo,
    autocomplete_file,
    check_tensors,
    complete_config,
)
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode

logger = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
DEFAULT_TAG = "serve"
_TF_TYPES = {
    "float16": mc.TYPE_FP16,
    "float32": mc.TYPE_FP32,
    "float64": mc.TYPE_FP64,
    "bfloat16": mc.TYPE_BF16,
    "int8": mc.TYPE_INT8,
    "int16": mc.TYPE_INT16,
    "int32": mc.TYPE_INT32,
    "int64": mc.TYPE_INT64,
    "uint8": mc.TYPE_UINT8,
    "uint16": mc.TYPE_UINT16,
    "uint32": mc.TYPE_UINT32,
    "uint64": mc.TYPE_UINT64,
    "bool": mc.TYPE_BOOL,
    "string": mc.TYPE_STRING,
}
_threads_set = False


class TensorFlowBackend(TensorBackend):
    """A Triton ``tensorflow`` SavedModel instance: one loaded signature."""

    name = "tensorflow"
    platforms = ("tensorflow_savedmodel",)
    default_model_filename = "model.savedmodel"
    probe_priority = 15  # core looks for a SavedModel after a TensorRT plan, before ONNX
    default_cpu_instance_count = 2

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self._signature = None
        self._device = "/CPU:0"
        self._text_in = {t.name for t in self.config.input if t.data_type == mc.TYPE_STRING}

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, model_dir: Path) -> None:
        """Inputs, outputs and ``max_batch_size`` from the signature; skipped when the config
        declares inputs and outputs."""
        if config.input and config.output:
            return
        path = autocomplete_file(config, model_dir, cls.default_model_filename)
        if path is None or not path.is_dir():
            return  # the repository scan reports the missing version or directory
        inputs, outputs = _signature_infos(config, _load_signature(config, path))
        complete_config(config, inputs, outputs)

    def load(self) -> None:
        path = self.model.model_path
        if not path.is_dir():
            raise InferenceServerError(
                f"unable to find '{path}' for model instance '{self.instance.name}'",
                StatusCode.UNAVAILABLE,
            )
        tf = _tf()
        _set_threads(tf, self.config)
        if self.instance.kind == "GPU":
            if not tf.config.list_physical_devices("GPU"):
                raise InferenceServerError(
                    f"model '{self.config.name}' instance '{self.instance.name}' is KIND_GPU, "
                    "but TensorFlow sees no GPU here",
                    StatusCode.UNAVAILABLE,
                )
            self._device = f"/GPU:{self.instance.device_id}"
        with tf.device(self._device):
            signature = _load_signature(self.config, path)
        inputs, outputs = _signature_infos(self.config, signature)
        check_tensors(self.config, "input", self.config.input, inputs)
        check_tensors(self.config, "output", self.config.output, outputs)
        self._signature = signature

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tf = _tf()
        feed = {}
        for name, array in inputs.items():
            if name in self._text_in:  # bytes objects: TensorFlow's strings
                array = np.array(list(array.flat), dtype=object).reshape(array.shape)
            feed[name] = tf.constant(array)
        try:
            with tf.device(self._device):
                results = self._signature(**feed)
        except Exception as err:  # TensorFlow's own error types
            raise InferenceServerError(f"TensorFlow error: {err}", StatusCode.INTERNAL) from None
        return {name: tensor.numpy() for name, tensor in results.items()}

    def unload(self) -> None:
        self._signature = None
        super().unload()


def _tf():
    try:
        import tensorflow
    except ImportError as err:
        raise InferenceServerError(
            f"TensorFlow is not installed (pip install 'rayton[tensorflow]'): {err}",
            StatusCode.UNAVAILABLE,
        ) from None
    return tensorflow


def _param(config: mc.ModelConfig, key: str, default: str = "") -> str:
    if key not in config.parameters:
        return default
    return config.parameters[key].string_value.strip()


def _set_threads(tf, config: mc.ModelConfig) -> None:
    global _threads_set
    intra, inter = _param(config, "TF_NUM_INTRA_THREADS"), _param(config, "TF_NUM_INTER_THREADS")
    for key, value in (("TF_NUM_INTRA_THREADS", intra), ("TF_NUM_INTER_THREADS", inter)):
        if value and not value.isdigit():
            raise ModelConfigError(
                f"model '{config.name}': parameter '{key}' must be a non-negative integer, "
                f"got '{value}'"
            )
    if _threads_set or not (intra or inter):
        return
    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(int(intra))
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(int(inter))
        _threads_set = True
    except RuntimeError as err:  # TensorFlow already started its pools in this process
        logger.warning("model '%s': TensorFlow threads already set: %s", config.name, err)


def _load_signature(config: mc.ModelConfig, path: Path):
    tf = _tf()
    tag = _param(config, "TF_GRAPH_TAG", DEFAULT_TAG)
    key = _param(config, "TF_SIGNATURE_DEF", DEFAULT_SIGNATURE)
    try:
        loaded = tf.saved_model.load(str(path), tags=[tag])
    except Exception as err:  # a corrupt or partial SavedModel, a wrong tag
        raise InferenceServerError(
            f"failed to load model '{config.name}': TensorFlow cannot load the SavedModel "
            f"'{path}' (tag '{tag}'): {err}",
            StatusCode.UNAVAILABLE,
        ) from None
    signatures = getattr(loaded, "signatures", {})
    if key not in signatures:
        raise InferenceServerError(
            f"failed to load model '{config.name}': the SavedModel has no signature '{key}' "
            f"(it has: {', '.join(signatures) or 'none'}); name one with TF_SIGNATURE_DEF",
            StatusCode.UNAVAILABLE,
        )
    signature = signatures[key]
    signature._rayton_owner = loaded  # keeps the loaded object (and its variables) alive
    return signature


def _signature_infos(config: mc.ModelConfig, signature):
    _, specs = signature.structured_input_signature
    inputs = {name: _info(config, name, spec) for name, spec in specs.items()}
    outputs = {
        name: _info(config, name, spec) for name, spec in signature.structured_outputs.items()
    }
    return inputs, outputs


def _info(config: mc.ModelConfig, name: str, spec) -> TensorInfo:
    dtype = spec.dtype.name
    if dtype not in _TF_TYPES:
        raise InferenceServerError(
            f"model '{config.name}': unsupported TensorFlow type '{dtype}' for I/O '{name}'",
            StatusCode.UNSUPPORTED,
        )
    if spec.shape.rank is None:
        dims: tuple[int, ...] = (-1,)
    else:
        dims = tuple(-1 if d is None else int(d) for d in spec.shape.as_list())
    return TensorInfo(name, _TF_TYPES[dtype], dims)
