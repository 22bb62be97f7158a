"""OpenCL kernel of ImageDecoder (``portable/ops/image_decoder.py``): the encoded bytes are
read to the host, Pillow decodes them (file decoding is host work on every backend), and the
pixels are uploaded into the planned output or into a new device array when the image's size
was not known while planning (``dynamic_outputs``)."""
from __future__ import annotations

import numpy as np

from portable.backend import returned_outputs
from portable.ops.image_decoder import decode_image

from backends.opencl.allocator import from_numpy, to_numpy
from backends.opencl.elementwise import assign
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()


@kernel("ImageDecoder")
def image_decoder(ctx, inputs, outputs, attrs):
    encoded = inputs[0]
    pixels = np.ascontiguousarray(decode_image(np.asarray(to_numpy(encoded)),
                                               attrs["pixel_format"]))
    given = outputs[0]
    if given is None:
        return returned_outputs(outputs, [from_numpy(encoded.runtime, pixels)])
    if tuple(given.shape) != pixels.shape:
        raise ValueError(f"ImageDecoder: the output was planned as {tuple(given.shape)}, the "
                         f"image decodes to {pixels.shape}")
    assign(given, pixels)
    return returned_outputs(outputs, [given])
