"""Storage formats without an OpenCL C type: bfloat16, the float8 family, float4 and the 4- and
2-bit integers, as C functions that load them into float (int) and store float (int) into them.

They are held the way NumPy (ml_dtypes) holds them in memory, so host copies are byte copies:
bfloat16 as the top half of a float32 (``ushort``); float8 e4m3fn / e4m3fnuz / e5m2 / e5m2fnuz
/ e8m0fnu and float4e2m1 one code per byte (``uchar``); int4 / uint4 / int2 / uint2 one value
per byte in the low bits, the high bits zero (``uchar``).

A store follows ml_dtypes' ``astype`` from float32 (what the NumPy backend does), checked on
every code and on the rounding boundaries by ``tests/backends/opencl/test_formats.py``:

- the small floats round to nearest, ties to even (on float32's bits: no float arithmetic, so a
  device that flushes subnormals still rounds right); beyond the largest finite value they
  become inf (e5m2) or NaN (e4m3fn and the fnuz types, which have no inf), except float4,
  which saturates. The fnuz types have no negative zero (0x80 is their NaN). ONNX Cast's
  ``saturate`` clamps before the store (``convert``);
- float8e8m0 (a power of two 2^(e-127), no sign): the exponent rounds up when the first
  dropped mantissa bit is set; negative values (-0 too), inf and NaN become NaN (0xFF);
- the integers keep their low bits (int32 -> int4 wraps, as ml_dtypes does); a float goes
  through ``convert`` first (ml_dtypes truncates it and gives 0 outside the type's range).

Example:
    >>> FORMATS["bfloat16"].storage, FORMATS["bfloat16"].load
    ('ushort', 'portable_load_bf16')
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """One storage format: its buffer element type, the type it computes in, the C functions
    that load (storage -> compute) and store (compute -> storage), and their source."""

    storage: str
    compute: str
    load: str
    store: str
    source: str


# The rounding every small float shares: |x|'s float32 bits -> the format's magnitude code
# (exponent field << M | mantissa), rounded to nearest even. M mantissa bits, exponent bias B.
# The code may exceed the format's largest finite one: the caller decides what overflow is.
_ROUND = """
inline uint portable_small_code(uint a, int M, int B) {
  const int e32 = (int)(a >> 23);
  if (e32 == 0) return 0u;  /* float32 subnormals: below half the smallest code of any format */
  const int emin = 1 - B;
  const int eb = max(e32 - 127, emin);        /* the exponent of the result's grid */
  const int shift = eb - M - e32 + 150;       /* significand bits dropped (>= 20) */
  if (shift > 24) return 0u;                  /* below half the smallest subnormal */
  const uint sig = (a & 0x7FFFFFu) | 0x800000u;
  const uint q = sig >> shift, rem = sig & ((1u << shift) - 1u), mid = 1u << (shift - 1);
  const uint r = q + ((rem > mid || (rem == mid && (q & 1u))) ? 1u : 0u);
  return ((uint)(eb + B - 1) << M) + r;      /* a carry out of the mantissa bumps the exponent */
}
inline float portable_small_value(uint c, int M, int B) {
  const uint e = c >> M, m = c & ((1u << M) - 1u);
  if (e == 0u) return (float)m * as_float((uint)(128 - B - M) << 23);  /* m * 2^(1-B-M) */
  return as_float(((e + 127u - (uint)B) << 23) | (m << (23 - M)));
}
inline float portable_signed(float v, uint negative) {
  return as_float(as_uint(v) | (negative << 31));
}
"""


def _small_float(name: str, m: int, b: int, sign_bit: int, largest: int, nan: str,
                 overflow: str, inf: str, zero: str, special: str) -> tuple[str, str]:
    """Load and store functions of one small float format.

    Args:
        sign_bit: the bit holding the sign (7, or 3 for float4).
        largest: the largest finite magnitude code.
        nan, overflow, inf, zero: C expressions (of ``s``, the sign already in place) giving
            the stored code of NaN, of a finite value beyond ``largest``, of an infinity and
            of a zero.
        special: C statements a load runs first (of ``c``, the code, and ``a``, its
            magnitude): they return NaN (and e5m2's infinities) for the special codes.
    """
    mask = (1 << sign_bit) - 1
    load = f"""
inline float portable_load_{name}(uchar c) {{
  const uint s = ((uint)c >> {sign_bit}) & 1u, a = (uint)c & {mask}u;
  {special}
  return portable_signed(portable_small_value(a, {m}, {b}), s);
}}"""
    store = f"""
inline uchar portable_store_{name}(float x) {{
  const uint u = as_uint(x), s = (u >> 31) << {sign_bit}, a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uchar)({nan});
  if (a == 0x7F800000u) return (uchar)({inf});
  const uint c = portable_small_code(a, {m}, {b});
  if (c > {largest}u) return (uchar)({overflow});
  return (uchar)(c == 0u ? ({zero}) : (s | c));
}}"""
    return load, store


_NAN = "return as_float(0x7FC00000u | (s << 31));"
_FLOATS = {
    # name: (M, B, sign bit, largest code, NaN, overflow, inf, zero, load specials)
    "float8_e4m3fn": (3, 7, 7, 0x7E, "s | 0x7Fu", "s | 0x7Fu", "s | 0x7Fu", "s",
                      f"if (a == 0x7Fu) {_NAN}"),
    "float8_e4m3fnuz": (3, 8, 7, 0x7F, "0x80u", "0x80u", "0x80u", "0u",
                        f"if (c == 0x80) {_NAN}"),
    "float8_e5m2": (2, 15, 7, 0x7B, "s | 0x7Eu", "s | 0x7Cu", "s | 0x7Cu", "s",
                    f"if (a > 0x7Cu) {_NAN} "
                    "if (a == 0x7Cu) return portable_signed(INFINITY, s);"),
    "float8_e5m2fnuz": (2, 16, 7, 0x7F, "0x80u", "0x80u", "0x80u", "0u",
                        f"if (c == 0x80) {_NAN}"),
    # float4 has no NaN or inf: ml_dtypes stores NaN as a zero of the opposite sign, and
    # saturates everything else
    "float4_e2m1fn": (1, 1, 3, 0x7, "s ^ 0x8u", "s | 0x7u", "s | 0x7u", "s", ""),
}

_BF16 = """
inline float portable_load_bf16(ushort b) { return as_float((uint)b << 16); }
inline ushort portable_store_bf16(float x) {
  const uint u = as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (ushort)((u >> 16) & 0x8000u) | 0x7FC0u;  /* NaN */
  return (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);                  /* nearest even */
}
"""

_E8M0 = """
inline float portable_load_e8m0(uchar c) {
  if (c == 0xFF) return as_float(0x7FC00000u);
  return as_float(c == 0 ? 0x00400000u : (uint)c << 23);  /* 2^-127 is a float32 subnormal */
}
inline uchar portable_store_e8m0(float x) {
  const uint u = as_uint(x), e = (u >> 23) & 0xFFu;
  if ((u >> 31) || e == 0xFFu) return (uchar)0xFF;  /* negative (-0 too), inf, NaN */
  const uint up = (u & 0x400000u) && ((u & 0x3FFFFFu) || e > 0u);
  return (uchar)(e + up > 0xFEu ? 0xFFu : e + up);
}
"""


def _integer(name: str, bits: int, signed: bool) -> str:
    mask, top = (1 << bits) - 1, 1 << (bits - 1)
    value = f"((int)(c & {mask}u) ^ {top}) - {top}" if signed else f"(int)(c & {mask}u)"
    return f"""
