"""ImageDecoder (ai.onnx 20): an encoded image file (JPEG, PNG, BMP, TIFF, WebP, PNM...; the
bytes as a 1-D uint8 tensor) decoded into an (H, W, C) uint8 array, RGB, BGR or one Grayscale
channel.

The output's height and width are in the encoded bytes, so the op is a ``dynamic_outputs`` op:
when the bytes are a constant the type rule decodes them and plans the exact shape, otherwise
it gives (None, None, C) and the executor runs the node between planned segments, the kernel
making its output (``portable.backend.output_array``).

Decoding is Pillow's, imported only when an image is decoded (matplotlib, a core dependency,
brings it); without it the op is refused naming the package to install. Every image is
converted to the asked pixel format first (an RGBA PNG or a palette GIF gives RGB, as the spec
and onnxruntime do). Not differentiable.
"""
from __future__ import annotations

import io

import numpy as np

from portable.errors import MissingDependencyError
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, InferContext, declare
from portable.ops.rules import dtypes_of

PIXEL_FORMATS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


def decode_image(encoded: np.ndarray, pixel_format: str) -> np.ndarray:
    """The (H, W, C) uint8 pixels of the image file held in ``encoded`` (1-D uint8).

    Example:
        >>> decode_image(np.frombuffer(png_bytes, np.uint8), "RGB").shape   # doctest: +SKIP
        (32, 32, 3)
    """
    try:
        import PIL.Image
    except ImportError as exc:
        raise MissingDependencyError("ImageDecoder decodes images with Pillow, which is not "
                                     "installed: pip install pillow") from exc
    try:
        image = PIL.Image.open(io.BytesIO(np.ascontiguousarray(encoded).tobytes()))
        image.load()
    except (OSError, ValueError, SyntaxError) as exc:  # (Pillow's errors for bad files)
        raise ValueError(f"ImageDecoder: the {encoded.size} bytes are not an image file that "
                         f"Pillow can decode: {exc}") from exc
    if pixel_format == "Grayscale":
        return np.asarray(image.convert("L"), np.uint8)[:, :, None]
    pixels = np.asarray(image.convert("RGB"), np.uint8)
    return pixels[:, :, ::-1] if pixel_format == "BGR" else pixels


def _image_decoder_infer(ctx: InferContext) -> list[TensorType]:
    if ctx.dtype(0) != np.uint8 or len(ctx.shape(0)) != 1:
        ctx.fail(f"encoded_stream must be a 1-D uint8 tensor (the file's bytes), got "
                 f"{ctx.type(0)!r}")
    pixel_format = ctx.attrs["pixel_format"]
    if pixel_format not in PIXEL_FORMATS:
        ctx.fail(f"pixel_format must be one of {sorted(PIXEL_FORMATS)}, got {pixel_format!r}")
    if ctx.known(0):  # a constant image: decoded while planning, so its shape is planned
        try:
            return [TensorType(decode_image(ctx.value(0), pixel_format).shape, np.uint8)]
        except ValueError as exc:
            ctx.fail(str(exc))
    return [TensorType((None, None, PIXEL_FORMATS[pixel_format]), np.uint8)]


declare("ImageDecoder", inputs=("encoded_stream",), outputs=("image",),
        infer=_image_decoder_infer, attrs={"pixel_format": Attr("string", "RGB")},
        onnx_since=20, dynamic_outputs=True, shape_inputs=(0,),
        dtype_rule=dtypes_of(np.uint8, inputs=()),
        doc="Decodes an encoded image (1-D uint8 bytes) into (H, W, 3) RGB / BGR or "
            "(H, W, 1) Grayscale uint8 pixels (Pillow).")
