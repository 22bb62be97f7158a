"""NumPy (and CuPy) kernel of ImageDecoder (``portable/ops/image_decoder.py``): the encoded
bytes reach the host, Pillow decodes them there (decoding is host work by nature), and the
pixels are written into the planned output, or into one the kernel makes when the image's size
was not known while planning (``dynamic_outputs``)."""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table, output_array, returned_outputs
from portable.ops.image_decoder import decode_image

kernels, kernel = kernel_table()


@kernel("ImageDecoder")
def image_decoder(ctx, inputs, outputs, attrs):
    pixels = decode_image(np.asarray(ctx.backend.to_numpy(inputs[0])), attrs["pixel_format"])
    image = output_array(ctx, outputs, 0, pixels.shape, np.uint8)
    image[...] = ctx.xp.asarray(pixels)
    return returned_outputs(outputs, [image])
