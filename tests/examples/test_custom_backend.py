"""The example C++ backend (``examples/custom_backend``): built with CMake by the example's
own script, found in its model's directory by the repository scan, and served Ray-free
through rayton's backend interface: images of any size in, normalised 64x64 CHW out, equal to
the same resize and normalisation in numpy; a malformed image fails only its request."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from examples.custom_backend.build_repository import build_repository
from repo_adapter.backends import model_backend_class
from repo_adapter.backends.base import InstanceSpec
from repo_adapter.backends.native.build import BuildError
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferTensor
from repo_adapter.repository import scan_model
from tests.support.requirements import missing

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def preprocessed(image: np.ndarray, height: int = 64, width: int = 64) -> np.ndarray:
    """Bilinear resize with half-pixel centres, then ImageNet normalisation, CHW."""

    def taps(source: int, target: int):
        scale = np.float32(source) / np.float32(target)
        position = (np.arange(target, dtype=np.float32) + 0.5) * scale - 0.5
        position = np.clip(position, 0, source - 1)
        low = np.floor(position).astype(np.int64)
        return low, np.minimum(low + 1, source - 1), (position - low).astype(np.float32)

    rows, columns = taps(image.shape[0], height), taps(image.shape[1], width)
    pixels = image.astype(np.float32)
    top, bottom = pixels[rows[0]], pixels[rows[1]]
    upper = top[:, columns[0]] + (top[:, columns[1]] - top[:, columns[0]]) * columns[2][:, None]
    lower = bottom[:, columns[0]]
    lower = lower + (bottom[:, columns[1]] - lower) * columns[2][:, None]
    resized = upper + (lower - upper) * rows[2][:, None, None]
    return ((resized / 255.0).transpose(2, 0, 1) - MEAN) / STD


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("custom-backend")
    try:
        build_repository(root / "repository", root / "build")
    except BuildError as err:
        missing(str(err))
        raise
    return root / "repository"


def images(*shapes: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (1, h, w, 3), dtype=np.uint8) for h, w in shapes]


def test_the_repository_holds_the_backend_beside_its_model(repository):
    scanned = scan_model(repository / "imgprep")
    assert scanned.error == ""
    assert scanned.backend_file == repository / "imgprep" / "libtriton_imgprep.so"


def test_images_of_any_size_are_resized_and_normalised(repository):
    scanned = scan_model(repository / "imgprep")
    version = scanned.model_version(1)
    backend = model_backend_class(version)(version, InstanceSpec("imgprep_0"))
    backend.load()
    inputs = images((480, 640), (64, 64), (7, 5), (1, 1))
    wrong_channels = np.zeros((1, 4, 4, 4), np.uint8)
    requests = [
        InferRequest("imgprep", [InferTensor("IMAGE", "UINT8", image)])
        for image in [*inputs, wrong_channels]
    ]
    try:
        *answers, refused = asyncio.run(backend.execute(requests))
    finally:
        backend.unload()
    for image, answer in zip(inputs, answers, strict=True):
        (output,) = answer.outputs
        assert (output.name, output.datatype) == ("OUTPUT", "FP32")
        assert output.data.shape == (1, 3, 64, 64)
        np.testing.assert_allclose(output.data[0], preprocessed(image[0]), rtol=1e-5, atol=1e-5)
    assert isinstance(refused, InferenceServerError)
    assert refused.code == StatusCode.INVALID_ARG
    assert refused.message == "imgprep: IMAGE must be UINT8 [batch, height, width, 3]"
