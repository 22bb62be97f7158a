"""Op-table cases: normalisation, Dropout, Softmax and LogSoftmax, and their private gradients.

Private gradient ops are checked against NumPy references written in a different form from the
kernels (the textbook chain rule through mean and variance, explicit channel loops). Training-mode
Dropout is random: its cases check what must hold for every draw (see _dropout_training_check).
"""
import numpy as np

from portable import random
from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ops import registry
from portable.passes.autodiff import differentiate
from tests.ops.harness import Case, build, rand, run_ours


def _positive(*shape, seed=0):
    return rand(*shape, seed=seed, low=0.5, high=1.5)


def _bn_inputs(*shape, seed=0):
    c = shape[1] if len(shape) > 1 else 1
    return [rand(*shape, seed=seed), _positive(c, seed=seed + 1), rand(c, seed=seed + 2),
            rand(c, seed=seed + 3), _positive(c, seed=seed + 4)]


# -- references of the private gradient ops ----------------------------------------------------


def _textbook_norm_grad(x, dxhat, axes, eps, d_mean=0.0, d_var=0.0):
    """dL/dx for xhat = (x - mu) / sqrt(var + eps) over ``axes``, chaining through mu and var
    (Ioffe & Szegedy 2015, section 3); d_mean, d_var add gradients reaching mu and var."""
    m = int(np.prod([x.shape[a] for a in axes]))
    mu = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    std = np.sqrt(var + eps)
    dvar = np.sum(dxhat * (x - mu), axis=axes, keepdims=True) * -0.5 * std ** -3 + d_var
    dmu = (np.sum(-dxhat / std, axis=axes, keepdims=True)
           + dvar * np.mean(-2 * (x - mu), axis=axes, keepdims=True) + d_mean)
    return dxhat / std + dvar * 2 * (x - mu) / m + dmu / m


def _bn_grad_reference(inputs, attrs):
    dy, x, scale, d_rm, d_rv = inputs
    axes = (0, 2, 3)
    c = (1, -1, 1, 1)
    carry = 1 - attrs["momentum"]
    dx = _textbook_norm_grad(x, dy * scale.reshape(c), axes, attrs["epsilon"],
                             carry * d_rm.reshape(c), carry * d_rv.reshape(c))
    mu, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    xhat = (x - mu) / np.sqrt(var + attrs["epsilon"])
    return [a.astype(x.dtype) for a in (dx, np.sum(dy * xhat, axis=axes), np.sum(dy, axis=axes))]


def _ln_grad_reference(inputs, attrs):
    dy, x, scale, d_mean, d_inv_std = inputs
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    eps = attrs["epsilon"]
    var = x.var(axis=axes, keepdims=True)
    d_var = d_inv_std * -0.5 * (var + eps) ** -1.5  # inv_std = (var + eps)^-1/2
    dx = _textbook_norm_grad(x, dy * scale, axes, eps, d_mean, d_var)
    xhat = (x - x.mean(axis=axes, keepdims=True)) / np.sqrt(var + eps)
    lead = tuple(range(x.ndim - len(axes)))
    return [dx.astype(x.dtype), np.sum(dy * xhat, axis=lead).astype(x.dtype)]


def _lrn_grad_reference(inputs, attrs):
    dy, x = inputs
    size, alpha, beta, bias = attrs["size"], attrs["alpha"], attrs["beta"], attrs["bias"]
    channels = x.shape[1]
    low, high = (size - 1) // 2, -(-(size - 1) // 2)
    windows = [range(max(0, c - low), min(channels - 1, c + high) + 1) for c in range(channels)]
    d = np.stack([bias + alpha / size * sum(x[:, i] ** 2 for i in w) for w in windows], axis=1)
    dx = dy * d ** -beta
    for j, window in enumerate(windows):  # y_j depends on x_i for every i in j's window
        common = dy[:, j] * x[:, j] * -beta * d[:, j] ** (-beta - 1) * alpha / size
        for i in window:
            dx[:, i] += common * 2 * x[:, i]
    return [dx.astype(x.dtype)]


def _bn_passthrough_reference(inputs, attrs):
    """Inference with the running-statistic outputs asked for (imperative calls name every
    output; ONNX forbids them): they pass the inputs through."""
    x, scale, bias, mean, var = inputs
    c = (1, -1, 1)
    y = scale.reshape(c) * (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + 1e-5)
    return [(y + bias.reshape(c)).astype(x.dtype), mean, var]


def _dropout_grad_reference(inputs, attrs):
    dy, mask, ratio, training = inputs
    return [dy * mask / (1 - ratio) if training else dy]


# -- training-mode Dropout ---------------------------------------------------------------------

_SEED = 20240601


