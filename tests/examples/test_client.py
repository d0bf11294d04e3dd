"""``examples/client.py``: image_client's scaling modes and flags (Ray-free)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from examples.client import DEFAULT_SCALING, MEAN, STD, parse_args, preprocess, scale

PIXELS = np.array([0.0, 127.5, 255.0], dtype=np.float32).reshape(1, 1, 3).repeat(3, axis=0)


def test_each_scaling_is_image_clients():
    np.testing.assert_array_equal(scale(PIXELS, "NONE"), PIXELS)
    np.testing.assert_allclose(scale(PIXELS, "INCEPTION")[0, 0], [-1.0, 0.0, 1.0])
    vgg = scale(PIXELS, "VGG")
    np.testing.assert_allclose(vgg[:, 0, 0], [-123.0, -117.0, -104.0])
    np.testing.assert_allclose(vgg[:, 0, 2], [132.0, 138.0, 151.0])


def test_the_default_is_imagenet_mean_and_std_as_the_preprocess_model():
    assert DEFAULT_SCALING == "IMAGENET"
    expected = (PIXELS / 255.0 - MEAN) / STD
    np.testing.assert_allclose(scale(PIXELS), expected, rtol=1e-6)


def test_preprocess_resizes_then_scales_in_chw():
    image = Image.new("RGB", (8, 6), (255, 0, 128))
    encoded = io.BytesIO()
    image.save(encoded, format="PNG")
    tensor = preprocess(encoded.getvalue(), 4, 5, "INCEPTION")
    assert tensor.shape == (3, 4, 5) and tensor.dtype == np.float32
    np.testing.assert_allclose(tensor[:, 0, 0], [1.0, -1.0, 128 / 127.5 - 1.0], atol=1e-6)


def test_the_articles_command_line_parses():
    args = parse_args(["-m", "densenet_onnx", "-c", "3", "-s", "INCEPTION", "mug.jpg"])
    assert (args.model_name, args.classes, args.scaling, args.images) == (
        "densenet_onnx",
        3,
        "INCEPTION",
        ["mug.jpg"],
    )
    assert parse_args(["--scaling", "vgg", "mug.jpg"]).scaling == "VGG"
    assert parse_args(["mug.jpg"]).scaling is None  # the model's kind decides


def test_an_unknown_scaling_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["-s", "CAFFE", "mug.jpg"])
    assert "invalid choice: 'CAFFE'" in capsys.readouterr().err
