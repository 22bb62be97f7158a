"""Attention ops: Attention (scaled dot-product attention, ONNX 25) and RotaryEmbedding (ONNX 23).

Attention's geometry (``attention_geometry``) is worked out once here from the input shapes and
attributes and shared by the type rule, the gradient rule and every backend's kernel, so the
head layout (3-D inputs carry the heads in their last axis), grouped-query heads and the cache
length are read the same way everywhere.

Semantics follow ``onnx.reference`` (which generates the conformance cases) where it is more
precise than the schema's text: the scale is applied as sqrt(scale) to Q and to K, cast to Q's
dtype; ``qk_matmul_output_mode`` 0 and 1 both give the logits after the softcap (the reference
replaces the raw product once a softcap is given); the causal and sliding-window frontiers are
bottom-right aligned by an offset (past length with a cache, ``nonpad_kv_seqlen - q_len`` per
batch with an external cache, else 0); a query row whose additive bias is -inf everywhere gives
zero probabilities and a zero output row.

One leniency: opset 25 forbids ``q_num_heads``/``kv_num_heads`` with 4-D inputs, opsets 23-24
did not; they are accepted on 4-D inputs when they agree with the shapes, so older models load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from portable.dtypes import ONNX_DTYPES, is_float, to_onnx
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import require_float
from portable.shapes import broadcast_shape

# softmax_precision codes the schema lists; bfloat16 (16) has no portable dtype
SOFTMAX_PRECISIONS = (1, 10, 11)


def _optional(handles, index):
    """``handles[index]``, or None when that optional input or output is absent ("" in a
    graph; NDArray handles must not be tested for truth)."""
    handle = handles[index] if index < len(handles) else None
    return None if handle is None or (isinstance(handle, str) and not handle) else handle


@dataclass(frozen=True)
class AttentionGeometry:
    """The sizes of one Attention node, in the 4-D head layout (B, heads, seq, head size)."""

    rank: int  # 3 or 4: the layout of Q, K, V and Y
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int  # new keys (K's sequence length)
    past_len: int
    head_size: int
    v_head_size: int
    scale: float  # the product's scale: sqrt(scale) is applied to Q and to K

    @property
    def total_len(self) -> int:
        return self.past_len + self.kv_len

    @property
    def groups(self) -> int:
        """Query heads per key/value head (1: multi-head, > 1: grouped or multi-query)."""
        return self.q_heads // self.kv_heads

    def y_shape(self) -> tuple[int, ...]:
        if self.rank == 3:
            return (self.batch, self.q_len, self.q_heads * self.v_head_size)
        return (self.batch, self.q_heads, self.q_len, self.v_head_size)

    def scores_shape(self) -> tuple[int, ...]:
        return (self.batch, self.q_heads, self.q_len, self.total_len)

    def root_scale(self, dtype) -> float:
        """sqrt(scale) rounded to ``dtype``, as the reference scales Q and K."""
        return float(np.asarray(math.sqrt(self.scale), dtype=dtype))


def attention_geometry(q: tuple, k: tuple, v: tuple, past_key: tuple | None,
                       past_value: tuple | None, attrs: dict) -> AttentionGeometry:
    """The geometry of an Attention node from its input shapes and attributes.

    Raises:
        ValueError: the shapes or attributes do not fit together (the message says how).
    """
    rank = len(q)
    if rank not in (3, 4) or len(k) != rank or len(v) != rank:
        raise ValueError(f"Q, K and V must all be 3-D or all 4-D, got shapes {q}, {k}, {v}")
    q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if rank == 3:
        if q_heads is None or kv_heads is None:
            raise ValueError("3-D Q, K, V need both q_num_heads and kv_num_heads")
        if q_heads < 1 or kv_heads < 1:
            raise ValueError(f"q_num_heads={q_heads} and kv_num_heads={kv_heads} must be "
                             f"positive")
        for name, shape, heads in (("Q", q, q_heads), ("K", k, kv_heads), ("V", v, kv_heads)):
            if shape[2] % heads:
                raise ValueError(f"{name}'s hidden size {shape[2]} is not a multiple of its "
                                 f"{heads} heads")
        batch, q_len, kv_len = q[0], q[1], k[1]
        head, k_head, v_head = q[2] // q_heads, k[2] // kv_heads, v[2] // kv_heads
        v_len = v[1]
    else:
        for name, given, actual in (("q_num_heads", q_heads, q[1]),
                                    ("kv_num_heads", kv_heads, k[1])):
            if given is not None and given != actual:
                raise ValueError(f"{name}={given} disagrees with the 4-D inputs' {actual} "
                                 f"heads (opset 25 forbids the attribute with 4-D inputs)")
        batch, q_heads, q_len, head = q
        kv_heads, kv_len, k_head = k[1], k[2], k[3]
        if v[1] != kv_heads:
            raise ValueError(f"K has {kv_heads} heads but V has {v[1]}")
        v_len, v_head = v[2], v[3]
    if k[0] != batch or v[0] != batch:
        raise ValueError(f"Q, K and V must share the batch size, got {q}, {k}, {v}")
    if v_len != kv_len:
        raise ValueError(f"K and V must share the sequence length, got {k} and {v}")
    if k_head != head:
        raise ValueError(f"Q's head size {head} differs from K's {k_head}")
    if q_heads % kv_heads:
        raise ValueError(f"q_num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}")
    past_len = 0
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be given together")
    if past_key is not None:
        past_len = past_key[2] if len(past_key) == 4 else -1
        for name, shape, size in (("past_key", past_key, head),
                                  ("past_value", past_value, v_head)):
            if tuple(shape) != (batch, kv_heads, past_len, size):
                raise ValueError(f"{name} must be (batch {batch}, kv heads {kv_heads}, past "
                                 f"length, {size}) with past_key's past length, got {shape}")
    scale = attrs.get("scale")
    scale = 1.0 / math.sqrt(head) if scale is None else float(scale)
    return AttentionGeometry(rank, batch, q_heads, kv_heads, q_len, kv_len, past_len, head,
                             v_head, scale)


def _check_mask(ctx, geo: AttentionGeometry) -> None:
    mask = ctx.type(3)
    if mask.dtype != np.bool_ and not is_float(mask.dtype):
        ctx.fail(f"attn_mask must be bool (True attends) or floating point (added to the "
                 f"scores), got {mask.dtype.name}")
    shape = mask.shape
    if not 1 <= len(shape) <= 4 or shape[-1] > geo.total_len:
        ctx.fail(f"attn_mask {shape} must have rank 1 to 4 and at most {geo.total_len} "
                 f"(past + new) keys in its last axis")
    padded = shape[:-1] + (geo.total_len,)
    if broadcast_shape([padded, geo.scores_shape()]) != geo.scores_shape():
        ctx.fail(f"attn_mask {shape} does not broadcast to the scores "
                 f"{geo.scores_shape()} (batch, q heads, q length, total length)")


def _attention_infer(ctx):
    for i in (0, 1, 2):
        if not is_float(ctx.dtype(i)):  # (bfloat16 too: kernels compute it in float32)
            ctx.fail(f"input {ctx.op.input_name(i)!r} must be floating point, got "
                     f"{ctx.dtype(i).name}")
    if ctx.dtype(1) != ctx.dtype(0):
        ctx.fail(f"K ({ctx.dtype(1).name}) must have Q's dtype {ctx.dtype(0).name}")
    past = [ctx.shape(i) if ctx.has(i) else None for i in (4, 5)]
    for i, like in ((4, 0), (5, 2)):
        if ctx.has(i) and ctx.dtype(i) != ctx.dtype(like):
            ctx.fail(f"{ctx.op.input_name(i)} must have {ctx.op.input_name(like)}'s dtype "
                     f"{ctx.dtype(like).name}")
    try:
        geo = attention_geometry(ctx.shape(0), ctx.shape(1), ctx.shape(2), *past, ctx.attrs)
    except ValueError as error:
        ctx.fail(str(error))
    attrs = ctx.attrs
    if ctx.has(3):
        _check_mask(ctx, geo)
    if ctx.has(6):
        if ctx.has(4):
            ctx.fail("nonpad_kv_seqlen (an external cache) cannot be combined with "
                     "past_key/past_value (a cache inside the op)")
        if ctx.shape(6) != (geo.batch,) or ctx.dtype(6) != np.int64:
            ctx.fail(f"nonpad_kv_seqlen must be int64 of shape ({geo.batch},), got "
                     f"{ctx.type(6)!r}")
    for name in ("left_window_size", "right_window_size"):
        if attrs[name] < -1:
            ctx.fail(f"{name}={attrs[name]} must be -1 (unbounded) or non-negative")
    if attrs["qk_matmul_output_mode"] not in (0, 1, 2, 3):
        ctx.fail(f"qk_matmul_output_mode={attrs['qk_matmul_output_mode']} is not 0, 1, 2 or 3")
    precision = attrs["softmax_precision"]
    if precision is not None and precision not in SOFTMAX_PRECISIONS:
        ctx.fail(f"softmax_precision={precision} is not one of {SOFTMAX_PRECISIONS} (float, "
                 f"float16, double; bfloat16 has no portable dtype)")
    q_dtype, v_dtype = ctx.dtype(0), ctx.dtype(2)
    total = geo.total_len
    return [TensorType(geo.y_shape(), q_dtype),
            TensorType((geo.batch, geo.kv_heads, total, geo.head_size), q_dtype),
            TensorType((geo.batch, geo.kv_heads, total, geo.v_head_size), v_dtype),
            TensorType(geo.scores_shape(), q_dtype)]


def _attention_dtypes(ctx):
    # Q, K, past_key and Y, present_key, qk_matmul_output share T1; V, past_value and
    # present_value share T2.
    t1 = ctx.unify([0, 1, 4], [0, 1, 3])
    t2 = ctx.unify([2, 5], [2])
    return [t1, t1, t2, t1][:len(ctx.outputs)]


# -- Attention's gradient ----------------------------------------------------------------------


class _Heads:
    """Moves tensors between the node's layout and the grouped head layout
    (B, kv heads, groups * length, size), in which grouped-query attention is one batched
    MatMul per key/value head: query head h reads key/value head h // groups."""

    def __init__(self, g, geo: AttentionGeometry) -> None:
        self.g, self.geo = g, geo

    def _shape(self, *dims):
        return self.g.const(np.asarray(dims, np.int64))

    def to_heads(self, x, heads: int, length: int, size: int):
        """A 3-D (B, length, heads * size) tensor as 4-D (B, heads, length, size)."""
        if self.geo.rank == 4:
            return x
        split = self.g.emit("Reshape", x, self._shape(self.geo.batch, length, heads, size))
        return self.g.emit("Transpose", split, perm=[0, 2, 1, 3])

    def from_heads(self, x, heads: int, length: int, size: int):
        if self.geo.rank == 4:
            return x
        moved = self.g.emit("Transpose", x, perm=[0, 2, 1, 3])
        return self.g.emit("Reshape", moved, self._shape(self.geo.batch, length, heads * size))

    def grouped(self, x, last: int):
        """(B, q heads, S, last) -> (B, kv heads, groups * S, last)."""
        geo = self.geo
        return self.g.emit("Reshape", x, self._shape(geo.batch, geo.kv_heads,
                                                     geo.groups * geo.q_len, last))

    def ungrouped(self, x, last: int):
        geo = self.geo
        return self.g.emit("Reshape", x, self._shape(geo.batch, geo.q_heads, geo.q_len, last))


