"""Window geometry as kernel arguments, and the OpenCL C of the window kernels.

Every convolution and pooling kernel sees three spatial axes (D, H, W): 1-D and 2-D problems
get leading axes of size 1, so one compiled kernel serves every spatial rank up to 3. The
geometry (sizes, kernel, strides, dilations, head padding) travels as one ``int16`` vector
argument and is unpacked by the ``GEOMETRY`` prologue. The C that walks windows (the flat
index to a position, the loops over a window's inputs, the loops over the windows that reach an
input) is generated here once and spliced into every kernel that needs it, pooling's included.
"""
from __future__ import annotations

import functools
import math
import textwrap
from dataclasses import dataclass
from typing import Sequence

from portable.errors import BackendError
from portable.ops.conv import Geometry

_RANK = 3



def geometry(fixed: "Window | None" = None) -> str:
    """The prologue of a window kernel: names for the 16 geometry values. With ``fixed``, the
    kernel shape, strides and dilations are that window's constants instead (the argument
    still travels): the compiler then unrolls the window loops and strength-reduces the
    index arithmetic, at the cost of one program per window shape."""
    if fixed is None:
        k, s, d = ("g.s3", "g.s4", "g.s5"), ("g.s9", "g.sa", "g.sb"), ("g.sc", "g.sd", "g.se")
    else:
        k, s, d = fixed.kernel, fixed.strides, fixed.dilations
    return f"""
  const int ID = g.s0, IH = g.s1, IW = g.s2;
  const int KD = {k[0]}, KH = {k[1]}, KW = {k[2]};
  const int OD = g.s6, OH = g.s7, OW = g.s8;
  const int SD = {s[0]}, SH = {s[1]}, SW = {s[2]};
  const int DD = {d[0]}, DH = {d[1]}, DW = {d[2]};
  const int HD = hp.s0, HH = hp.s1, HW = hp.s2;
"""


# The prologue every window kernel starts with: names for the 16 geometry values.
GEOMETRY = geometry()


# The spatial axes by their letter in the GEOMETRY names: input size I*, kernel K*, output O*,
# strides S*, dilations D*, head padding H*; positions are o* (output), p* (input), k* (offset).
_AXES = "DHW"

# A flat output index o as its window position (od, oh, ow), a flat input index p as (pd, ph, pw).
OUTPUT_POSITION = "const int ow = o % OW, oh = (o / OW) % OH, od = o / (OW * OH);"
INPUT_POSITION = "const int pw = p % IW, ph = (p / IW) % IH, pd = p / (IW * IH);"

ROW_RUN = 16  # outputs along W that one work-item of MaxPool with Indices computes


def run_position(run: int, lead: str) -> str:
    """The C that places work-item ``item`` on its run of ``run`` outputs along W of one
    output row: ``ow0 .. ow_end``, the row's position (od, oh) and leading index ``lead``
    (image-channel), found once for the run. Needs the geometry names."""
    return f"""const int per_row = (OW + {run - 1}) / {run}, row = item / per_row;
  const int ow0 = (item - row * per_row) * {run}, ow_end = min(OW, ow0 + {run});
  const int oh = row % OH, od = (row / OH) % OD, {lead} = row / (OH * OD);"""


def run_items(win: "Window", outputs: int, run: int) -> int:
    """The work-items of a kernel placed by :func:`run_position` over ``outputs`` outputs."""
    width = win.out[-1]
    return outputs // width * -(-width // run) if outputs else 0


def row_run_head(lead: str) -> str:
    """The C that starts a kernel with one work-item ``item`` per run of ``ROW_RUN`` outputs
    along W of one output row (:func:`run_position`: one output per work-item spent more on
    the row's divisions than on a 3x3 window), and ``interior``, which says every window of
    the run lies inside the input (walks with no bounds to check). Needs the geometry
    names."""
    return f"""{run_position(ROW_RUN, lead)}
  const int interior = od * SD - HD >= 0 && od * SD - HD + (KD - 1) * DD < ID
      && oh * SH - HH >= 0 && oh * SH - HH + (KH - 1) * DH < IH
      && ow0 * SW - HW >= 0 && (ow_end - 1) * SW - HW + (KW - 1) * DW < IW;"""


def window_shape(win: "Window") -> "Window":
    """``win`` reduced to what a program per window shape compiles in (kernel, strides,
    dilations): the key and the ``fixed`` argument of :func:`geometry`."""
    return Window((1,) * 3, win.kernel, (1,) * 3, win.strides, win.dilations, (0,) * 3,
                  (0,) * 3)


def _nest(heads: list[list[str]], body: str, indent: str) -> str:
    """Loops nested one per axis: ``heads[j]`` opens axis j's loop body, ``body`` is innermost.
    ``indent`` is the indentation of the place the result is spliced in (its first line takes
    that place's own)."""
    lines = []
    for depth, head in enumerate(heads):
        lines += ["  " * depth + line for line in head]
    lines += ["  " * len(heads) + line for line in textwrap.dedent(body).strip().splitlines()]
    lines += ["  " * depth + "}" for depth in reversed(range(len(heads)))]
    return ("\n" + indent).join(lines)


