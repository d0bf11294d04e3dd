#!/usr/bin/env python
"""Classify images with a Triton-compatible server, in the manner of Triton's ``image_client``.

Usage::

    python examples/client.py [-m image_pipeline] [-c 3] [-b 1] [-s NONE|INCEPTION|VGG|IMAGENET]
                              [-u 127.0.0.1:8000] [-i http|grpc] [--async]
                              IMAGE_OR_DIR [IMAGE_OR_DIR ...]

The client asks the server for the model's metadata and configuration (as ``image_client``'s
``parse_model`` does) and picks its input mode from them:

- a model whose single input is UINT8 with one dimension (besides the batch dimension), such
  as the ``image_pipeline`` ensemble, receives the encoded image files as bytes and does its
  own preprocessing on the server;
- a model whose input is a 3-D image tensor (``FORMAT_NCHW``/``FORMAT_NHWC``), such as
  ``image_classifier_onnx``, receives tensors preprocessed here: RGB, bilinear resize, then
  the scaling ``-s`` names, as ``image_client``'s: ``NONE`` (pixels 0-255), ``INCEPTION``
  ([-1, 1]), ``VGG`` (0-255 less the per-channel means 123, 117, 104). The default,
  ``IMAGENET``, is what the example models were built for and what the ``preprocess`` model
  does ([0, 1], then ImageNet's mean and standard deviation); ``image_client``'s default is
  ``NONE``.

Results come back through the classification extension (``class_count=-c``) and print as::

    Request 0, batch size 1
        0.123456 (3) = mug

Only ``tritonclient``, numpy and Pillow are needed; the script imports nothing from this
project, so it runs on any client machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from tritonclient.utils import InferenceServerException

DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}

# Must stay identical to the `preprocess` model (examples/generate_repository.py), so that
# sending a tensor to a classifier and sending bytes to the ensemble give the same scores.
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


VGG_MEANS = np.array([123, 117, 104], dtype=np.float32).reshape(3, 1, 1)
SCALINGS = ("NONE", "INCEPTION", "VGG", "IMAGENET")
DEFAULT_SCALING = "IMAGENET"


def scale(pixels: np.ndarray, scaling: str = DEFAULT_SCALING) -> np.ndarray:
    """Scale an RGB CHW array of 0-255 pixel values as ``-s`` names it (see the module doc)."""
    if scaling == "NONE":
        return pixels
    if scaling == "INCEPTION":
        return pixels / 127.5 - 1.0
    if scaling == "VGG":
        return pixels - VGG_MEANS
    if scaling == "IMAGENET":
        return (pixels / 255.0 - MEAN) / STD
    raise ValueError(f"unknown scaling '{scaling}': one of {', '.join(SCALINGS)}")


def preprocess(
    encoded: bytes, height: int, width: int, scaling: str = DEFAULT_SCALING
) -> np.ndarray:
    """Decode one encoded image into a scaled FP32 CHW array (``IMAGENET``: as the preprocess
    model)."""
    image = Image.open(io.BytesIO(encoded)).convert("RGB")
    image = image.resize((width, height), Image.Resampling.BILINEAR)
    pixels = np.asarray(image, dtype=np.float32).transpose(2, 0, 1)
    return scale(pixels, scaling)


@dataclass(frozen=True)
class ModelInfo:
    """What the client needs to know about the model, taken from metadata and config.

    Attributes:
        name: Model name.
        input_name: Name of the single input tensor.
        input_datatype: Protocol datatype of the input ("UINT8", "FP32", ...).
        output_name: Name of the single output tensor (classified by the server).
        max_batch_size: The config's ``max_batch_size``; 0 means no batch dimension.
        encoded: True when the model takes encoded image bytes, False for image tensors.
        layout: "NCHW" or "NHWC" for tensor inputs, "" for encoded inputs.
        height: Input image height for tensor inputs.
        width: Input image width for tensor inputs.
    """

    name: str
    input_name: str
    input_datatype: str
    output_name: str
    max_batch_size: int
    encoded: bool
    layout: str = ""
    height: int = 0
    width: int = 0

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0


def parse_model(metadata: dict[str, Any], config: dict[str, Any]) -> ModelInfo:
    """Check that the model is an image classifier this client can drive, like ``image_client``.

    Args:
        metadata: Model metadata (``inputs``/``outputs`` with ``name``, ``datatype``, ``shape``;
            shapes include the batch dimension ``-1`` when the model batches).
        config: Model configuration as a dict (``max_batch_size``, ``input[].format``).

    Returns:
        The model's input/output names and input mode.

    Raises:
        ValueError: The model does not look like a single-input image classifier.
    """
    name = metadata.get("name", "")
    if len(metadata.get("inputs", [])) != 1:
        raise ValueError(f"expecting 1 input, model '{name}' has {len(metadata['inputs'])}")
    if len(metadata.get("outputs", [])) != 1:
        raise ValueError(f"expecting 1 output, model '{name}' has {len(metadata['outputs'])}")
    input_meta, output_meta = metadata["inputs"][0], metadata["outputs"][0]
    # The classification extension cannot rank these types (Triton answers INVALID_ARG).
    if output_meta["datatype"] in ("BYTES", "FP16", "BF16"):
        raise ValueError(
            f"model '{name}' output type {output_meta['datatype']} cannot be classified"
        )

    max_batch_size = int(config.get("max_batch_size", 0))
    shape = [int(dim) for dim in input_meta["shape"]]
    dims = shape[1:] if max_batch_size > 0 else shape
    common = {
        "name": name,
        "input_name": input_meta["name"],
        "input_datatype": input_meta["datatype"],
        "output_name": output_meta["name"],
        "max_batch_size": max_batch_size,
    }
    if input_meta["datatype"] == "UINT8" and len(dims) == 1:
        return ModelInfo(encoded=True, **common)
    if len(dims) != 3:
        raise ValueError(
            f"expecting input to be encoded image bytes (UINT8, 1 dim) or an image tensor "
            f"(3 dims), model '{name}' input has shape {dims}"
        )

    layout = _input_layout(config, input_meta["name"], dims)
    channels, height, width = dims if layout == "NCHW" else (dims[2], dims[0], dims[1])
    if channels != 3 or height < 1 or width < 1:
        raise ValueError(
            f"expecting a fixed-size 3-channel image input, model '{name}' input has "
            f"{layout} shape {dims}"
        )
    return ModelInfo(encoded=False, layout=layout, height=height, width=width, **common)


def _input_layout(config: dict[str, Any], input_name: str, dims: Sequence[int]) -> str:
    """NCHW or NHWC from the config's input ``format``, else guessed from the channel dim."""
    inputs = config.get("input", [])
    input_config = next((i for i in inputs if i.get("name") == input_name), {})
    fmt = input_config.get("format", "FORMAT_NONE")
    if fmt in ("FORMAT_NCHW", "FORMAT_NHWC"):
        return fmt.removeprefix("FORMAT_")
    # Auto-completed configs (e.g. ONNX without config.pbtxt) say FORMAT_NONE; image_client
    # refuses those, but the channel dimension is unambiguous for RGB images.
    if dims[0] == 3:
        return "NCHW"
    if dims[-1] == 3:
        return "NHWC"
    raise ValueError(f"unexpected input format {fmt} for input '{input_name}'")