def _add(g, a, b):
    return b if a is None else a if b is None else g.emit("Add", a, b)


def _swap(g, x):
    return g.emit("Transpose", x, perm=[0, 1, 3, 2])


def _attention_grad(g, dys):
    """With P = softmax(C + bias), C = softcap(s Q K^T) (grouped heads) and Y = P V:
    dV = P^T dY, dP = dY V^T (+ the probabilities' own gradient in mode 3),
    dZ = P (dP - rowsum(dP P)), dC = dZ (+ the scores' gradient in modes 0-2),
    dL = dC (1 - tanh^2(L / c)) under a softcap c, dQ = s dL K and dK = s dL^T Q.
    P, K and V with the cache prepended are recomputed by the op itself (mode 3 outputs P),
    so the masks, windows and fully-masked rows match the forward exactly. A float attn_mask
    gets dZ (summed to its shape); past_key and past_value get the cache part of dK and dV."""
    q, k, v = g.inputs[:3]
    mask, past_k, past_v = (_optional(g.inputs, i) for i in (3, 4, 5))
    geo = attention_geometry(g.shape(q), g.shape(k), g.shape(v),
                             None if past_k is None else g.shape(past_k),
                             None if past_v is None else g.shape(past_v), g.attrs)
    dy, d_present_k, d_present_v, d_scores = (_optional(dys, i) for i in range(4))
    mode = g.attrs["qk_matmul_output_mode"]
    attrs = {key: value for key, value in g.attrs.items() if value is not None}
    _, k_all, v_all, probs = g.emit("Attention", *g.inputs, num_outputs=4,
                                    **{**attrs, "qk_matmul_output_mode": 3})
    heads = _Heads(g, geo)
    total = geo.total_len
    q4 = heads.grouped(heads.to_heads(q, geo.q_heads, geo.q_len, geo.head_size), geo.head_size)
    p = heads.grouped(probs, total)
    dk_all, dv_all, dp = d_present_k, d_present_v, None
    if dy is not None:
        dy4 = heads.grouped(heads.to_heads(dy, geo.q_heads, geo.q_len, geo.v_head_size),
                            geo.v_head_size)
        dv_all = _add(g, dv_all, g.emit("MatMul", _swap(g, p), dy4))
        dp = g.emit("MatMul", dy4, _swap(g, v_all))
    if d_scores is not None and mode == 3:
        dp = _add(g, dp, heads.grouped(d_scores, total))
    dz = None
    if dp is not None:
        last = g.const(np.asarray([3], np.int64))
        dot = g.emit("ReduceSum", g.emit("Mul", dp, p), last, keepdims=1)
        dz = g.emit("Mul", p, g.emit("Sub", dp, dot))
    d_bias = _add(g, dz, heads.grouped(d_scores, total)
                  if d_scores is not None and mode == 2 else None)
    dc = _add(g, dz, heads.grouped(d_scores, total)
              if d_scores is not None and mode in (0, 1, 2) else None)
    dq = dk = dv = dpast_k = dpast_v = d_mask = None
    if dc is not None:
        root = g.scalar(geo.root_scale(g.dtype(q)), q4)
        scale = g.emit("Mul", root, root)
        softcap = g.attrs["softcap"]
        if softcap > 0:
            logits = g.emit("Mul", g.emit("MatMul", q4, _swap(g, k_all)), scale)
            t = g.emit("Tanh", g.emit("Div", logits, g.scalar(softcap, q4)))
            dc = g.emit("Mul", dc, g.emit("Sub", g.scalar(1.0, q4), g.emit("Mul", t, t)))
        dq = heads.ungrouped(g.emit("Mul", g.emit("MatMul", dc, k_all), scale), geo.head_size)
        dq = heads.from_heads(dq, geo.q_heads, geo.q_len, geo.head_size)
        dk_all = _add(g, dk_all, g.emit("Mul", g.emit("MatMul", _swap(g, dc), q4), scale))
    if mask is not None and d_bias is not None and g.dtype(mask).kind == "f":
        d_mask = _mask_grad(g, heads.ungrouped(d_bias, total), mask)
    if dk_all is not None:
        dpast_k, dk = _split_cache(g, dk_all, geo, past_k is not None)
        dk = heads.from_heads(dk, geo.kv_heads, geo.kv_len, geo.head_size)
    if dv_all is not None:
        dpast_v, dv = _split_cache(g, dv_all, geo, past_v is not None)
        dv = heads.from_heads(dv, geo.kv_heads, geo.kv_len, geo.v_head_size)
    return [dq, dk, dv, d_mask, dpast_k, dpast_v, None]


