"""Random ops: RandomNormal, RandomUniform, their ``*Like`` forms, Bernoulli and Multinomial.

All are declared ``random=True``: never constant-folded, never merged by CSE, and the exporter
writes them even when their inputs are known. Every backend draws on the host, so a CPU and an
OpenCL run of the same graph draw the same numbers:

- with a ``seed`` attribute, from a generator made from that seed at every run (the same seed
  gives the same values, as ONNX asks: "the same seed produces the same sequence");
- without one, from portable's process-wide generator (``portable.random.seed`` reseeds it).

Uniform and normal values are drawn in float64 and rounded to the output dtype; Bernoulli
compares uniform draws with the probabilities; Multinomial draws each row's samples from its
unnormalised log-probabilities (the softmax of a row, as ONNX defines the input).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.dtypes import ONNX_DTYPES
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, DtypeContext, InferContext, declare

FLOAT_CODES = (1, 10, 11)  # float, float16, double: the dtypes ONNX random ops produce
SAMPLE_CODES = (6, 7)      # Multinomial's int32 or int64 samples


def seed_generator(seed: float | None, fallback: Any) -> np.random.Generator:
    """The generator of one run: made from ``seed`` (its float64 bits, so 0.5 and 1.0 differ)
    when given, else ``fallback`` (the backend's seeded process-wide generator)."""
    if seed is None:
        return fallback
    return np.random.default_rng(int(np.float64(seed).view(np.uint64)))


# -- the host draws every backend shares ------------------------------------------------------


def draw_normal(rng, attrs, shape, dtype) -> np.ndarray:
    return (rng.standard_normal(shape) * attrs["scale"] + attrs["mean"]).astype(dtype)


def draw_uniform(rng, attrs, shape, dtype) -> np.ndarray:
    low, high = attrs["low"], attrs["high"]
    return (low + (high - low) * rng.random(shape)).astype(dtype)


def draw_bernoulli(rng, p: np.ndarray, dtype) -> np.ndarray:
    p = np.asarray(p, np.float64)
    if p.size and not (np.all(p >= 0) and np.all(p <= 1)):  # (NaN fails both)
        raise ValueError(f"Bernoulli: probabilities must be in [0, 1], got values from "
                         f"{np.nanmin(p)} to {np.nanmax(p)}")
    return (rng.random(p.shape) < p).astype(dtype)


def draw_multinomial(rng, logits: np.ndarray, samples: int, dtype) -> np.ndarray:
    """``samples`` class indices per row of ``logits`` (unnormalised log-probabilities),
    by inverting each row's cumulative distribution at uniform draws."""
    logits = np.asarray(logits, np.float64)
    top = np.max(logits, axis=1, keepdims=True)
    weights = np.exp(logits - np.where(np.isfinite(top), top, 0.0))
    cumulative = np.cumsum(weights, axis=1)
    totals = cumulative[:, -1:]
    if not np.all(np.isfinite(totals) & (totals > 0)):
        raise ValueError("Multinomial: every row needs a finite log-probability")
    draws = rng.random((logits.shape[0], samples)) * totals
    picks = np.empty((logits.shape[0], samples), np.int64)
    for row in range(logits.shape[0]):
        picks[row] = np.searchsorted(cumulative[row], draws[row], side="right")
    return np.minimum(picks, logits.shape[1] - 1).astype(dtype)


def random_values(op: str, rng: np.random.Generator, inputs: list, attrs: dict,
                  shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The host array random op ``op`` writes: every backend's kernel uploads it."""
    if op in ("RandomNormal", "RandomNormalLike"):
        return draw_normal(rng, attrs, shape, dtype)
    if op in ("RandomUniform", "RandomUniformLike"):
        return draw_uniform(rng, attrs, shape, dtype)
    if op == "Bernoulli":
        return draw_bernoulli(rng, inputs[0], dtype)
    return draw_multinomial(rng, inputs[0], attrs["sample_size"], dtype)


# -- declarations ------------------------------------------------------------------------------


def _dtype_of(ctx: Any, code: int | None, like: np.dtype | None, allowed: tuple[int, ...],
              what: str) -> np.dtype:
    if code is None:
        if like is None:
            ctx.fail(f"{what}: dtype is required")
        return like
    if code not in allowed or code not in ONNX_DTYPES:
        ctx.fail(f"dtype {code} is not one of {what}'s types "
                 f"({', '.join(str(c) for c in allowed)})")
    return np.dtype(ONNX_DTYPES[code])


def _random_infer(ctx: InferContext) -> list[TensorType]:
    """RandomNormal/RandomUniform: the ``shape`` attribute; ``*Like``: input 0's shape."""
    if len(ctx.op.inputs):
        like = ctx.dtype(0)
        dtype = _dtype_of(ctx, ctx.attrs["dtype"], like if like.kind == "f" else None,
                          FLOAT_CODES, ctx.op.name)
        return [TensorType(ctx.shape(0), dtype)]
    shape = ctx.attrs["shape"]
    if shape is None or any(int(d) < 0 for d in shape):
        ctx.fail(f"shape must be given, with no negative dims, got {shape}")
    return [TensorType(tuple(int(d) for d in shape), _dtype_of(
        ctx, ctx.attrs["dtype"], None, FLOAT_CODES, ctx.op.name))]


def _random_dtype(ctx: DtypeContext) -> list[np.dtype | None]:
    code = ctx.attrs["dtype"]
    if code is None:  # a *Like op without dtype: its input's
        like = ctx.dtype(0)
        return [like if like is None or like.kind == "f" else None]
    return [_dtype_of(ctx, code, None, FLOAT_CODES, ctx.op.name)]


_SEED = {"seed": Attr("float", None)}
_NORMAL = {"mean": Attr("float", 0.0), "scale": Attr("float", 1.0), **_SEED}
_UNIFORM = {"low": Attr("float", 0.0), "high": Attr("float", 1.0), **_SEED}
_SHAPED = {"shape": Attr("ints"), "dtype": Attr("int", 1)}
_LIKE = {"dtype": Attr("int", None)}

declare("RandomNormal", inputs=(), outputs=("output",), infer=_random_infer, random=True,
        attrs={**_NORMAL, **_SHAPED}, onnx_since=22, dtype_rule=_random_dtype,
        doc="Normal draws (mean, scale) of the given shape.")
declare("RandomUniform", inputs=(), outputs=("output",), infer=_random_infer, random=True,
        attrs={**_UNIFORM, **_SHAPED}, onnx_since=22, dtype_rule=_random_dtype,
        doc="Uniform draws in [low, high) of the given shape.")
declare("RandomNormalLike", inputs=("input",), outputs=("output",), infer=_random_infer,
        random=True, attrs={**_NORMAL, **_LIKE}, onnx_since=22, ignored_inputs=(0,),
        dtype_rule=_random_dtype, doc="Normal draws shaped like the input.")
declare("RandomUniformLike", inputs=("input",), outputs=("output",), infer=_random_infer,
        random=True, attrs={**_UNIFORM, **_LIKE}, onnx_since=22, ignored_inputs=(0,),
        dtype_rule=_random_dtype, doc="Uniform draws shaped like the input.")

# -- Bernoulli ---------------------------------------------------------------------------------

# Bernoulli's output may be any numeric or bool type (ONNX's T2).
BERNOULLI_CODES = (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13)


def _bernoulli_infer(ctx: InferContext) -> list[TensorType]:
    if ctx.dtype(0).kind != "f":
        ctx.fail(f"input (the probabilities) must be floating point, got {ctx.dtype(0).name}")
    return [TensorType(ctx.shape(0), _dtype_of(ctx, ctx.attrs["dtype"], ctx.dtype(0),
                                               BERNOULLI_CODES, "Bernoulli"))]


def _bernoulli_dtype(ctx: DtypeContext) -> list[np.dtype | None]:
    code = ctx.attrs["dtype"]
    if code is None:
        return [ctx.dtype(0)]
    return [_dtype_of(ctx, code, None, BERNOULLI_CODES, "Bernoulli")]


declare("Bernoulli", inputs=("input",), outputs=("output",), infer=_bernoulli_infer,
        random=True, attrs={"dtype": Attr("int", None), **_SEED}, onnx_since=22,
        dtype_rule=_bernoulli_dtype,
        doc="1 with each input's probability, else 0 (a probability outside [0, 1] is an "
            "error at run time).")

# -- Multinomial -------------------------------------------------------------------------------


def _multinomial_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    if x.dtype.kind != "f" or x.rank != 2:
        ctx.fail(f"input must be 2-D floating-point (batch, classes) log-probabilities, "
                 f"got {x!r}")
    if ctx.attrs["sample_size"] < 1:
        ctx.fail(f"sample_size must be positive, got {ctx.attrs['sample_size']}")
    return [TensorType((x.shape[0], ctx.attrs["sample_size"]), _dtype_of(
        ctx, ctx.attrs["dtype"], None, SAMPLE_CODES, "Multinomial"))]


def _multinomial_dtype(ctx: DtypeContext) -> list[np.dtype | None]:
    return [_dtype_of(ctx, ctx.attrs["dtype"], None, SAMPLE_CODES, "Multinomial")]


declare("Multinomial", inputs=("input",), outputs=("output",), infer=_multinomial_infer,
        random=True, attrs={"dtype": Attr("int", 6), "sample_size": Attr("int", 1), **_SEED},
        onnx_since=22, dtype_rule=_multinomial_dtype,
        doc="sample_size class indices per row, drawn from softmax(row).")
