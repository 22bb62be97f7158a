"""Op-table cases: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and their private gradients.

NegativeLogLikelihoodLoss avoids ignore_index=-1 without weights: onnx.reference then averages
over every element (ignored ones included) while the ONNX spec and its backend test cases, and
our kernel, average over the elements not ignored.

The private gradient ops are checked against per-element loops over the chain rule.
"""
import numpy as np

from tests.ops.harness import Case, rand


def _labels(*shape, classes, seed=0, dtype=np.int64):
    rng = np.random.default_rng(seed)
    return rng.integers(0, classes, size=shape).astype(dtype)


def _with_ignored(labels, value, every=3):
    labels = labels.copy()
    labels.reshape(-1)[::every] = value
    return labels


def _element_weights(target, weight, ignore_index, dtype):
    """(weight of each element, is it ignored) in loop form."""
    flat = target.reshape(-1)
    ignored = np.array([ignore_index is not None and t == ignore_index for t in flat])
    w = np.array([0.0 if skip else (1.0 if weight is None else weight[t])
                  for t, skip in zip(flat, ignored)], dtype)
    return w.reshape(target.shape), ignored.reshape(target.shape)


def _loss_grad_wrt_picked(d_out, target, weight, attrs, dtype):
    """dLoss / d(-picked value) per element of target's shape."""
    w, _ = _element_weights(target, weight, attrs.get("ignore_index"), dtype)
    if attrs.get("reduction", "mean") != "mean":
        return d_out * w
    no_weights = weight is None and attrs.get("ignore_index") is None
    return d_out * w / (target.size if no_weights else w.sum())


def _nll_grad_reference(inputs, attrs):
    d_loss, x, target, weight = (list(inputs) + [None])[:4]
    coef = _loss_grad_wrt_picked(d_loss, target, weight, attrs, x.dtype)
    dx = np.zeros_like(x)
    for index in np.ndindex(*target.shape):
        n, rest = index[0], index[1:]
        if coef[index] != 0:
            dx[(n, target[index]) + rest] = -coef[index]
    return [dx]


def _sce_grad_reference(inputs, attrs):
    d_out, scores, labels, weights, d_log_prob = (list(inputs) + [None, None])[:5]
    coef = _loss_grad_wrt_picked(d_out, labels, weights, attrs, scores.dtype)
    prob = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True)
    dx = np.zeros_like(scores)
    for index in np.ndindex(*labels.shape):
        n, rest = index[0], index[1:]
        for c in range(scores.shape[1]):
            at = (n, c) + rest
            hit = 1.0 if c == labels[index] else 0.0
            dx[at] = coef[index] * (prob[at] - hit)
            if d_log_prob is not None:  # through log_prob[n, :, rest] = log softmax
                column = (n, slice(None)) + rest
                dx[at] += d_log_prob[at] - prob[at] * d_log_prob[column].sum()
    return [dx.astype(scores.dtype)]


_X4 = rand(4, 5)
_Y4 = _labels(4, classes=5, seed=1)
_W5 = rand(5, seed=2, low=0.2, high=2.0)
_X3D = rand(2, 3, 4, seed=3)
_Y3D = _labels(2, 4, classes=3, seed=4)
_X4D = rand(2, 3, 2, 2, seed=5)
_Y4D = _labels(2, 2, 2, classes=3, seed=6)
_W3 = rand(3, seed=7, low=0.2, high=2.0)

CASES = [
    # SoftmaxCrossEntropyLoss
    Case("SoftmaxCrossEntropyLoss", [_X4, _Y4], name="mean"),
    Case("SoftmaxCrossEntropyLoss", [_X4, _Y4], attrs={"reduction": "sum"}, name="sum"),
    Case("SoftmaxCrossEntropyLoss", [_X4, _Y4], attrs={"reduction": "none"}, name="none"),
    Case("SoftmaxCrossEntropyLoss", [_X4, _Y4, _W5], name="weights_mean"),
    Case("SoftmaxCrossEntropyLoss", [_X4, _Y4.astype(np.int32), _W5],
         attrs={"reduction": "none"}, outputs=2, name="weights_none_logprob_int32"),
    Case("SoftmaxCrossEntropyLoss", [_X3D, _with_ignored(_Y3D, 1)],
         attrs={"ignore_index": 1}, name="ignore_mean"),
    Case("SoftmaxCrossEntropyLoss", [_X3D, _with_ignored(_Y3D, -100), _W3],
         attrs={"ignore_index": -100}, outputs=2, name="ignore_outside_weights_logprob"),
    Case("SoftmaxCrossEntropyLoss", [_X4D, _Y4D], attrs={"reduction": "none"}, outputs=2,
         name="4d_none_logprob"),
    Case("SoftmaxCrossEntropyLoss", [_X4D, _with_ignored(_Y4D, 2, every=2), _W3],
         attrs={"reduction": "sum", "ignore_index": 2}, name="4d_ignore_sum"),
    Case("portable.SoftmaxCrossEntropyLossGrad",
         [np.array(0.7, np.float32), _X3D, _with_ignored(_Y3D, 1), _W3, rand(2, 3, 4, seed=8)],
         attrs={"reduction": "mean", "ignore_index": 1}, reference=_sce_grad_reference,
         name="mean_weights_ignore_logprob"),
    Case("portable.SoftmaxCrossEntropyLossGrad", [rand(4, seed=9), _X4, _Y4],
         attrs={"reduction": "none"}, reference=_sce_grad_reference, name="none"),
    # NegativeLogLikelihoodLoss
    Case("NegativeLogLikelihoodLoss", [_X4, _Y4], name="mean"),
    Case("NegativeLogLikelihoodLoss", [_X4, _Y4], attrs={"reduction": "sum"}, name="sum"),
    Case("NegativeLogLikelihoodLoss", [_X4, _Y4, _W5], attrs={"reduction": "none"},
         name="weights_none"),
    Case("NegativeLogLikelihoodLoss", [_X3D, _Y3D.astype(np.int32), _W3], name="weights_mean"),
    Case("NegativeLogLikelihoodLoss", [_X3D, _with_ignored(_Y3D, 0)],
         attrs={"ignore_index": 0}, name="ignore_mean"),
    Case("NegativeLogLikelihoodLoss", [_X4D, _with_ignored(_Y4D, -1, every=2), _W3],
         attrs={"ignore_index": -1}, name="4d_ignore_outside_weights"),
    Case("NegativeLogLikelihoodLoss", [_X4D, _with_ignored(_Y4D, 5)],
         attrs={"reduction": "none", "ignore_index": 5}, name="4d_ignore_none"),
    Case("portable.NegativeLogLikelihoodLossGrad",
         [np.array(1.3, np.float32), _X3D, _with_ignored(_Y3D, 2), _W3],
         attrs={"reduction": "mean", "ignore_index": 2}, reference=_nll_grad_reference,
         name="mean_weights_ignore"),
    Case("portable.NegativeLogLikelihoodLossGrad", [rand(2, 4, seed=10), _X3D, _Y3D],
         attrs={"reduction": "none"}, reference=_nll_grad_reference, name="none"),
    Case("portable.NegativeLogLikelihoodLossGrad", [np.array(0.5, np.float32), _X4, _Y4],
         attrs={"reduction": "mean"}, reference=_nll_grad_reference, name="mean"),
]
