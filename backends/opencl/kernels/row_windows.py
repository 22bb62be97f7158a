"""Window kernels with a work-item per output row (on CPUs): the window's taps unrolled.

The forward window kernels of inference (the direct Conv, MaxPool without Indices,
AveragePool) spend their time in the inner loop over a row's outputs. Written as a plain loop
over the row whose body sums (or takes the maximum of) the window's taps, unrolled from the
window shape that the program is compiled for, with each window row's input found once per
work-item, the compiler vectorises it along the row. On PoCL a ShuffleNet depthwise 3x3 on
136x28x28 took about 400 us with one output (or a run of 16) per work-item and 42 us as such a
loop with every size a constant.

A row's outputs fall in three parts: those whose windows lie inside the input along W
``[w_lo, w_hi)``, which read their taps unchecked when the row's windows also lie inside it
along D and H (``rows_inside``), and the edges before and after, whose taps are tested (a tap
outside the input reads the kernel's ``outside`` value instead). A work-item computes a run of
``Runtime.row_run`` outputs of a row: the whole row on CPUs, where a work-item costs more than
the loop; a few on GPUs, whose work-items are cheap and many.

Example (the AveragePool body: the taps' sum)::

    loops = row_loops(lambda checks: f"acc = {tap_terms(fixed, checks, str, '0', ' + ')};")
"""
from __future__ import annotations

from typing import Callable

from backends.opencl.kernels.window import Window, geometry, run_position


def _taps(fixed: Window) -> list[tuple[int, int, int, int]]:
    kd, kh, kw = fixed.kernel
    return [((a * kh + b) * kw + c, a, b, c)
            for a in range(kd) for b in range(kh) for c in range(kw)]


def row_head(storage: str, fixed: Window, plane: str, run: int) -> str:
    """The start of a row kernel after ``item`` (its work-item): the geometry, the outputs
    ``ow0 .. ow_end`` of a row that the work-item computes (a run of ``run``: the whole row
    on CPUs), the row's position (od, oh) and leading index ``lead``, the parts of the row,
    and per window row (a, b) a pointer ``r{a}_{b}`` to its input's column -HW inside the
    input plane starting at ``plane`` (an expression over ``lead``) and whether it lies
    inside the input ``v{a}_{b}``."""
    kd, kh, _ = fixed.kernel
    rows = "\n  ".join(
        f"const int v{a}_{b} = od * SD - HD + {a} * DD >= 0 && od * SD - HD + {a} * DD < ID "
        f"&& oh * SH - HH + {b} * DH >= 0 && oh * SH - HH + {b} * DH < IH; "
        f"__global const {storage}* r{a}_{b} = {plane} + ((od * SD - HD + {a} * DD) * IH + "
        f"oh * SH - HH + {b} * DH) * IW - HW;" for a in range(kd) for b in range(kh))
    return f"""{geometry(fixed)}
  {run_position(run, "lead")}
  const int O = OD * OH * OW, y_row = lead * O + (od * OH + oh) * OW;
  /* [w_lo, w_hi): the outputs whose windows lie inside the input along W */
  const int w_reach = IW - 1 + HW - (KW - 1) * DW;  /* the last ow * SW inside */
  const int w_lo = min(OW, (HW + SW - 1) / SW);
  const int w_hi = w_reach < 0 ? w_lo : max(w_lo, min(OW, w_reach / SW + 1));
  const int rows_inside = od * SD - HD >= 0 && od * SD - HD + (KD - 1) * DD < ID
      && oh * SH - HH >= 0 && oh * SH - HH + (KH - 1) * DH < IH;
  {rows}"""