def over_window(body: str, skip_padding: bool = True, indent: str = "  ") -> str:
    """C loops over the kernel offsets (kd, kh, kw) of output window (od, oh, ow), each with its
    input position (pd, ph, pw); ``body`` runs at each one, or only at those inside the input
    (not in padding) with ``skip_padding``."""
    heads = []
    for a in _AXES:
        k, p = f"k{a.lower()}", f"p{a.lower()}"
        head = [f"for (int {k} = 0; {k} < K{a}; ++{k}) {{",
                f"  const int {p} = o{a.lower()} * S{a} - H{a} + {k} * D{a};"]
        if skip_padding:
            head.append(f"  if ({p} < 0 || {p} >= I{a}) continue;")
        heads.append(head)
    return _nest(heads, body, indent)


def over_windows_reaching(body: str, indent: str = "  ") -> str:
    """C loops over the kernel offsets (kd, kh, kw) whose window reaches input position
    (pd, ph, pw): those with o * s - h + k * d = p, so o = (p + h - k * d) / s when that divides
    and lies in [0, O). ``body`` runs at each one, seeing its window's position (od, oh, ow)."""
    heads = []
    for a in _AXES:
        k, t = f"k{a.lower()}", f"t{a.lower()}"
        heads.append([f"for (int {k} = 0; {k} < K{a}; ++{k}) {{",
                      f"  const int {t} = p{a.lower()} + H{a} - {k} * D{a};",
                      f"  if ({t} < 0 || {t} % S{a} || {t} / S{a} >= O{a}) continue;"])
    position = "const int od = td / SD, oh = th / SH, ow = tw / SW;"
    return _nest(heads, position + "\n" + textwrap.dedent(body).strip(), indent)


@dataclass(frozen=True)
class Window:
    """A window geometry padded to three spatial axes."""

    size: tuple[int, int, int]       # input spatial size
    kernel: tuple[int, int, int]
    out: tuple[int, int, int]
    strides: tuple[int, int, int]
    dilations: tuple[int, int, int]
    head: tuple[int, int, int]
    tail: tuple[int, int, int]

    @classmethod
    def of(cls, geom: Geometry, size: Sequence[int]) -> "Window":
        """The window of ``geom`` over an input of spatial ``size`` (one object per geometry:
        its kernel arguments and sizes are computed once, not at every launch)."""
        return _window_of(geom, tuple(int(s) for s in size))

    @functools.cached_property
    def args(self) -> tuple:
        """The ``g`` (int16) and ``hp`` (int4) kernel arguments."""
        import pyopencl.cltypes as cltypes

        values = (self.size + self.kernel + self.out + self.strides + self.dilations + (0,))
        return cltypes.make_int16(*values), cltypes.make_int4(*self.head, 0)

    @functools.cached_property
    def kernel_size(self) -> int:
        return math.prod(self.kernel)

    @functools.cached_property
    def out_size(self) -> int:
        return math.prod(self.out)

    @functools.cached_property
    def in_size(self) -> int:
        return math.prod(self.size)


@functools.lru_cache(maxsize=1024)
def _window_of(geom: Geometry, size: tuple[int, ...]) -> Window:
    rank = len(size)
    if rank > _RANK:
        raise BackendError(f"windows over {rank} spatial axes: the OpenCL kernels support "
                           f"at most {_RANK}")
    lead = _RANK - rank

    def pad(values, fill):
        return (fill,) * lead + tuple(int(v) for v in values)
    return Window(pad(size, 1), pad(geom.kernel, 1), pad(geom.out, 1), pad(geom.strides, 1),
                  pad(geom.dilations, 1), pad(geom.head, 0), pad(geom.tail, 0))


# The window walk of col2im: it does not depend on the dtype, so is built once.
_COL2IM_SUM = over_windows_reaching("""
    const int k = (kd * KH + kh) * KW + kw, o = (od * OH + oh) * OW + ow;
    acc += base[k * O + o];""")


