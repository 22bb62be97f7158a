"""OpenCL kernels: the random ops draw on the host exactly as the NumPy kernels do
(``portable.ops.random.random_values``, from the node's seed or portable's seeded generator)
and upload the draws, so both devices give the same numbers for the same seed. (Random ops are
small next to the work they feed; a device generator would give other numbers than the CPU.)
"""
from __future__ import annotations

from backends.opencl.allocator import host_value
from backends.opencl.elementwise import upload_into
from backends.opencl.kernels.table import kernel_table
from portable.ops.random import random_values, seed_generator

kernels, kernel = kernel_table()


def _register_random(op: str) -> None:
    @kernel(op, half="native")
    def run(ctx, inputs, outputs, attrs):
        out = outputs[0]
        host = [None if v is None else host_value(v) for v in inputs] \
            if op in ("Bernoulli", "Multinomial") else []
        rng = seed_generator(attrs["seed"], ctx.rng)
        upload_into(out, random_values(op, rng, host, attrs, out.shape, out.dtype))


for _op in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
            "Bernoulli", "Multinomial"):
    _register_random(_op)