def _split_cache(g, grad, geo: AttentionGeometry, has_past: bool):
    """(d past, d new) from a gradient over the whole (past + new) sequence axis."""
    if not has_past:
        return None, grad
    axis = g.const(np.asarray([2], np.int64))

    def part(start, stop):
        return g.emit("Slice", grad, g.const(np.asarray([start], np.int64)),
                      g.const(np.asarray([stop], np.int64)), axis)
    return part(0, geo.past_len), part(geo.past_len, geo.total_len)


def _mask_grad(g, d_bias, mask):
    """The additive mask's gradient: the bias's, over the keys the mask covers (a shorter
    mask was padded with -inf), summed over the axes it broadcast along."""
    keys = g.shape(mask)[-1]
    if keys != g.shape(d_bias)[-1]:
        d_bias = g.emit("Slice", d_bias, g.const(np.asarray([0], np.int64)),
                        g.const(np.asarray([keys], np.int64)),
                        g.const(np.asarray([3], np.int64)))
    grad = g.sum_to(d_bias, mask)
    if g.dtype(mask) != g.dtype(grad):
        grad = g.emit("Cast", grad, to=to_onnx(g.dtype(mask)))
    return grad


declare("Attention",
        inputs=("Q", "K", "V", "attn_mask?", "past_key?", "past_value?", "nonpad_kv_seqlen?"),
        outputs=("Y", "present_key?", "present_value?", "qk_matmul_output?"),
        infer=_attention_infer, onnx_since=25, grad=_attention_grad, nondiff_inputs=(6,),
        dtype_rule=_attention_dtypes,
        attrs={"is_causal": Attr("int", 0), "kv_num_heads": Attr("int", None),
               "q_num_heads": Attr("int", None), "qk_matmul_output_mode": Attr("int", 0),
               "scale": Attr("float", None), "softcap": Attr("float", 0.0),
               "softmax_precision": Attr("int", None), "left_window_size": Attr("int", -1),
               "right_window_size": Attr("int", -1)})