def make_batch(
    encoded_images: Sequence[bytes], model: ModelInfo, scaling: str = DEFAULT_SCALING
) -> np.ndarray:
    """Build the input tensor for one request from the encoded image files.

    Args:
        encoded_images: One encoded file per batch row (exactly one for non-batching models).
        model: Parsed model information.
        scaling: How tensors preprocessed here are scaled (not used for encoded images).

    Returns:
        ``[batch, max_len]`` UINT8 (zero-padded rows) or ``[batch, ...image dims]`` for
        batching models; the same without the batch dimension otherwise.
    """
    if model.encoded:
        longest = max(len(data) for data in encoded_images)
        # A tensor must be rectangular: shorter files are zero-padded, which image decoders
        # ignore because they stop at the format's end marker.
        rows = np.zeros((len(encoded_images), longest), dtype=np.uint8)
        for row, data in zip(rows, encoded_images, strict=True):
            row[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    else:
        images = [preprocess(data, model.height, model.width, scaling) for data in encoded_images]
        if model.layout == "NHWC":
            images = [image.transpose(1, 2, 0) for image in images]
        rows = np.stack(images).astype(_numpy_dtype(model.input_datatype))
    return rows if model.batching else rows[0]


def _numpy_dtype(datatype: str) -> np.dtype:
    from tritonclient.utils import triton_to_np_dtype

    return np.dtype(triton_to_np_dtype(datatype))


def format_classifications(output: np.ndarray, batching: bool) -> list[str]:
    """Lines ``    <score> (<index>) = <label>`` for a classification output tensor.

    Args:
        output: The BYTES output of the classification extension; ``[batch, k]`` when the
            model batches, ``[k]`` otherwise; elements are ``"score:index[:label]"``.
        batching: Whether the model batches.

    Returns:
        One line per element, rows in order.
    """
    rows = output if batching else [output]
    lines = []
    for row in rows:
        for entry in row:
            text = entry.decode("utf-8") if isinstance(entry, bytes) else str(entry)
            # Labels may themselves contain ':', so split at most twice.
            score, index, *label = text.split(":", 2)
            lines.append(f"    {score} ({index}) = {label[0] if label else ''}".rstrip())
    return lines


class Connection:
    """The same calls over ``tritonclient.http`` or ``tritonclient.grpc``.

    Metadata and config come back as plain dicts shaped like the HTTP JSON, so the rest of the
    client never looks at the protocol.
    """

    def __init__(self, protocol: str, url: str, verbose: bool = False, concurrency: int = 1):
        self.protocol = protocol
        if protocol == "grpc":
            import tritonclient.grpc as module
        else:
            import tritonclient.http as module
        self.module = module
        if protocol == "grpc":
            self.client = module.InferenceServerClient(url=url, verbose=verbose)
        else:
            self.client = module.InferenceServerClient(
                url=url, verbose=verbose, concurrency=concurrency
            )

    def model_metadata(self, model_name: str, model_version: str = "") -> dict[str, Any]:
        """Model metadata as a dict with integer shapes."""
        if self.protocol == "grpc":
            metadata = self.client.get_model_metadata(model_name, model_version, as_json=True)
        else:
            metadata = self.client.get_model_metadata(model_name, model_version)
        # Protobuf's JSON renders int64 shapes as strings; HTTP already sends numbers.
        for tensor in [*metadata.get("inputs", []), *metadata.get("outputs", [])]:
            tensor["shape"] = [int(dim) for dim in tensor.get("shape", [])]
        return metadata

    def model_config(self, model_name: str, model_version: str = "") -> dict[str, Any]:
        """Model configuration as a dict (protobuf JSON omits fields at their defaults)."""
        if self.protocol == "grpc":
            return self.client.get_model_config(model_name, model_version, as_json=True)["config"]
        return self.client.get_model_config(model_name, model_version)

    def request(self, model: ModelInfo, data: np.ndarray, class_count: int) -> tuple[list, list]:
        """Input and requested-output objects for one request."""
        inputs = [self.module.InferInput(model.input_name, list(data.shape), model.input_datatype)]
        inputs[0].set_data_from_numpy(data)
        outputs = [self.module.InferRequestedOutput(model.output_name, class_count=class_count)]
        return inputs, outputs

    def infer(self, model_name: str, inputs: list, outputs: list, **kwargs: Any) -> Any:
        """Blocking inference; returns the protocol's ``InferResult``."""
        return self.client.infer(model_name, inputs, outputs=outputs, **kwargs)

    def submit(
        self, model_name: str, inputs: list, outputs: list, **kwargs: Any
    ) -> Callable[[], Any]:
        """Start an inference; returns a function that waits for and returns its result."""
        if self.protocol == "grpc":
            future: concurrent.futures.Future = concurrent.futures.Future()

            def done(result: Any, error: InferenceServerException | None) -> None:
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(result)

            self.client.async_infer(model_name, inputs, done, outputs=outputs, **kwargs)
            return future.result
        pending = self.client.async_infer(model_name, inputs, outputs=outputs, **kwargs)
        return pending.get_result

    def response_id(self, result: Any) -> str:
        """The request id echoed in a response ("" when absent)."""
        response = result.get_response()
        if self.protocol == "grpc":
            return response.id
        return response.get("id", "")

    def close(self) -> None:
        self.client.close()


def image_files(paths: Sequence[str]) -> list[Path]:
    """Expand directories (their files, sorted) and keep files as given."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.is_file())
        else:
            files.append(path)
    return files


def batches(items: Sequence[Any], batch_size: int) -> list[list[Any]]:
    """Groups of ``batch_size``, wrapping around to the first items to fill the last group.

    This is ``image_client``'s rule: every item is sent at least once and every request is
    full.
    """
    groups, index, last = [], 0, False
    while not last:
        group = []
        for _ in range(batch_size):
            group.append(items[index])
            index = (index + 1) % len(items)
            last = last or index == 0
        groups.append(group)
    return groups


def _completed(result: Any) -> Callable[[], Any]:
    """A waiter for a result that is already there, so sync and async share one loop."""
    return lambda: result


def run(args: argparse.Namespace) -> int:
    """Send the images and print the classifications; returns the exit status."""
    url = args.url or DEFAULT_URLS[args.protocol]
    connection = Connection(
        args.protocol, url, verbose=args.verbose, concurrency=20 if args.async_set else 1
    )
    try:
        metadata = connection.model_metadata(args.model_name, args.model_version)
        config = connection.model_config(args.model_name, args.model_version)
        model = parse_model(metadata, config)
        if not model.batching and args.batch_size != 1:
            print(f"ERROR: model '{model.name}' doesn't support batching", file=sys.stderr)
            return 1
        if model.batching and args.batch_size > model.max_batch_size:
            print(
                f"ERROR: batch size {args.batch_size} exceeds max_batch_size "
                f"{model.max_batch_size} of model '{model.name}'",
                file=sys.stderr,
            )
            return 1

        if model.encoded and args.scaling is not None:
            print(
                f"ERROR: -s {args.scaling}: model '{model.name}' takes encoded images and "
                "scales them on the server",
                file=sys.stderr,
            )
            return 1
        scaling = args.scaling or DEFAULT_SCALING

        files = image_files(args.images)
        if not files:
            print("ERROR: no image files given", file=sys.stderr)
            return 1
        encoded = [path.read_bytes() for path in files]

        pending = []
        for request_index, group in enumerate(batches(encoded, args.batch_size)):
            batch = make_batch(group, model, scaling)
            inputs, outputs = connection.request(model, batch, args.classes)
            kwargs = {"model_version": args.model_version, "request_id": str(request_index)}
            if args.async_set:
                wait = connection.submit(model.name, inputs, outputs, **kwargs)
            else:
                wait = _completed(connection.infer(model.name, inputs, outputs, **kwargs))
            pending.append((str(request_index), wait))

        for sent_id, wait in pending:
            result = wait()
            print(
                f"Request {connection.response_id(result) or sent_id}, batch size {args.batch_size}"
            )
            output = result.as_numpy(model.output_name)
            if model.batching and len(output) != args.batch_size:
                print(f"ERROR: expected {args.batch_size} results, got {len(output)}")
                return 1
            for line in format_classifications(output, model.batching):
                print(line)
    except InferenceServerException as err:
        print(f"inference failed: {err}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return 1
    finally:
        connection.close()
    print("PASS")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options, named as in Triton's ``image_client``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="print protocol traffic")
    parser.add_argument(
        "-a", "--async", dest="async_set", action="store_true", help="use the async API"
    )
    parser.add_argument("-m", "--model-name", default="image_pipeline", help="model to query")
    parser.add_argument(
        "-x", "--model-version", default="", help="model version (default: the server's choice)"
    )
    parser.add_argument("-b", "--batch-size", type=int, default=1, help="images per request")
    parser.add_argument("-c", "--classes", type=int, default=1, help="top classes to report")
    parser.add_argument(
        "-s",
        "--scaling",
        type=str.upper,
        choices=SCALINGS,
        default=None,
        help=f"how images preprocessed here are scaled (default {DEFAULT_SCALING}, as the "
        "example models expect; image_client's default is NONE)",
    )
    parser.add_argument(
        "-u", "--url", default=None, help="server address (default 127.0.0.1:8000 / :8001)"
    )
    parser.add_argument(
        "-i",
        "--protocol",
        type=str.lower,
        choices=("http", "grpc"),
        default="http",
        help="protocol (HTTP or gRPC)",
    )
    parser.add_argument("images", nargs="+", help="image files or directories of images")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or args.classes < 1:
        parser.error("batch size and class count must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
