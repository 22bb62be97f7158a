"""Batched GEMM: C = alpha * A @ B + beta * C on any strided (transposed, broadcast) views.

Stages:
1. Pack: A into panels Ap[batch][M/MR][K][MR] and B into Bp[batch][N/NR][K][NR] (zero-padded
   to whole panels). Packing reads any strides, so transposes, batch broadcasting and
   im2col columns cost nothing extra in the GEMM itself, and the GEMM then streams both
   operands contiguously: no cache-set conflicts from large leading dimensions. On CPUs an A
   whose rows are contiguous along k is not packed: the multiply reads its MR rows as MR
   streams, as fast as from panels, and packing was another pass (``a_operand``).
2. Multiply: one work-item per MR x NR tile of C keeps the tile in registers (NR / VW vectors
   per row: register blocking) and walks K with a load of each A element and each B vector
   per step (A broadcast element by element, B as aligned vectors). Work-items sweep the
   operand with fewer panel bytes fastest, so the other's panel stays in cache meanwhile.
   Pack and multiply launches are kept per layout (``launch``).
3. Store: alpha * tile (+ beta * C), then an optional epilogue (:class:`Epilogue`: a value
   per row, a residual tensor, a clamp): a tile inside C straight from its registers with
   vector stores (through memory to a helper it was 1.2-1.5x slower at K <= 256), a tile on
   C's edges through private memory, element by element where it is cut. A Conv's bias,
   its residual and its Relu or Clip are thus added while the tile is in registers, instead
   of a pass over the output each.

MR x NR is 6 x 16 for 4-byte types on CPUs (12 vector accumulators stay in AVX2's 16
registers), 6 x 8 for 8-byte ones, and 4 x VW on GPUs.
An operand is packed once per batch only along the batch axes it does not broadcast over (a
convolution's weights once per group, not once per image), and the panels of an operand packed
again while its buffer was not written (inference weights) are reused
(``Runtime.derived``).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from portable.errors import BackendError

from backends.opencl.allocator import CLArray, empty
from backends.opencl.codegen import collapse, int8_arg, peel_axes
from backends.opencl.gemv import gemv
from backends.opencl.launch import Launch, keep
from backends.opencl.scalars import ctype, preamble


def tile_shape(runtime: Any, dtype: Any = np.float32) -> tuple[int, int, int]:
    """(MR, NR, vector width) for ``dtype`` on the device: on CPUs a 6 x (2 vectors of 32
    bytes) tile, 12 accumulators that with two B vectors and one broadcast fill AVX2's 16
    registers (BLIS's Haswell shape); smaller 4 x VW tiles on GPUs."""
    width = 4 if np.dtype(dtype).itemsize == 8 else 8
    if runtime.device.is_cpu:
        return 6, 2 * width, width
    return 4, width, width


class Epilogue(NamedTuple):
    """What the store adds to each tile of C, in this order: ``bias``, a value per row of C
    broadcast along its columns (a Conv's bias per output channel; its shape broadcasts to C's
    batch axes followed by M), ``residual``, a tensor of C's shape, then a clamp to
    [``low``, ``high``] (Relu: low 0; Clip) that keeps NaN, as the elementwise Relu and Clip
    do. None leaves a part out."""

    bias: CLArray | None = None
    residual: CLArray | None = None
    low: float | None = None
    high: float | None = None

    @property
    def flags(self) -> tuple[bool, bool, bool, bool]:
        """Which parts the kernel is compiled with (each set of parts is its own program)."""
        return (self.bias is not None, self.residual is not None, self.low is not None,
                self.high is not None)


NO_EPILOGUE = Epilogue()


def pack_run(runtime: Any) -> int:
    """The values of k one pack work-item copies: on CPUs a run of them, so that a work-item
    does more than the few loads and stores a work-group costs to schedule (one k per
    work-item packed a 256 x 256 operand at about 1.4 GB/s on PoCL); one on GPUs, whose
    work-items are cheap and many."""
    return 64 if runtime.device.is_cpu else 1


def _pack_source(dtype: np.dtype, width: int, run: int) -> str:
    """``pack``: one work-item per (run of ``run`` values of k, panel, batch) copies the
    panel's ``width`` rows (a compile-time constant, so the row loop unrolls, and a panel of
    rows lying side by side in memory is copied in vectors); writes are contiguous."""
    c = ctype(dtype)
    decode = peel_axes("t", "brank", "bshape", lambda d: f"boff += c * bst.s{d};")
    return f"""
__kernel void pack(const int rows, const int K, const int panels, const int batches,
                   __global const {c.storage}* x, const int x_off,
                   const int rs, const int ks, const int brank, const int8 bshape,
                   const int8 bst, __global {c.storage}* out) {{
  const int k0 = get_global_id(0) * {run}, panel = get_global_id(1);
  const int batch = get_global_id(2);
  if (k0 >= K || panel >= panels || batch >= batches) return;
  const int k1 = min(K, k0 + {run});
  int t = batch, boff = 0;
  {decode}
  __global {c.storage}* target = out + (size_t)(batch * panels + panel) * K * {width};
  __global const {c.storage}* source = x + x_off + boff;
  const int row0 = panel * {width};
  const int kept = min({width}, rows - row0);
  if (kept == {width} && rs == 1) {{
    for (int k = k0; k < k1; ++k) {{
      __global const {c.storage}* from = source + k * ks + row0;
      for (int r = 0; r < {width}; ++r) target[k * {width} + r] = from[r];
    }}
  }} else if (kept == {width}) {{
    for (int k = k0; k < k1; ++k)
      for (int r = 0; r < {width}; ++r)
        target[k * {width} + r] = source[(row0 + r) * rs + k * ks];
  }} else {{
    for (int k = k0; k < k1; ++k)
      for (int r = 0; r < {width}; ++r)
        target[k * {width} + r] = r < kept ? source[(row0 + r) * rs + k * ks]
                                           : ({c.storage})0;
  }}
}}
"""


def _epilogue_code(flags: tuple[bool, bool, bool, bool], vector: str | None = None,
                   width: int = 1) -> str:
    """The statements that finish ``value`` (of type ``vector``, ``width`` elements; a scalar
    when None) at row ``row`` of C and residual element ``z_at``: the parts of
    :class:`Epilogue` in ``flags``."""
    has_bias, has_residual, has_low, has_high = flags
    lines = []
    if has_bias:
        lines.append(f"value += {f'({vector})' if vector else ''}(bias[bso + row * bias_rs]);")
    if has_residual:
        lines.append(f"value += vload{width}(0, Z + z_at);" if vector else
                     "value += Z[z_at];")
    for on, name, compare in ((has_low, "low", "<"), (has_high, "high", ">")):
        if on:  # (a comparison with NaN is false: NaN stays, as in the elementwise kernels)
            lines.append(f"value = select(value, ({vector})({name}), value {compare} "
                         f"({vector})({name}));" if vector else
                         f"value = value {compare} {name} ? {name} : value;")
    return " ".join(lines)


def _gemm_source(dtype: np.dtype, mr: int, nr: int, vw: int,
                 flags: tuple[bool, bool, bool, bool] = NO_EPILOGUE.flags,
                 a_direct: bool = False) -> str:
    c = ctype(dtype)
    t, tv, nv = c.compute, f"{c.compute}{vw}", nr // vw
    acc = ", ".join(f"c{r}_{v} = 0" for r in range(mr) for v in range(nv))
    # A's elements are loaded one by one (the compiler broadcasts them from memory), so MR
    # need not be a vector width: 6 x 16 keeps 12 accumulators + 2 B vectors in 16 registers.
    # ``a_direct``: A is read where it lies (rows a_rs apart, k contiguous; rows past M read
    # row M - 1, whose results are not stored) instead of from its packed panels.
    if a_direct:
        a_rows = " ".join(f"__global const {t}* a_row{r} = a + min(row0 + {r}, M - 1) * a_rs;"
                          for r in range(mr))
        a_load = " ".join(f"const {t} a{r} = a_row{r}[k];" for r in range(mr))
        a_start = f"__global const {t}* a = Ap + a_off + ao; {a_rows}"
    else:
        a_load = " ".join(f"const {t} a{r} = a[k * {mr} + {r}];" for r in range(mr))
        a_start = f"__global const {t}* a = Ap + a_off + ao + (size_t)ip * K * {mr};"
    # B's panels are aligned to NR elements: plain vector loads (PoCL does not inline
    # vloadN, and the call would spill every accumulator).
    b_load = " ".join(f"const {tv} b{v} = ((__global const {tv}*)(b + k * {nr}))[{v}];"
                      for v in range(nv))
    fma = " ".join(f"c{r}_{v} += a{r} * b{v};" for r in range(mr) for v in range(nv))
    # Tiles go through private memory to the store helper: passing wide vectors to a
    # function would depend on the vector ABI of the target.
    stores = " ".join(
        f"vstore{vw}(alpha * c{r}_{v}, 0, tile + {(r * nv + v) * vw});"
        for r in range(mr) for v in range(nv))
    decode = peel_axes("t", "brank", "bshape", lambda d: (
        f"co += c * c_bst.s{d}; ao += (size_t)c * a_bst.s{d}; bo += (size_t)c * b_bst.s{d}; "
        f"bso += c * bias_bst.s{d}; zo += c * z_bst.s{d};"))
    vector_epilogue = _epilogue_code(flags, tv, vw)
    direct = " ".join(
        f"{{ const int row = row0 + {r}; __global {t}* p = C + co + row * c_rs + col0; "
        f"{tv} value = alpha * c{r}_{v}; if (beta != 0) value += beta * vload{vw}({v}, p); "
        f"const int z_at = zo + row * z_rs + col0 + {v * vw}; {vector_epilogue} "
        f"vstore{vw}(value, {v}, p); }}"
        for r in range(mr) for v in range(nv))
    scalar_epilogue = _epilogue_code(flags)
    vector_ok = "c_cs == 1" + (" && z_cs == 1" if flags[1] else "")
    return f"""
inline void store_tile(__global {t}* C, const int co, const int c_rs, const int c_cs,
                       const int row0, const int col0, const int M, const int N,
                       const {t}* tile, const {t} beta,
                       __global const {t}* bias, const int bso, const int bias_rs,
                       __global const {t}* Z, const int zo, const int z_rs, const int z_cs,
                       const {t} low, const {t} high) {{
  for (int r = 0; r < {mr} && row0 + r < M; ++r) {{
    const int row = row0 + r;
    const int base = co + row * c_rs;
    if ({vector_ok} && col0 + {nr} <= N) {{
      __global {t}* p = C + base + col0;
      for (int v = 0; v < {nv}; ++v) {{
        {tv} value = vload{vw}(0, tile + r * {nr} + v * {vw});
        if (beta != 0) value += beta * vload{vw}(v, p);
        const int z_at = zo + row * z_rs + col0 + v * {vw};
        {vector_epilogue}
        vstore{vw}(value, v, p);
      }}
      continue;
    }}
    for (int e = 0; e < {nr} && col0 + e < N; ++e) {{
      const int at = base + (col0 + e) * c_cs;
      {t} value = tile[r * {nr} + e];
      if (beta != 0) value += beta * C[at];
      const int z_at = zo + row * z_rs + (col0 + e) * z_cs;
      {scalar_epilogue}
      C[at] = value;
    }}
  }}
}}

__kernel void gemm(const int M, const int N, const int K,
                   __global const {t}* Ap, const int a_off, const int8 a_bst, const int a_rs,
                   __global const {t}* Bp,
                   const int8 b_bst, __global {t}* C, const int c_off, const int c_rs,
                   const int c_cs, const int brank, const int8 bshape, const int8 c_bst,
                   const int batches, const {t} alpha, const {t} beta,
                   __global const {t}* bias, const int bias_off, const int bias_rs,
                   const int8 bias_bst, __global const {t}* Z, const int z_off,
                   const int z_rs, const int z_cs, const int8 z_bst,
                   const {t} low, const {t} high, const int a_first) {{
  /* a_first: work-items run through A's panels fastest (each B panel stays in cache while
     every A panel meets it), else through B's */
  const int jp = get_global_id(a_first), ip = get_global_id(1 - a_first);
  const int bi = get_global_id(2);
  const int row0 = ip * {mr}, col0 = jp * {nr};
  if (row0 >= M || col0 >= N || bi >= batches) return;
  int t = bi, co = c_off, bso = bias_off, zo = z_off;
  size_t ao = 0, bo = 0;
  {decode}
  {a_start}
  __global const {t}* b = Bp + bo + (size_t)jp * K * {nr};
  {tv} {acc};
  for (int k = 0; k < K; ++k) {{
    {a_load}
    {b_load}
    {fma}
  }}
  if (row0 + {mr} <= M && col0 + {nr} <= N && {vector_ok}) {{
    // a whole tile inside C: stored from the registers (no round trip through memory)
    {direct}
    return;
  }}
  {t} tile[{mr * nr}];
  {stores}
  store_tile(C, co, c_rs, c_cs, row0, col0, M, N, tile, beta, bias, bso, bias_rs, Z, zo,
             z_rs, z_cs, low, high);
}}
"""


def gemm_kernel(runtime: Any, dtype: np.dtype,
                flags: tuple[bool, bool, bool, bool] = NO_EPILOGUE.flags,
                a_direct: bool = False):
    """The multiply-and-store kernel of ``dtype`` whose store has the epilogue parts ``flags``
    (:attr:`Epilogue.flags`), reading A's packed panels or (``a_direct``) A where it lies:
    each combination is its own program."""
    memo = runtime.memo("gemm_kernels")
    hit = memo.get((dtype.name, flags, a_direct))
    if hit is None:
        mr, nr, vw = tile_shape(runtime, dtype)
        source = preamble([dtype]) + _gemm_source(dtype, mr, nr, vw, flags, a_direct)
        hit = memo[(dtype.name, flags, a_direct)] = runtime.kernel(source, "gemm")
    return hit


def pack_kernel(runtime: Any, dtype: np.dtype, width: int):
    """The kernel packing ``dtype`` operands into panels of ``width`` rows."""
    memo = runtime.memo("gemm_pack")
    hit = memo.get((dtype.name, width))
    if hit is None:
        source = preamble([dtype]) + _pack_source(dtype, width, pack_run(runtime))
        hit = memo[(dtype.name, width)] = runtime.kernel(source, "pack")
    return hit


def pack_operand(runtime, x: CLArray, batch_shape, rows_axis, k_axis, width):
    """Pack the last two axes of ``x`` into panels, once per batch along the batch axes it
    does not broadcast over; returns the panels and their stride per batch axis (0 where
    ``x`` broadcasts). Panels of an operand packed again unchanged (weights) are reused."""
    layout = (x.dtype, x.shape, x.strides, tuple(batch_shape), rows_axis, k_axis, width)
    memo = runtime.memo("gemm_pack_launches")
    kept = memo.get(layout)
    if kept is None:
        kept = keep(memo, layout, _pack_launch(runtime, x, batch_shape, rows_axis, k_axis,
                                               width))
    launch, size, strides, key = kept
    key = ("gemm-pack", x.offset) + key
    cached = runtime.derived(x, key)
    if cached is not None:
        return cached, strides
    out = empty(runtime, (size,), x.dtype)
    if size:
        launch.run(runtime, [x, out])
    if runtime.wants_derived(x, key):
        runtime.keep_derived(x, key, out, out.nbytes)
    return out, strides


def _pack_launch(runtime, x: CLArray, batch_shape, rows_axis, k_axis, width):
    """(the pack launch of arrays [x, panels], the panels' size, their batch strides, the
    derived-data key of x's panels after its offset) for ``x``'s layout."""
    rows, k = x.shape[rows_axis], x.shape[k_axis]
    batch_strides = x.strides[:-2]
    own = [d if s else 1 for d, s in zip(batch_shape, batch_strides)]
    panels = -(-rows // width)
    size = panels * k * width
    strides = packed_strides(own, batch_strides, size)
    dims, (bst,) = collapse(own, [batch_strides])
    batches = math.prod(own)
    launch = Launch(runtime, pack_kernel(runtime, x.dtype, width),
                    (-(-k // pack_run(runtime)), panels, batches), work_group(runtime))
    launch.add(np.int32(rows), np.int32(k), np.int32(panels), np.int32(batches))
    launch.array(0, x)
    launch.add(np.int32(x.strides[rows_axis]), np.int32(x.strides[k_axis]),
               np.int32(len(dims)), int8_arg(dims), int8_arg(bst))
    launch.array(1, x, offset=False)  # (the panels: set at each call)
    return launch, batches * size, strides, (x.shape, x.strides, tuple(own), rows_axis, width)


def packed_strides(own: Sequence[int], batch_strides: Sequence[int], size: int) -> list[int]:
    """Strides of packed panels over the batch axes (0 where the operand broadcasts)."""
    step, packed = size, []
    for d, s in zip(reversed(own), reversed(batch_strides)):
        packed.append(step if s else 0)
        step *= d
    return packed[::-1]


def work_group(runtime) -> tuple[int, int, int]:
    """The work-group shape of the 3-D GEMM-side kernels: 4 x 4 on CPUs, 8 x 8 on GPUs,
    smaller where the device's work-groups are (``runtime.limits`` checks every launch)."""
    side = 4 if runtime.device.is_cpu else 8
    while side > 1 and side * side > runtime.device.max_work_group:
        side //= 2
    return side, side, 1


def gemm(a: CLArray, b: CLArray, c: CLArray, alpha: float = 1.0, beta: float = 0.0,
         epilogue: Epilogue = NO_EPILOGUE) -> None:
    """``c = alpha * a @ b + beta * c`` for views a (..., M, K), b (..., K, N) whose batch axes
    broadcast to c's (..., M, N), finished by ``epilogue``. ``beta = 0`` never reads c."""
    runtime = c.runtime
    if a.dtype != b.dtype or a.dtype != c.dtype:
        raise BackendError(f"gemm operands must share a dtype, got {a.dtype}, {b.dtype}, "
                           f"{c.dtype}")
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if b.shape[-2] != k or c.shape[-2:] != (m, n):
        raise BackendError(f"gemm shapes {a.shape} @ {b.shape} -> {c.shape} do not match")
    batch_shape = c.shape[:-2]
    if m == 1 and not batch_shape and k and not any(epilogue.flags) and gemv(
            a, b, c, alpha, beta):  # (one row: B read where it lies, not packed)
        return
    a = a.broadcast_to(batch_shape + (m, k))
    b = b.broadcast_to(batch_shape + (k, n))
    runtime.touch(c)
    if c.size == 0:
        return
    mr, nr, _ = tile_shape(runtime, c.dtype)
    with runtime.deferred():  # (one wait for the launches: each costs PoCL ~40 us)
        ap, a_bst, a_direct = a_operand(runtime, a, batch_shape, mr)
        bp, b_bst = pack_operand(runtime, b, batch_shape, -1, -2, nr)
        gemm_packed(ap, a_bst, bp, b_bst, c, k, alpha, beta, epilogue, a_direct)


def a_operand(runtime, a: CLArray, batch_shape, mr: int):
    """A as the multiply reads it: (A itself, its batch strides, True) on CPUs when its rows
    are contiguous along k (the multiply reads MR rows as MR streams: as fast as its packed
    panels, and packing costs another pass: a 256^3 product on PoCL took 319 us packed, 177
    direct), else (A's packed panels, their batch strides, False)."""
    if runtime.device.is_cpu and a.strides[-1] == 1 and a.shape[-1] > 1:
        return a, list(a.strides[:-2]), True
    return (*pack_operand(runtime, a, batch_shape, -2, -1, mr), False)


def gemm_packed(ap: CLArray, a_bst: Sequence[int], bp: CLArray, b_bst: Sequence[int],
                c: CLArray, k: int, alpha: float = 1.0, beta: float = 0.0,
                epilogue: Epilogue = NO_EPILOGUE, a_direct: bool = False) -> None:
    """The multiply and store stages on panels already packed (``tile_shape`` layout), with
    their strides per batch axis of ``c``, finished by ``epilogue``; with ``a_direct``,
    ``ap`` is A itself (``a_operand``)."""
    runtime = c.runtime
    runtime.touch(c)
    if c.size == 0:
        return
    bias, z = epilogue.bias, epilogue.residual
    layout = (c.dtype, c.shape, c.strides, tuple(a_bst), tuple(b_bst), k, alpha, beta,
              ap.strides[-2] if a_direct else None,
              None if bias is None else (bias.dtype, bias.shape, bias.strides),
              None if z is None else (z.dtype, z.shape, z.strides), epilogue.low,
              epilogue.high)
    memo = runtime.memo("gemm_launches")
    launch = memo.get(layout)
    if launch is None:
        launch = keep(memo, layout, _multiply_launch(ap, a_bst, bp, b_bst, c, k, alpha, beta,
                                                     epilogue, a_direct))
    launch.run(runtime, [ap, bp, c, c if bias is None else bias, c if z is None else z])


def _multiply_launch(ap, a_bst, bp, b_bst, c, k, alpha, beta, epilogue,
                     a_direct: bool) -> Launch:
    """The multiply-and-store launch of arrays [A's panels (or A itself: ``a_direct``), B's
    panels, C, the bias, the residual] (C standing in for an absent part: never read) for
    these layouts."""
    runtime = c.runtime
    m, n = c.shape[-2:]
    batch_shape = c.shape[:-2]
    mr, nr, _ = tile_shape(runtime, c.dtype)
    bias, z = c, c
    bias_strides, z_strides = (0,) * (c.ndim - 1), (0,) * c.ndim
    if epilogue.bias is not None:
        bias = epilogue.bias.broadcast_to(batch_shape + (m,))
        bias_strides = bias.strides
    if epilogue.residual is not None:
        z = epilogue.residual
        if z.shape != c.shape or z.dtype != c.dtype:
            raise BackendError(f"gemm residual {z.dtype}{list(z.shape)} does not match the "
                               f"output {c.dtype}{list(c.shape)}")
        z_strides = z.strides
    dims, (c_bst, a_bst, b_bst, bias_bst, z_bst) = collapse(
        batch_shape, [c.strides[:-2], a_bst, b_bst, bias_strides[:-1], z_strides[:-2]])
    batches = math.prod(batch_shape)
    dt = ctype(c.dtype)
    low, high = epilogue.low, epilogue.high
    # Work-items sweep the operand whose panels are fewer bytes fastest: the other's panel
    # stays in cache meanwhile, and the sweep's panels are read from cache the next time.
    a_first = int(m <= n)
    tiles = (-(-n // nr), -(-m // mr))
    launch = Launch(runtime, gemm_kernel(runtime, c.dtype, epilogue.flags, a_direct),
                    (tiles[a_first], tiles[1 - a_first], batches), work_group(runtime))
    launch.add(np.int32(m), np.int32(n), np.int32(k))
    launch.array(0, ap)
    launch.add(int8_arg(a_bst), np.int32(ap.strides[-2] if a_direct else 0))
    launch.array(1, bp, offset=False)
    launch.add(int8_arg(b_bst))
    launch.array(2, c)
    launch.add(np.int32(c.strides[-2]), np.int32(c.strides[-1]), np.int32(len(dims)),
               int8_arg(dims), int8_arg(c_bst), np.int32(batches), dt.scalar(alpha),
               dt.scalar(beta))
    launch.array(3, bias)
    launch.add(np.int32(bias_strides[-1]), int8_arg(bias_bst))
    launch.array(4, z)
    launch.add(np.int32(z_strides[-2]), np.int32(z_strides[-1]), int8_arg(z_bst),
               dt.scalar(0 if low is None else low), dt.scalar(0 if high is None else high),
               np.int32(a_first))
    return launch