def softmax_dtype(attrs: dict, scores_dtype) -> np.dtype:
    """The dtype softmax runs in: softmax_precision's, else the biased scores' own."""
    precision = attrs.get("softmax_precision")
    return np.dtype(scores_dtype) if precision is None else ONNX_DTYPES[precision]

# -- RotaryEmbedding ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RotaryGeometry:
    """The sizes of one RotaryEmbedding node, in the (B, S, heads, head size) layout."""

    rank: int
    batch: int
    seq_len: int
    heads: int
    head_size: int
    rotary_dim: int  # the leading channels of each head that rotate (even)


def rotary_geometry(x: tuple, attrs: dict) -> RotaryGeometry:
    """RotaryEmbedding's geometry from X's shape and the attributes.

    Raises:
        ValueError: naming what does not fit.
    """
    heads = attrs.get("num_heads")
    if len(x) == 4:
        if heads not in (None, x[1]):
            raise ValueError(f"num_heads={heads} disagrees with X's {x[1]} heads")
        batch, heads, seq, size = x
    elif len(x) == 3:
        if not heads or heads < 1 or x[2] % heads:
            raise ValueError(f"3-D X {x} needs num_heads, a positive divisor of its hidden "
                             f"size {x[2]}; got {heads}")
        batch, seq, size = x[0], x[1], x[2] // heads
    else:
        raise ValueError(f"X must be 3-D (batch, seq, hidden) or 4-D (batch, heads, seq, "
                         f"head size), got {x}")
    rotary = attrs.get("rotary_embedding_dim") or size
    if rotary % 2 or not 0 < rotary <= size:
        raise ValueError(f"rotary_embedding_dim={rotary} must be even and at most the head "
                         f"size {size}")
    return RotaryGeometry(len(x), batch, seq, heads, size, rotary)