def tap(a: int, b: int, c: int, checks: tuple[bool, bool], outside: str,
        shift: str = "") -> str:
    """Tap (a, b, c) of output ow's window: the input (``shift`` elements on: another
    channel's plane), or ``outside`` where ``checks`` (window rows along D and H, columns
    along W) find it outside the input."""
    value = f"r{a}_{b}[{shift}ow * SW + {c} * DW]"
    tests = ([f"v{a}_{b}"] if checks[0] else []) + (
        [f"ow * SW - HW + {c} * DW >= 0", f"ow * SW - HW + {c} * DW < IW"] if checks[1] else [])
    return f"({' && '.join(tests)} ? {value} : {outside})" if tests else value


def tap_terms(fixed: Window, checks: tuple[bool, bool], term: Callable[[int, str], str],
              outside: str, join: str, shift: str = "") -> str:
    """``term(t, tap t)`` for every tap t of the window, joined by ``join``."""
    return join.join(term(t, tap(a, b, c, checks, outside, shift))
                     for t, a, b, c in _taps(fixed))


def row_loops(body: Callable[[tuple[bool, bool]], str]) -> str:
    """The loops over a row's outputs ow: ``body(checks)`` computes output ow with taps
    tested as ``checks`` says (rows along D and H, columns along W)."""
    return f"""const int lo = max(ow0, w_lo), hi = min(ow_end, w_hi);
  for (int ow = ow0; ow < min(ow_end, w_lo); ++ow) {{ {body((True, True))} }}
  if (rows_inside) {{
    for (int ow = lo; ow < hi; ++ow) {{ {body((False, False))} }}
  }} else {{
    for (int ow = lo; ow < hi; ++ow) {{ {body((True, False))} }}
  }}
  for (int ow = max(ow0, w_hi); ow < ow_end; ++ow) {{ {body((True, True))} }}"""


def direct_source(storage: str, compute: str, load, store, fixed: Window, run: int) -> str:
    """The program of ``conv_direct`` for windows of ``fixed``'s kernel shape, strides and
    dilations, the direct convolution of depthwise Convs (one input channel a group) and of
    other grouped Convs with few multiply-adds per output, where im2col + GEMM would waste
    work. Depthwise rows run the row loops with the weights in registers; the others sum
    their windows with every tap tested. A work-item computes ``run`` outputs of a row."""
    weights = " ".join(f"const {compute} w{t} = wc[{t}];" for t, *_ in _taps(fixed))

    def depthwise(checks):
        terms = tap_terms(fixed, checks, lambda t, v: f"{v} * w{t}", "0", " + ")
        return f"const {compute} acc = start + {terms}; {store('y', 'y_off + y_row + ow', 'acc')};"

    def grouped(checks):
        terms = tap_terms(fixed, checks, lambda t, v: f"{v} * wc[{t}]", "0", " + ",
                          "c * ID * IH * IW + ")  # (channel c0 + c of the group)
        return f"""{compute} acc = start;
      for (int c = 0; c < CG; ++c) {{
        __global const {storage}* wc = w + w_off + (m * CG + c) * K;
        acc += {terms};
      }}
      {store('y', 'y_off + y_row + ow', 'acc')};"""
    return f"""
__kernel void conv_direct(const int total, const int C, const int M, const int group,
                          const int16 g, const int4 hp, __global const {storage}* x,
                          const int x_off, __global const {storage}* w, const int w_off,
                          __global const {storage}* bias, const int b_off,
                          const int has_bias, __global {storage}* y, const int y_off) {{
  const int item = get_global_id(0);
  if (item >= total) return;
  const int K = {len(_taps(fixed))}, CG = C / group, MG = M / group;
  {row_head(storage, fixed, "x + x_off + (lead / M * C + lead % M / MG * CG) * ID * IH * IW",
            run)}
  const int m = lead % M, c0 = m / MG * CG;
  const {compute} start = has_bias ? {load("bias", "b_off + m")} : 0;
  if (CG == 1) {{
    __global const {storage}* wc = w + w_off + m * K;
    {weights}
    {row_loops(depthwise)}
  }} else {{
    {row_loops(grouped)}
  }}
}}
"""