def window_source(storage: str, compute: str, load, store) -> str:
    """The program of the window kernels for one dtype (see each kernel's comment)."""
    return f"""
/* im2col: cols[n, c, k, o] (addressed by four strides) = x[n, c, window o, offset k].
   One work-item per (output row (od, oh), k, n * C + c) walks the row: no division per
   element. */
__kernel void im2col(const int C, const int16 g, const int4 hp,
                     __global const {storage}* x, const int x_off,
                     __global {storage}* cols, const int c_off, const int4 cs) {{
  {GEOMETRY}
  const int row = get_global_id(0), k = get_global_id(1), nc = get_global_id(2);
  if (row >= OD * OH || k >= KD * KH * KW) return;
  const int n = nc / C, c = nc - n * C;
  const int oh = row % OH, od = row / OH;
  const int kw = k % KW, kh = (k / KW) % KH, kd = k / (KW * KH);
  const int pd = od * SD - HD + kd * DD, ph = oh * SH - HH + kh * DH;
  const int row_inside = pd >= 0 && pd < ID && ph >= 0 && ph < IH;
  __global const {storage}* source = x + x_off + ((size_t)nc * ID + pd) * IH * IW + ph * IW;
  __global {storage}* target = cols + c_off + n * cs.s0 + c * cs.s1 + k * cs.s2
                               + row * OW * cs.s3;
  for (int ow = 0; ow < OW; ++ow) {{
    const int pw = ow * SW - HW + kw * DW;
    target[ow * cs.s3] = row_inside && pw >= 0 && pw < IW ? source[pw] : ({storage})0;
  }}
}}

/* col2im: y[n, m, p] = bias[m] + sum over the windows o and offsets k that reach p of
   cols[n, m, k, o] (ConvTranspose: the gather form of the scatter, no atomics) */
__kernel void col2im(const int total, const int M, const int16 g, const int4 hp,
                     __global const {storage}* cols, const int c_off,
                     __global const {storage}* bias, const int b_off, const int has_bias,
                     __global {storage}* y, const int y_off) {{
  const int i = get_global_id(0);
  if (i >= total) return;
  {GEOMETRY}
  /* here (ID, IH, IW) is the output size and (OD, OH, OW) the input (window) count */
  const int P = ID * IH * IW, O = OD * OH * OW, K = KD * KH * KW;
  const int p = i % P, m = (i / P) % M, n = i / (P * M);
  {INPUT_POSITION}
  {compute} acc = has_bias ? {load("bias", "b_off + m")} : 0;
  __global const {storage}* base = cols + c_off + (n * M + m) * K * O;
  {_COL2IM_SUM}
  {store("y", "y_off + i", "acc")};
}}

"""


PANEL_RUN = 8  # panels of the packed columns one work-item of im2col_packed writes


def packed_columns_source(storage: str, fixed: Window) -> str:
    """``im2col_packed`` for windows of ``fixed``'s kernel shape, strides and dilations
    (constants: a segment inside the input with stride 1 is a plain copy the compiler
    vectorises): im2col straight into the GEMM's packed B panels Bp[n, g][panel][C/group *
    K][NR], one work-item per (row kk of the columns, run of PANEL_RUN panels, n * group + g)
    writing NR consecutive windows a panel, stepping (od, oh, ow) instead of dividing (one
    panel per work-item spent 280 us on a SqueezeNet 3x3 Conv's columns on PoCL)."""
    return f"""
__kernel void im2col_packed(const int C, const int group, const int panels, const int nr,
                            const int16 g, const int4 hp, __global const {storage}* x,
                            const int x_off, __global {storage}* out) {{
  {geometry(fixed)}
  const int K = KD * KH * KW, CG = C / group;
  const int kk = get_global_id(0), first = get_global_id(1) * {PANEL_RUN};
  const int ng = get_global_id(2);
  if (kk >= CG * K || first >= panels) return;
  const int cl = kk / K, k = kk - cl * K;
  const int n = ng / group, gi = ng - n * group;
  const int kw = k % KW, kh = (k / KW) % KH, kd = k / (KW * KH);
  __global const {storage}* source = x + x_off + ((size_t)n * C + gi * CG + cl) * ID * IH * IW;
  const int last = min(panels, first + {PANEL_RUN});
  int o = first * nr;
  int ow = o % OW, oh = (o / OW) % OH, od = o / (OW * OH);
  for (int panel = first; panel < last; ++panel) {{
    __global {storage}* target = out + ((size_t)(ng * panels + panel) * CG * K + kk) * nr;
    /* the panel as segments of output rows: per segment the row's bounds are checked once,
       and a segment that reads inside the input row is a strided copy */
    for (int r = 0; r < nr; ) {{
      const int len = min(OW - ow, nr - r);
      const int pd = od * SD - HD + kd * DD, ph = oh * SH - HH + kh * DH;
      const int pw0 = ow * SW - HW + kw * DW;
      __global {storage}* into = target + r;
      if (od < OD && pd >= 0 && pd < ID && ph >= 0 && ph < IH) {{
        __global const {storage}* row = source + (pd * IH + ph) * IW + pw0;
        if (pw0 >= 0 && pw0 + (len - 1) * SW < IW) {{
          for (int j = 0; j < len; ++j)
            into[j] = row[j * SW];
        }} else {{
          for (int j = 0; j < len; ++j) {{
            const int pw = pw0 + j * SW;
            into[j] = pw >= 0 && pw < IW ? row[j * SW] : ({storage})0;
          }}
        }}
      }} else {{
        for (int j = 0; j < len; ++j)
          into[j] = ({storage})0;
      }}
      r += len;
      ow += len;
      if (ow == OW) {{
        ow = 0;
        if (++oh == OH) {{ oh = 0; ++od; }}
      }}
    }}
  }}
}}
"""
