"""ImageDecoder beyond the op table: refused by name without Pillow, a clear error for bytes
that are no image, and the run-time output (a graph input's bytes) sized by each image."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from portable.errors import MissingDependencyError, ShapeError
from portable.ops.image_decoder import decode_image
from tests.ops.cases_image_decoder import encoded
from tests.ops.harness import Case, run_ours


def test_without_pillow_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # (import PIL raises ImportError)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(MissingDependencyError, match="pip install pillow"):
        decode_image(np.zeros(4, np.uint8), "RGB")


def test_bytes_that_are_no_image():
    with pytest.raises(ValueError, match="not an image file"):
        decode_image(np.frombuffer(b"not an image", np.uint8), "RGB")
    case = Case("ImageDecoder", [np.frombuffer(b"nope", np.uint8).copy()], const=(0,))
    with pytest.raises(ShapeError, match="not an image file"):
        run_ours(case)


def test_the_output_is_sized_by_the_image_at_run_time():
    pytest.importorskip("PIL")
    small = encoded("PNG", np.full((3, 5, 3), 7, np.uint8))
    case = Case("ImageDecoder", [small], {"pixel_format": "Grayscale"})
    out = run_ours(case)[0]
    assert out.shape == (3, 5, 1) and out.dtype == np.uint8
    big = encoded("PNG", np.full((9, 4, 3), 200, np.uint8))
    assert run_ours(case, [big])[0].shape == (9, 4, 1)


def test_rgba_and_palette_images_decode_to_rgb():
    pytest.importorskip("PIL")
    picture = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    for mode, fmt in (("RGBA", "PNG"), ("P", "GIF")):
        pixels = decode_image(encoded(fmt, picture, mode=mode), "RGB")
        assert pixels.shape == (4, 6, 3) and pixels.dtype == np.uint8
    np.testing.assert_array_equal(decode_image(encoded("PNG", picture, mode="RGBA"), "RGB"),
                                  picture)