def _rotary_infer(ctx):
    require_float(ctx, 0)
    try:
        geo = rotary_geometry(ctx.shape(0), ctx.attrs)
    except ValueError as error:
        ctx.fail(str(error))
    half = geo.rotary_dim // 2
    for i in (1, 2):
        if ctx.dtype(i) != ctx.dtype(0):
            ctx.fail(f"{ctx.op.input_name(i)} must have X's dtype {ctx.dtype(0).name}")
        shape = ctx.shape(i)
        if ctx.has(3):
            ok = len(shape) == 2 and shape[1] == half
            want = f"(max position, {half})"
        else:
            ok = shape == (geo.batch, geo.seq_len, half)
            want = f"({geo.batch}, {geo.seq_len}, {half}) without position_ids"
        if not ok:
            ctx.fail(f"{ctx.op.input_name(i)} {shape} must be {want}")
    if ctx.has(3) and (ctx.shape(3) != (geo.batch, geo.seq_len) or ctx.dtype(3) != np.int64):
        ctx.fail(f"position_ids must be int64 of shape ({geo.batch}, {geo.seq_len}), got "
                 f"{ctx.type(3)!r}")
    return [ctx.type(0)]


def _rotary_grad(g, dys):
    """The rotation by angle a is orthogonal: dX is dY rotated by -a (sin negated). The caches
    get, per rotated pair (x1, x2) and output pair (dy1, dy2), summed over the heads:
    d cos = dy1 x1 + dy2 x2 and d sin = dy2 x1 - dy1 x2, accumulated per position through a
    one-hot MatMul when position_ids pick the rows."""
    x, cos, sin = g.inputs[:3]
    positions = _optional(g.inputs, 3)
    dy = dys[0]
    attrs = {key: value for key, value in g.attrs.items() if value is not None}
    dx = g.emit("RotaryEmbedding", dy, cos, g.emit("Neg", sin), positions, **attrs)
    geo = rotary_geometry(g.shape(x), g.attrs)
    x1, x2 = _rotary_pairs(g, x, geo)
    dy1, dy2 = _rotary_pairs(g, dy, geo)
    heads_axis = g.const(np.asarray([2], np.int64))

    def per_position(a, b, c, d, combine):
        total = g.emit(combine, g.emit("Mul", a, b), g.emit("Mul", c, d))
        return g.emit("ReduceSum", total, heads_axis, keepdims=0)  # (B, S, R/2)
    d_cos = per_position(dy1, x1, dy2, x2, "Add")
    d_sin = per_position(dy2, x1, dy1, x2, "Sub")
    if positions is not None:
        d_cos, d_sin = (_scatter_rows(g, d, positions, g.shape(cos)[0]) for d in (d_cos, d_sin))
    return [dx, d_cos, d_sin, None]