inline int portable_load_{name}(uchar c) {{ return {value}; }}
inline uchar portable_store_{name}(int v) {{ return (uchar)(v & {mask}); }}
"""


def _formats() -> dict[str, Format]:
    table = {"bfloat16": Format("ushort", "float", "portable_load_bf16", "portable_store_bf16",
                                _BF16),
             "float8_e8m0fnu": Format("uchar", "float", "portable_load_e8m0",
                                      "portable_store_e8m0", _E8M0)}
    for name, (m, b, sign, largest, nan, overflow, inf, zero, special) in _FLOATS.items():
        load, store = _small_float(name, m, b, sign, largest, nan, overflow, inf, zero,
                                   special)
        table[name] = Format("uchar", "float", f"portable_load_{name}",
                             f"portable_store_{name}", _ROUND + load + store)
    for name, bits, signed in (("int4", 4, True), ("uint4", 4, False), ("int2", 2, True),
                               ("uint2", 2, False)):
        table[name] = Format("uchar", "int", f"portable_load_{name}", f"portable_store_{name}",
                             _integer(name, bits, signed))
    return table


FORMATS: dict[str, Format] = _formats()


def format_source(names) -> str:
    """The C functions of the formats named (each shared piece once)."""
    pieces: list[str] = []
    for name in names:
        fmt = FORMATS.get(name)
        if fmt is None:
            continue
        source = fmt.source
        if source.startswith(_ROUND):
            if _ROUND not in pieces:
                pieces.append(_ROUND)
            source = source[len(_ROUND):]
        if source not in pieces:
            pieces.append(source)
    return "".join(pieces)
