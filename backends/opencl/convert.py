"""ONNX Cast's conversion on the device, between every pair of element types.

The NumPy backend's ``portable.ops.quantize.convert`` is the reference; this is it as one
generated elementwise kernel: steps that prepare the value in the source's compute type, then
the store into the output (``formats`` holds the stores of the storage formats):

- to float8 (not e8m0) with ``saturate``: clamp to the largest finite value first (NaN stays
  NaN), in the source's type, as the reference clips before ``astype``;
- to float8e8m0: the exponent rounds by ``round_mode`` (``up``, ``down``, ``nearest``) and
  saturates at 2^127 when asked; the sign is dropped;
- a float to a 4- or 2-bit integer: truncated toward zero, and 0 when that is outside the
  type's range (NaN and inf too), which is what ml_dtypes gives;
- float64 to a narrow float: rounded to float32 *to odd* first, so the float32 store rounds
  once, correctly (a plain double -> float -> bfloat16 would round twice).

Example:
    >>> convert(x, out, saturate=1)      # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from portable.dtypes import is_float, is_integer, is_low_precision, to_onnx, type_info
from portable.ops.quantize import FLOAT8, FLOAT8E8M0, ROUND_MODES

from backends.opencl.allocator import CLArray
from backends.opencl.codegen import EwOp, Fused
from backends.opencl.elementwise import assign, run_elementwise
from backends.opencl.optable import TABLE

_E8M0_ROUND = """
inline float portable_e8m0_round(float x, float saturate, float mode) {
  const uint bits = as_uint(x);
  uint e = (bits >> 23) & 0xFFu;
  if (e == 0xFFu) return INFINITY;  /* inf and NaN: stored as NaN (0xFF) */
  uint up = 0u;
  if (mode == 2) up = (bits & 0x400000u) && ((bits & 0x3FFFFFu) || e > 0u);  /* nearest */
  else if (mode == 0) up = (bits & 0x7FFFFFu) != 0u;                         /* up */
  if (saturate != 0 && e == 0xFEu) up = 0u;
  e += up;
  return e == 0u ? 0.0f : as_float(e << 23);  /* 2^(e-127); e = 255 is inf, stored as NaN */
}
"""
# (the float the e8m0 store keeps exactly: 0 for code 0, a power of two, or inf for NaN)
E8M0_ROUND = EwOp("E8M0Round", "portable_e8m0_round((float)({0}), {saturate}, {mode})", 1,
                  result="float32", promote=(), params=("saturate", "mode"),
                  helpers=_E8M0_ROUND)

INT_RANGE = EwOp("IntRange", "(trunc({0}) >= {low} && trunc({0}) <= {high} ? trunc({0}) : "
                 "L(0.0))", 1, result="first", params=("low", "high"))

_ROUND_ODD = """
inline float portable_round_odd(double d) {
  float f = (float)d;
  if (isnan(d) || (double)f == d) return f;
  if (fabs((double)f) > fabs(d)) f = nextafter(f, 0.0f);  /* truncate toward zero */
  return as_float(as_uint(f) | 1u);                      /* and mark it inexact */
}
"""
ROUND_ODD = EwOp("RoundOdd", "portable_round_odd({0})", 1, result="float32", promote=(),
                 helpers=_ROUND_ODD)


def _code(dtype: np.dtype) -> int | None:
    try:
        return to_onnx(dtype)
    except Exception:  # (no ONNX element type: not one Cast treats specially)
        return None


def convert(x: CLArray, out: CLArray, saturate: int = 1, round_mode: str = "up") -> None:
    """Write ``x`` converted to ``out``'s dtype into ``out`` (broadcasting), with ONNX Cast's
    rules (see the module docstring)."""
    src, dst = np.dtype(x.dtype), np.dtype(out.dtype)
    if src == dst:
        assign(out, x)
        return
    code = _code(dst)
    fused = Fused(1)
    value, operands, step = fused.input(0), [x], src
    if src == np.float64 and is_low_precision(dst) and is_float(dst) and code != FLOAT8E8M0:
        value, step = fused.add(ROUND_ODD, value), np.dtype(np.float32)
    if code in FLOAT8 and saturate:
        largest = float(type_info(dst).max)
        # The bounds in the source's type (float32 for a storage format, which may not hold
        # them); an integer type whose range fits needs no clamp, an unsigned one no lower one.
        info = None if is_float(step) else type_info(step) if step != np.bool_ else None
        bound_type = np.float32 if is_low_precision(step) else step.type
        if step != np.bool_ and (info is None or info.max > largest):
            for op, bound in (("Max", -largest), ("Min", largest)):
                if info is None or info.min <= bound <= info.max:
                    operands.append(bound_type(bound))
                    value = fused.add(TABLE[op], value, fused.input(len(operands) - 1))
    elif code == FLOAT8E8M0:
        if round_mode not in ROUND_MODES:
            raise ValueError(f"Cast round_mode={round_mode!r}: one of {ROUND_MODES}")
        value = fused.add(E8M0_ROUND, value,
                          params=(float(bool(saturate)), float(ROUND_MODES.index(round_mode))))
    elif is_low_precision(dst) and is_integer(dst) and is_float(src):
        info = type_info(dst)
        value = fused.add(INT_RANGE, value, params=(float(info.min), float(info.max)))
    fused.add(TABLE["Cast"], value)
    run_elementwise(fused.steps, operands, [out], [dst])