def _dropout_training_check(inputs, attrs):
    """Not an independent reference: training-mode Dropout is random, so this checks what must
    hold for every draw, then reseeds so the table's own run draws the same mask (the table's
    comparison then checks that ``portable.random.seed`` makes Dropout reproducible).

    Checked: the mask is boolean and keeps about 1 - ratio of the elements; the output is
    x / (1 - ratio) where the mask is set and 0 elsewhere; the gradient graph of a one-output
    node switched to training by the op's training_mode facet (which adds the mask output) drops
    the same elements: dx = dy * mask / (1 - ratio).
    """
    x, ratio = inputs[0], float(inputs[1])
    case = Case("Dropout", inputs, attrs, outputs=2)
    random.seed(_SEED)
    y, mask = run_ours(case)
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    spread = 5 * np.sqrt(ratio * (1 - ratio) / x.size)
    assert abs(mask.mean() - (1 - ratio)) < spread, f"kept {mask.mean()}, ratio {ratio}"
    np.testing.assert_allclose(y, np.where(mask, x / (1 - ratio), 0), rtol=1e-6)

    graph, feeds = build(Case("Dropout", inputs[:2]), inputs[:2])
    node = registry.get("Dropout").training_mode(graph.nodes[0], True)
    assert node.attrs["training_mode"] == 1 and len(node.outputs) == 2 and node.outputs[1]
    graph = graph.replace(nodes=(node,), outputs=node.outputs)
    grad_graph, _ = differentiate(graph, ["in0"], heads=[node.outputs[0]])
    head = rand(*x.shape, seed=9)
    feeds[f"{node.outputs[0]}_head_grad"] = head
    y2, mask2, dx = CompiledGraph(grad_graph, cpu()).run(feeds)
    np.testing.assert_allclose(y2, np.where(mask2, x / (1 - ratio), 0), rtol=1e-6)
    np.testing.assert_allclose(dx, np.where(mask2, head / (1 - ratio), 0), rtol=1e-6)
    assert not np.array_equal(mask, mask2), "two runs drew the same mask"
    random.seed(_SEED)
    return [y, mask]