def _rotary_pairs(g, x, geo: RotaryGeometry):
    """The two halves of every rotated pair, each (B, S, heads, R/2)."""
    if geo.rank == 4:
        x = g.emit("Transpose", x, perm=[0, 2, 1, 3])
    else:
        x = g.emit("Reshape", x, g.const(np.asarray(
            [geo.batch, geo.seq_len, geo.heads, geo.head_size], np.int64)))
    rotary, half = geo.rotary_dim, geo.rotary_dim // 2
    starts, stops, step = ((0, 1), (rotary, rotary), 2) if g.attrs["interleaved"] else \
        ((0, half), (half, rotary), 1)

    def part(k):
        return g.emit("Slice", x, *(g.const(np.asarray([v], np.int64))
                                    for v in (starts[k], stops[k], 3, step)))
    return part(0), part(1)


def _scatter_rows(g, rows, positions, count: int):
    """sum of ``rows`` (B, S, R/2) into (count, R/2) at ``positions`` (B, S): one-hot^T rows."""
    batch, seq, width = g.shape(rows)
    which = g.emit("Unsqueeze", positions, g.const(np.asarray([2], np.int64)))
    one_hot = g.emit("Cast", g.emit("Equal", which, g.const(np.arange(count, dtype=np.int64))),
                     to=to_onnx(g.dtype(rows)))
    flat = g.const(np.asarray([batch * seq, -1], np.int64))
    return g.emit("MatMul", g.emit("Transpose", g.emit("Reshape", one_hot, flat), perm=[1, 0]),
                  g.emit("Reshape", rows, flat))


declare("RotaryEmbedding", inputs=("X", "cos_cache", "sin_cache", "position_ids?"),
        outputs=("Y",), infer=_rotary_infer, onnx_since=23, grad=_rotary_grad,
        nondiff_inputs=(3,),
        attrs={"interleaved": Attr("int", 0), "num_heads": Attr("int", None),
               "rotary_embedding_dim": Attr("int", 0)})
