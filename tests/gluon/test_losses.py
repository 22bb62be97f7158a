"""gluon.loss against NumPy closed forms, imperatively and hybridized."""
import numpy as np
import pytest

import portable as pt
from portable import autograd
from portable.errors import PortableError
from portable.gluon import loss as gloss

RNG = np.random.default_rng(3)


def _log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _run(block, hybridize, *arrays):
    block.hybridize(hybridize)
    return block(*[None if a is None else pt.nd.array(a) for a in arrays]).asnumpy()


def _per_sample(values):
    return values.reshape(values.shape[0], -1).mean(axis=1)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_softmax_cross_entropy_sparse_labels(hybridize):
    pred = RNG.standard_normal((6, 5)).astype(np.float32)
    label = RNG.integers(0, 5, 6).astype(np.float32)  # MXNet labels are often float
    expected = -_log_softmax(pred, 1)[np.arange(6), label.astype(int)]
    got = _run(gloss.SoftmaxCrossEntropyLoss(), hybridize, pred, label)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # classes last in a (N, T, C) tensor; the loss is averaged over T
    pred3 = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    label3 = RNG.integers(0, 5, (4, 3))
    picked = np.take_along_axis(_log_softmax(pred3, -1), label3[..., None], -1)[..., 0]
    got = _run(gloss.SoftmaxCrossEntropyLoss(), hybridize, pred3, label3)
    np.testing.assert_allclose(got, -picked.mean(axis=1), rtol=1e-5)
    # classes on axis 1 of (N, C, T)
    pred_c1 = np.ascontiguousarray(pred3.transpose(0, 2, 1))
    got = _run(gloss.SoftmaxCrossEntropyLoss(axis=1), hybridize, pred_c1, label3)
    np.testing.assert_allclose(got, -picked.mean(axis=1), rtol=1e-5)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_softmax_cross_entropy_dense_labels_logits_and_weights(hybridize):
    pred = RNG.standard_normal((6, 4)).astype(np.float32)
    dense = RNG.random((6, 4)).astype(np.float32)
    dense /= dense.sum(axis=1, keepdims=True)
    expected = -(_log_softmax(pred, 1) * dense).sum(axis=1)
    got = _run(gloss.SoftmaxCrossEntropyLoss(sparse_label=False), hybridize, pred, dense)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    log_prob = _log_softmax(pred, 1).astype(np.float32)
    label = RNG.integers(0, 4, 6)
    block = gloss.SoftmaxCrossEntropyLoss(from_logits=True, weight=0.5)
    sample_weight = RNG.random((6, 1)).astype(np.float32)
    got = _run(block, hybridize, log_prob, label, sample_weight)
    expected = -log_prob[np.arange(6), label] * sample_weight[:, 0] * 0.5
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_l2_l1_losses(hybridize):
    pred = RNG.standard_normal((5, 3, 2)).astype(np.float32)
    label = RNG.standard_normal((5, 6)).astype(np.float32)  # reshaped like pred
    diff = label.reshape(pred.shape) - pred
    np.testing.assert_allclose(_run(gloss.L2Loss(), hybridize, pred, label),
                               _per_sample(0.5 * diff ** 2), rtol=1e-5)
    np.testing.assert_allclose(_run(gloss.L2Loss(weight=3.0), hybridize, pred, label),
                               _per_sample(1.5 * diff ** 2), rtol=1e-5)
    np.testing.assert_allclose(_run(gloss.L1Loss(), hybridize, pred, label),
                               _per_sample(np.abs(diff)), rtol=1e-5)


@pytest.mark.parametrize("hybridize", [False, True], ids=["imperative", "hybridized"])
def test_sigmoid_binary_cross_entropy(hybridize):
    logits = (RNG.standard_normal((4, 5)) * 4).astype(np.float32)
    label = (RNG.random((4, 5)) > 0.5).astype(np.float32)
    prob = 1 / (1 + np.exp(-logits.astype(np.float64)))
    expected = -(label * np.log(prob) + (1 - label) * np.log(1 - prob))
    got = _run(gloss.SigmoidBinaryCrossEntropyLoss(), hybridize, logits, label)
    np.testing.assert_allclose(got, _per_sample(expected), rtol=1e-5)
    got = _run(gloss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=True), hybridize,
               prob.astype(np.float32), label)
    np.testing.assert_allclose(got, _per_sample(expected), rtol=1e-4)
    pos_weight = RNG.random((1, 5)).astype(np.float32) * 3
    weighted = -(pos_weight * label * np.log(prob) + (1 - label) * np.log(1 - prob))
    block = gloss.SigmoidBinaryCrossEntropyLoss()
    block.hybridize(hybridize)
    got = block(*[pt.nd.array(a) for a in (logits, label)], None,
                pt.nd.array(pos_weight)).asnumpy()
    np.testing.assert_allclose(got, _per_sample(weighted), rtol=1e-5)


def test_softmax_cross_entropy_gradient_matches_closed_form():
    pred = RNG.standard_normal((3, 4)).astype(np.float32)
    label = np.array([0, 3, 1])
    x = pt.nd.array(pred)
    x.attach_grad()
    with autograd.record():
        out = gloss.SoftmaxCrossEntropyLoss()(x, pt.nd.array(label))
    out.backward()
    expected = np.exp(_log_softmax(pred, 1))
    expected[np.arange(3), label] -= 1
    np.testing.assert_allclose(x.grad.asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_unsupported_axis_is_a_clear_error():
    with pytest.raises(PortableError, match="axis"):
        gloss.SoftmaxCrossEntropyLoss(axis=0)