CASES = [
    # BatchNormalization: inference, training (batch statistics, running-statistic outputs)
    Case("BatchNormalization", _bn_inputs(2, 3, 2, 2), name="inference"),
    Case("BatchNormalization", _bn_inputs(4, 3, seed=5), attrs={"epsilon": 1e-2},
         name="inference_2d"),
    Case("BatchNormalization", _bn_inputs(6, seed=6), name="inference_1d"),
    Case("BatchNormalization", _bn_inputs(3, 2, 2, seed=9), outputs=3,
         reference=_bn_passthrough_reference, name="inference_all_outputs"),
    Case("BatchNormalization", _bn_inputs(3, 2, 2, 2, seed=7), outputs=3,
         attrs={"training_mode": 1, "momentum": 0.8}, name="training"),
    Case("BatchNormalization", _bn_inputs(4, 2, 3, seed=8), attrs={"training_mode": 1},
         name="training_y_only"),
    Case("BatchNormalization", [a.astype(np.float16) for a in _bn_inputs(3, 2, 2, 2)],
         attrs={"training_mode": 1}, outputs=3, grad=False, rtol=1e-3, atol=1e-3,
         name="training_float16"),
    Case("portable.BatchNormalizationGrad",
         [rand(2, 3, 2, 2, seed=1), rand(2, 3, 2, 2, seed=2), _positive(3, seed=3),
          rand(3, seed=4), rand(3, seed=5)], attrs={"epsilon": 1e-5, "momentum": 0.9},
         outputs=3, reference=_bn_grad_reference),
    # LayerNormalization
    Case("LayerNormalization", [rand(2, 3, 4), rand(4, seed=1), rand(4, seed=2)], outputs=3),
    Case("LayerNormalization", [rand(2, 3, 4), rand(3, 4, seed=1), rand(3, 4, seed=2)],
         attrs={"axis": 1, "epsilon": 1e-3}, outputs=3, name="axis1"),
    Case("LayerNormalization", [rand(3, 5), rand(1, 5, seed=1)], name="no_bias_broadcast"),
    Case("LayerNormalization", [rand(2, 3, 2), rand(2, 3, 2, seed=1), rand(3, 1, seed=2)],
         attrs={"axis": 0}, outputs=2, name="axis0"),
    Case("LayerNormalization",
         [rand(2, 3, 4, dtype=np.float16), rand(4, seed=1, dtype=np.float16)], outputs=3,
         grad=False, rtol=1e-3, atol=1e-3, name="float16"),
    # rows far from zero: the mean is subtracted before the squares are summed
    Case("LayerNormalization", [rand(5, 16, low=1000, high=1001), rand(16, seed=1),
                                rand(16, seed=2)], grad=False, rtol=1e-3, atol=1e-3,
         name="offset_rows"),
    Case("LayerNormalization", [rand(3, 5, 7, dtype=np.float64), rand(5, 7, seed=1,
                                                                     dtype=np.float64)],
         attrs={"axis": -2, "epsilon": 1e-2}, outputs=3, name="float64_two_axes"),
    Case("portable.LayerNormalizationGrad",
         [rand(2, 3, 4, seed=1), rand(2, 3, 4, seed=2), rand(3, 4, seed=3),
          rand(2, 1, 1, seed=4), rand(2, 1, 1, seed=5)],
         attrs={"axis": 1, "epsilon": 1e-5, "stash_type": 1}, outputs=2,
         reference=_ln_grad_reference),
    # LRN (onnx.reference loops over N instead of C: cases keep N == C so it is right)
    Case("LRN", [rand(3, 3, 2, 2)], attrs={"size": 3, "alpha": 0.5}),
    Case("LRN", [rand(4, 4, 2, 1)], attrs={"size": 2, "alpha": 0.3, "beta": 0.5, "bias": 2.0},
         name="even_size"),
    Case("LRN", [rand(2, 2, 3, 3)], attrs={"size": 5, "alpha": 0.8}, name="wide_window"),
    Case("LRN", [rand(3, 3, 2, 1)], attrs={"size": 3, "alpha": 0.4, "beta": 1.0},
         name="integer_beta"),
    Case("portable.LRNGrad", [rand(2, 5, 3, seed=1), rand(2, 5, 3, seed=2)],
         attrs={"size": 4, "alpha": 0.6, "beta": 0.75, "bias": 1.0},
         reference=_lrn_grad_reference),
    # Dropout: deterministic cases against onnx.reference, then the random training mode
    Case("Dropout", [rand(3, 4)], name="default_inference"),
    Case("Dropout", [rand(3, 4), np.array(0.3, np.float32), np.array(False)], outputs=2,
         name="training_false"),
    Case("Dropout", [rand(3, 4), np.array(0.0, np.float32), np.array(True)], outputs=2,
         name="ratio0"),
    Case("Dropout", [rand(40, 50), np.array(0.25, np.float32), np.array(True)], outputs=2,
         grad=False, reference=_dropout_training_check, name="training_input"),
    Case("Dropout", [rand(30, 40), np.array(0.5, np.float32)], attrs={"training_mode": 1},
         outputs=2, grad=False, reference=_dropout_training_check, name="training_attr"),
    Case("portable.DropoutGrad", [rand(3, 4), rand(3, 4, seed=1) > 0,
                                  np.array(0.4, np.float32), np.array(True)],
         reference=_dropout_grad_reference, name="training"),
    Case("portable.DropoutGrad", [rand(3, 4), np.ones((3, 4), bool),
                                  np.array(0.4, np.float32), np.array(False)],
         reference=_dropout_grad_reference, name="inference"),
    # Softmax and LogSoftmax
    Case("Softmax", [rand(3, 4, low=-5, high=5)]),
    Case("Softmax", [rand(3, 4)], attrs={"axis": 0}, name="axis0"),
    Case("Softmax", [rand(2, 3, 4, low=-5, high=5)], attrs={"axis": -2}, name="axis_neg2"),
    Case("Softmax", [rand(2, 3, low=500, high=600)], grad=False, name="large"),
    Case("Softmax", [rand(3, 4, dtype=np.float16)], grad=False, atol=1e-3, name="float16"),
    # many short rows: normalised through a transposed copy (allocated per call, or from the
    # planned workspace above 64 KiB)
    Case("Softmax", [rand(2, 16, 8, low=-5, high=5)], name="short_rows"),
    Case("Softmax", [rand(4, 5, 3, low=-30, high=30)], grad=False, name="short_rows_wide_range"),
    Case("Softmax", [rand(20, 7, low=500, high=600)], grad=False, name="short_rows_large"),
    Case("Softmax", [rand(4, 8, 64, 16, low=-5, high=5)], grad=False,
         name="short_rows_workspace"),
    Case("Softmax", [rand(4, 200, low=-5, high=5)], grad=False, name="long_rows"),
    Case("LogSoftmax", [rand(3, 4, low=-5, high=5)]),
    Case("LogSoftmax", [rand(3, 4)], attrs={"axis": 0}, name="axis0"),
    Case("LogSoftmax", [rand(2, 3, 4, low=-5, high=5)], attrs={"axis": 1}, name="axis1"),
    Case("LogSoftmax", [rand(2, 3, low=500, high=510)], grad=False, name="large"),
]

CASES += [
    Case("RMSNormalization", [rand(2, 3, 4), rand(4, seed=1, low=0.5, high=1.5)]),
    Case("RMSNormalization", [rand(2, 3, 4), rand(3, 4, seed=1, low=0.5, high=1.5)],
         attrs={"axis": 1, "epsilon": 1e-3}, name="two_axes"),
    Case("RMSNormalization", [rand(4, 6), rand(1, 6, seed=2)], attrs={"axis": -1},
         name="scale_with_leading_one"),
]

CASES += [
    Case("InstanceNormalization", [rand(2, 3, 4, 5), rand(3, seed=1, low=0.5, high=1.5),
                                   rand(3, seed=2)]),
    Case("InstanceNormalization", [rand(2, 4, 6), rand(4, seed=3), rand(4, seed=4)],
         attrs={"epsilon": 1e-2}, name="one_spatial_axis"),
]

CASES += [
    Case("GroupNormalization", [rand(2, 6, 3, 2), rand(6, seed=1, low=0.5, high=1.5),
                                rand(6, seed=2)], attrs={"num_groups": 3}),
    Case("GroupNormalization", [rand(2, 4, 5), rand(4, seed=3), rand(4, seed=4)],
         attrs={"num_groups": 1, "epsilon": 1e-3}, name="one_group"),
]
