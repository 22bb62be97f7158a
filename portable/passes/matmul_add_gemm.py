"""MatMul by a matrix, then a bias Add, becomes one Gemm over the rows (``MATMUL_ADD_AS_GEMM``).

PyTorch exports ``nn.Linear`` on an input of rank 3 or more (a transformer's (seq, batch, d)
activations) as ``Add(bias, MatMul(X, W))`` with W of shape (K, N). Run as written, that is
two steps, and the MatMul of a stack: NumPy calls BLAS once per leading index (16 calls of
(8, 64) x (64, 192) for the encoder's QKV projection at batch 8, 1.6x the time of one
(128, 64) x (64, 192) call). The rows of X do not interact, so

    Add(MatMul(X, W), B) = Reshape(Gemm(Reshape(X, (M, K)), W, B), X.shape[:-1] + (N,))

with M the product of X's leading dims: one GEMM with the bias added in its epilogue, and the
two Reshapes are views (no kernel runs, nothing is copied). A constant W that nothing else
reads is stored transposed, ``Gemm(..., W^T, B, transB=1)``: the layout of PyTorch's Linear
export, whose rows a GEMM of a few rows reads contiguously. ONNX Runtime's MatMulAddFusion
does the same. An activation after the Add (a feed-forward layer's Relu) moves onto the
GEMM's rows, before the Reshape back, where ``FUSE_ACTIVATIONS`` joins it to the Gemm.

The rule applies when W is a matrix, X has rank 2 or more, both have static shapes, the dtype
is one Gemm takes (float16, float32, float64), and B only broadcasts along N: its size is 1
or N, its other dims are 1 and its rank is not above X's (so the Add's output is the MatMul's
shape). A B of rank above 1 is a constant reshaped to (N,) (or (1,)); a B computed at run time
must already be (N,) or (1,).

Example:
    >>> graph = rewrite(graph, MATMUL_ADD_AS_GEMM)  # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from portable.ir.graph import Node
from portable.passes.inference_rewrites import is_activation
from portable.passes.rewriter import Match, Pattern, Rewrite, Rule

_GEMM_DTYPES = frozenset(np.dtype(name) for name in ("float16", "float32", "float64"))


def _bias(m: Match, name: str, columns: int, rank: int) -> tuple[str, dict] | None:
    """The bias as Gemm's C (a value name and any new initializer), or None where the Add
    broadcasts otherwise."""
    shape = m.type(name).shape
    size = int(np.prod(shape)) if all(d is not None for d in shape) else -1
    if len(shape) > rank or size not in (1, columns) or any(d != 1 for d in shape[:-1]):
        return None
    if len(shape) == 1:
        return name, {}
    value = m.const(name)
    if value is None:
        return None
    flat = m.fresh(f"{name}/row")
    return flat, {flat: np.ascontiguousarray(value).reshape(-1)}


def _as_gemm(m: Match) -> Rewrite | None:
    add, matmul = m["add"], m["matmul"]
    x, w = matmul.inputs
    x_type, w_type = m.type(x), m.type(w)
    if (len(w_type.shape) != 2 or len(x_type.shape) < 2 or not x_type.is_static
            or not w_type.is_static or x_type.dtype not in _GEMM_DTYPES
            or w_type.dtype != x_type.dtype):
        return None
    rows, depth, columns = int(np.prod(x_type.shape[:-1])), x_type.shape[-1], w_type.shape[1]
    out_shape = x_type.shape[:-1] + (columns,)
    if (not rows or not columns or depth != w_type.shape[0]
            or m.type(add.outputs[0]).shape != out_shape):
        return None  # (a 0 in a Reshape target would mean "keep the input's dim")
    bias_name = add.inputs[1] if add.inputs[0] == matmul.outputs[0] else add.inputs[0]
    if m.type(bias_name).dtype != x_type.dtype:
        return None
    bias = _bias(m, bias_name, columns, len(x_type.shape))
    if bias is None:
        return None
    c, initializers = bias
    weight, attrs = w, {}
    value = m.const(w)
    if value is not None and m.readers(w) == 1:
        # A constant weight read by this MatMul alone is stored transposed, (N, K): each
        # output column's K weights in one row, the layout a GEMM of a few rows reads
        # contiguously (the compiled small Gemm's dot products) and the one PyTorch's
        # Linear exports with transB; onnxruntime prepacks such weights too. The (K, N)
        # original, read by nothing else, is pruned: the memory is the same.
        weight = m.fresh(f"{w}/transposed")
        initializers[weight] = np.ascontiguousarray(np.asarray(value).T)
        attrs = {"transB": 1}
    if len(x_type.shape) == 2:
        return Rewrite([Node("Gemm", (x, weight, c), add.outputs, attrs, matmul.name)],
                       initializers)
    flat_x, flat_y = m.fresh(f"{matmul.name}/rows"), m.fresh(f"{matmul.name}/gemm")
    in_shape, back_shape = m.fresh(f"{matmul.name}/rows_shape"), m.fresh(f"{add.name}/shape")
    initializers[in_shape] = np.array([rows, depth], dtype=np.int64)
    initializers[back_shape] = np.array(out_shape, dtype=np.int64)
    nodes = [Node("Reshape", (x, in_shape), (flat_x,), {}, f"{matmul.name}/rows"),
             Node("Gemm", (flat_x, weight, c), (flat_y,), attrs, matmul.name),
             Node("Reshape", (flat_y, back_shape), add.outputs, {}, add.name)]
    return Rewrite(nodes, initializers)


def _activation_before_reshape(m: Match) -> Rewrite | None:
    """act(Reshape(Gemm(...))) -> Reshape(act(Gemm(...))): an elementwise op commutes with a
    reshape, and on the Gemm's own output FUSE_ACTIVATIONS joins it to the Gemm."""
    act, reshape, gemm = m["act"], m["reshape"], m["gemm"]
    if m.type(act.outputs[0]) != m.type(reshape.outputs[0]):
        return None
    for name in act.inputs[1:]:  # an operand that broadcasts would see another shape
        if name and (m.const(name) is None or m.const(name).size != 1):
            return None
    rows = m.fresh(f"{act.name}/rows")
    return Rewrite([gemm, Node(act.op, (gemm.outputs[0],) + tuple(act.inputs[1:]), (rows,),
                         dict(act.attrs), act.name),
                    Node("Reshape", (rows,) + tuple(reshape.inputs[1:]), act.outputs,
                         dict(reshape.attrs), reshape.name)])


MATMUL_ADD_AS_GEMM = (
    Rule("matmul-add-as-gemm", Pattern("Add", Pattern("MatMul", name="matmul"), None, name="add"),
         _as_gemm),
    Rule("matmul-add-as-gemm", Pattern("Add", None, Pattern("MatMul", name="matmul"), name="add"),
         _as_gemm),
    # (an activation after the Add is visited after it: it moves in the next sweep)
    Rule("activation-before-reshape",
         Pattern(is_activation, Pattern("Reshape", Pattern("Gemm", name="gemm"), None,
                                        name="reshape"), name="act"),
         _activation_before_reshape),
)
