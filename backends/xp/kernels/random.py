"""NumPy kernels: the random ops (``portable/ops/random.py``).

Every draw happens on the host (``portable.ops.random.random_values``), from the node's seed
or from portable's seeded generator (``ctx.rng``), and is copied into the output
(``xp.asarray``), so every backend that shares these kernels (and OpenCL, which draws the same
way) gives the same numbers for the same seed.
"""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table
from portable.ops.random import random_values, seed_generator

kernels, kernel = kernel_table()


def _register(op: str) -> None:
    @kernel(op)
    def run(ctx, inputs, outputs, attrs):
        out = outputs[0]
        host = [None if v is None else (v.get() if hasattr(v, "get") else np.asarray(v))
                for v in inputs]
        rng = seed_generator(attrs["seed"], ctx.rng)
        out[...] = ctx.xp.asarray(random_values(op, rng, host, attrs, out.shape, out.dtype))


for _op in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
            "Bernoulli", "Multinomial"):
    _register(_op)
