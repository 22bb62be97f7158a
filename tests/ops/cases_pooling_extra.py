"""Op-table cases: LpPool, GlobalLpPool and MaxUnpool.

onnx.reference's LpPool rescales an average by the kernel size, which equals the p-norm of the
window only when no window reaches into padding (the official node tests and onnxruntime pad
with zeros); cases with padding or ceil_mode use the naive window loop below instead, written
from the definition. onnx.reference has no GlobalLpPool: its cases use a NumPy reference.
"""
import itertools

import numpy as np

from tests.ops.harness import Case, rand


def _head_and_count(n, k, s, d, attrs, axis, rank):
    """The head padding and the window count along one axis, from the ONNX spec's formulas."""
    e = (k - 1) * d + 1
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = -(-n // s)
        total = max(0, (out - 1) * s + e - n)
        return (total // 2 if auto_pad == "SAME_UPPER" else total - total // 2), out
    pads = attrs.get("pads") or [0] * (2 * rank)
    head, tail = (0, 0) if auto_pad == "VALID" else (pads[axis], pads[rank + axis])
    span = n + head + tail - e
    if attrs.get("ceil_mode"):
        out = -(-span // s) + 1
        if (out - 1) * s >= n + head:  # a last window starting in the tail padding is dropped
            out -= 1
    else:
        out = span // s + 1
    return head, out


def lp_pool_reference(inputs, attrs):
    """Each window's (sum |x|^p)^(1/p) over the input elements it covers (padding is zero)."""
    x = inputs[0].astype(np.float64)
    p, kernel = attrs.get("p", 2), attrs["kernel_shape"]
    rank = len(kernel)
    strides = attrs.get("strides") or [1] * rank
    dilations = attrs.get("dilations") or [1] * rank
    geometry = [_head_and_count(x.shape[2 + i], kernel[i], strides[i], dilations[i], attrs, i,
                                rank) for i in range(rank)]
    y = np.zeros(x.shape[:2] + tuple(c for _, c in geometry))
    for o in itertools.product(*(range(c) for _, c in geometry)):
        total = np.zeros(x.shape[:2])
        for k in itertools.product(*(range(n) for n in kernel)):
            pos = [o[i] * strides[i] - geometry[i][0] + k[i] * dilations[i] for i in range(rank)]
            if all(0 <= q < x.shape[2 + i] for i, q in enumerate(pos)):
                total += np.abs(x[(slice(None), slice(None)) + tuple(pos)]) ** p
        y[(slice(None), slice(None)) + o] = total ** (1.0 / p)
    return [y.astype(inputs[0].dtype)]


def global_lp_pool_reference(inputs, attrs):
    x = inputs[0]
    p = attrs.get("p", 2)
    total = np.sum(np.abs(x.astype(np.float64)) ** p, axis=tuple(range(2, x.ndim)),
                   keepdims=True)
    return [(total ** (1.0 / p)).astype(x.dtype)]


def _lp(name, x, reference=None, **attrs):
    return Case("LpPool", [x], attrs=attrs, name=name, reference=reference, rtol=1e-5,
                atol=1e-5)


LP_POOL = [
    _lp("k2_p2", rand(1, 2, 5, 5), kernel_shape=[2, 2]),
    _lp("k3s2_p3", rand(2, 2, 7, 6), kernel_shape=[3, 3], strides=[2, 2], p=3),
    _lp("p1_dilations", rand(1, 1, 6, 6), kernel_shape=[2, 2], dilations=[2, 2], p=1),
    _lp("1d", rand(1, 3, 9), kernel_shape=[3], strides=[2]),
    _lp("3d", rand(1, 1, 4, 4, 4), kernel_shape=[2, 2, 2], strides=[2, 2, 2], p=3),
    _lp("pads", rand(1, 2, 5, 5), lp_pool_reference, kernel_shape=[3, 3], pads=[1, 2, 2, 0],
        p=3),
    _lp("same_upper", rand(1, 1, 5, 5), lp_pool_reference, kernel_shape=[2, 3],
        strides=[2, 2], auto_pad="SAME_UPPER"),
    _lp("same_lower", rand(1, 1, 6, 5), lp_pool_reference, kernel_shape=[3, 2],
        auto_pad="SAME_LOWER", p=1),
    _lp("ceil_mode", rand(1, 1, 6, 6), lp_pool_reference, kernel_shape=[3, 3], strides=[2, 2],
        pads=[1, 1, 1, 1], ceil_mode=1),
    _lp("unread_tail", rand(1, 1, 7, 8), lp_pool_reference, kernel_shape=[2, 2],
        strides=[3, 3]),
]

GLOBAL_LP_POOL = [
    Case("GlobalLpPool", [rand(2, 3, 4, 5)], reference=global_lp_pool_reference, name="p2"),
    Case("GlobalLpPool", [rand(1, 2, 7)], attrs={"p": 1}, reference=global_lp_pool_reference,
         name="1d_p1"),
    Case("GlobalLpPool", [rand(1, 2, 3, 2, 4)], attrs={"p": 3},
         reference=global_lp_pool_reference, name="3d_p3"),
]


def _pooled(x, kernel):
    """MaxPool over non-overlapping windows of ``kernel`` (stride = kernel): the maxima and
    their flat indices into x, computed window by window."""
    n, c = x.shape[:2]
    out_shape = tuple(s // k for s, k in zip(x.shape[2:], kernel))
    values = np.zeros((n, c) + out_shape, x.dtype)
    index = np.zeros((n, c) + out_shape, np.int64)
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*(range(m) for m in out_shape)):
            best = None
            for k in itertools.product(*(range(m) for m in kernel)):
                pos = tuple(oi * ki + kk for oi, ki, kk in zip(o, kernel, k))
                if best is None or x[(b, ch) + pos] > x[(b, ch) + best]:
                    best = pos
            values[(b, ch) + o] = x[(b, ch) + best]
            index[(b, ch) + o] = np.ravel_multi_index((b, ch) + best, x.shape)
    return values, index


_X4, _I4 = _pooled(rand(2, 2, 4, 6), (2, 2))
_X1, _I1 = _pooled(rand(1, 3, 9), (3,))
# output_shape only appends zeros: the indices still address the unpooled (4, 4) block, as the
# official node test and onnx.reference have it.
_X5, _I5 = _pooled(rand(1, 2, 4, 4), (2, 2))

# pads [0, 0, 1, 0] unpool (2, 2, 1, 3) to (2, 2, 1, 6): one of each pair of columns of every
# (image, channel) row, as flat indices over the whole output.
_PADDED_INDEX = (np.arange(4).reshape(2, 2, 1, 1) * 6
                 + np.array([0, 3, 5]) - np.array([0, 1, 0]) * (np.arange(4) % 2).reshape(
                     2, 2, 1, 1)).astype(np.int64)

MAX_UNPOOL = [
    Case("MaxUnpool", [_X4, _I4], attrs={"kernel_shape": [2, 2], "strides": [2, 2]},
         name="k2s2"),
    Case("MaxUnpool", [_X1, _I1], attrs={"kernel_shape": [3], "strides": [3]}, name="1d"),
    Case("MaxUnpool", [_X5, _I5, np.array([1, 2, 5, 5], np.int64)],
         attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, const=(2,),
         name="output_shape"),
    Case("MaxUnpool", [_X4[:, :, :1, :], _PADDED_INDEX],
         attrs={"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 0]},
         name="pads"),
]

CASES = LP_POOL + GLOBAL_LP_POOL + MAX_UNPOOL
