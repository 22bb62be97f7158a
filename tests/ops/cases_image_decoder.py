"""Op-table cases: ImageDecoder on images that Pillow encodes here (PNG, BMP, lossless WebP, a
palette GIF and JPEG), against onnx.reference (which decodes with Pillow too). The encoded
bytes are a graph input in most cases, so the image's size is only known at run time (the
executor runs the node between planned segments); one case gives them as a constant, whose
shape is planned. Pillow comes with matplotlib, a core dependency; without it these cases fail
with the op's "pip install pillow" refusal."""
from __future__ import annotations

import io

import numpy as np

from tests.ops.harness import Case


def _checkerboard(height: int = 12, width: int = 10, tile: int = 3) -> np.ndarray:
    rng = np.random.default_rng(5)
    colors = rng.integers(0, 256, size=(height // tile + 1, width // tile + 1, 3), dtype=np.uint8)
    rows, cols = np.arange(height) // tile, np.arange(width) // tile
    return colors[rows[:, None], cols[None, :]]


def encoded(fmt: str, image: np.ndarray | None = None, mode: str = "RGB",
            **options) -> np.ndarray:
    """``image`` (default: a 12 x 10 checkerboard) encoded as ``fmt`` by Pillow, as the 1-D
    uint8 tensor ImageDecoder reads (empty without Pillow)."""
    try:
        import PIL.Image
    except ImportError:
        return np.zeros(0, np.uint8)
    picture = PIL.Image.fromarray(_checkerboard() if image is None else image).convert(mode)
    buffer = io.BytesIO()
    picture.save(buffer, format=fmt, **options)
    return np.frombuffer(buffer.getvalue(), np.uint8).copy()


CASES = [
    Case("ImageDecoder", [encoded("PNG")], {"pixel_format": "RGB"}, grad=False, name="png_rgb"),
    Case("ImageDecoder", [encoded("PNG")], {"pixel_format": "BGR"}, grad=False, name="png_bgr"),
    Case("ImageDecoder", [encoded("BMP")], {"pixel_format": "Grayscale"}, grad=False,
         name="bmp_grayscale"),
    Case("ImageDecoder", [encoded("JPEG", quality=90)], {}, grad=False, name="jpeg_default"),
    Case("ImageDecoder", [encoded("WEBP", lossless=True)], {"pixel_format": "RGB"},
         grad=False, name="webp_lossless"),
    Case("ImageDecoder", [encoded("PNG")], {"pixel_format": "BGR"}, const=(0,), grad=False,
         name="constant_bytes_planned"),
]
