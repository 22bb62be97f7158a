"""Op-table cases: the optimizer update ops (private, not differentiable).

References are the closed forms in float64, each written as one expression per array (the
kernels run float32 step by step); outputs are the new weight and the new states, in the
op's output order. Cases cover each op's optional pieces: momentum buffers, weight decay,
rescale and clip of the gradient, AdamW's decoupled decay, centered RMSProp, weight clipping.
"""
import math

import numpy as np

from tests.ops.harness import Case, rand, run_reference

_SHAPE = (3, 5)


def _f64(inputs):
    return [None if x is None else np.asarray(x, np.float64) for x in inputs]


def _g(grad, weight, attrs, decay=True):
    """The rescaled, clipped gradient plus (L2) weight decay."""
    g = grad * attrs.get("rescale_grad", 1.0)
    clip = attrs.get("clip_gradient")
    if clip is not None:
        g = np.minimum(np.maximum(g, -clip), clip)
    return g + attrs.get("wd", 0.0) * weight if decay else g


def _out(*arrays):
    return [a.astype(np.float32) for a in arrays]


def _sgd(inputs, attrs):
    w, grad, mom = (_f64(inputs) + [None])[:3]
    g, lr = _g(grad, w, attrs), attrs["lr"]
    if mom is None:
        return _out(w - lr * g)
    new_mom = attrs.get("momentum", 0.0) * mom - lr * g
    return _out(w + new_mom, new_mom)


def _nag(inputs, attrs):
    w, grad, mom = (_f64(inputs) + [None])[:3]
    g, lr, mu = _g(grad, w, attrs), attrs["lr"], attrs.get("momentum", 0.0)
    if mom is None:
        return _out(w - lr * g)
    new_mom = mu * mom + g
    return _out(w - lr * (g + mu * new_mom), new_mom)


def _adam(inputs, attrs):
    w, grad, m, v = _f64(inputs)
    lr, wd, t = attrs["lr"], attrs.get("wd", 0.0), attrs.get("t", 1)
    b1, b2, eps = attrs.get("beta1", 0.9), attrs.get("beta2", 0.999), attrs.get("epsilon", 1e-8)
    decoupled = attrs.get("decoupled_wd", 0)
    g = _g(grad, w, attrs, decay=not decoupled)
    new_m = b1 * m + (1 - b1) * g
    new_v = b2 * v + (1 - b2) * g ** 2
    decayed = w * (1 - lr * wd) if decoupled else w
    step = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * new_m / (np.sqrt(new_v) + eps)
    return _out(decayed - step, new_m, new_v)


def _rmsprop(inputs, attrs):
    w, grad, v, a, buf = (_f64(inputs) + [None, None])[:5]
    rho, eps, lr = attrs.get("rho", 0.9), attrs.get("epsilon", 1e-8), attrs["lr"]
    g = _g(grad, w, attrs)
    new_v = rho * v + (1 - rho) * g ** 2
    new_a = None if a is None else rho * a + (1 - rho) * g
    d = g / (np.sqrt(new_v - (0 if a is None else new_a ** 2)) + eps)
    new_buf = None if buf is None else attrs.get("momentum", 0.0) * buf + d
    new_w = w - lr * (d if buf is None else new_buf)
    bound = attrs.get("clip_weights")
    if bound is not None:
        new_w = np.clip(new_w, -bound, bound)
    return _out(*(x for x in (new_w, new_v, new_a, new_buf) if x is not None))


def _adagrad(inputs, attrs):
    w, grad, h = _f64(inputs)
    g = _g(grad, w, attrs)
    new_h = h + g ** 2
    return _out(w - attrs["lr"] * g / (np.sqrt(new_h) + attrs.get("epsilon", 1e-7)), new_h)


def _weight_grad(seed):
    return [rand(*_SHAPE, seed=seed), rand(*_SHAPE, seed=seed + 1, low=-2.0, high=2.0)]


def _positive(seed):
    return rand(*_SHAPE, seed=seed, low=0.5, high=1.5)


_CLIPPED = {"rescale_grad": 0.5, "clip_gradient": 0.6, "wd": 0.01}

CASES = [
    Case("portable.SGDUpdate", _weight_grad(0), {"lr": 0.1}, grad=False, reference=_sgd,
         name="plain"),
    Case("portable.SGDUpdate", _weight_grad(2) + [rand(*_SHAPE, seed=4)],
         {"lr": 0.1, "momentum": 0.9, **_CLIPPED}, outputs=2, grad=False, reference=_sgd,
         name="momentum_clipped"),
    Case("portable.NAGUpdate", _weight_grad(5), {"lr": 0.05, "wd": 0.1}, grad=False,
         reference=_nag, name="plain"),
    Case("portable.NAGUpdate", _weight_grad(7) + [rand(*_SHAPE, seed=9)],
         {"lr": 0.05, "momentum": 0.9, **_CLIPPED}, outputs=2, grad=False, reference=_nag,
         name="momentum_clipped"),
    Case("portable.AdamUpdate", _weight_grad(10) + [rand(*_SHAPE, seed=12), _positive(13)],
         {"lr": 0.01, "t": 3, "beta1": 0.8, "beta2": 0.99, "wd": 0.01}, outputs=3,
         grad=False, reference=_adam, name="l2"),
    Case("portable.AdamUpdate", _weight_grad(14) + [rand(*_SHAPE, seed=16), _positive(17)],
         {"lr": 0.01, "t": 1, "decoupled_wd": 1, **_CLIPPED, "wd": 0.1}, outputs=3,
         grad=False, reference=_adam, name="adamw_clipped"),
    Case("portable.RMSPropUpdate", _weight_grad(18) + [_positive(20)],
         {"lr": 0.01, "rho": 0.9, "wd": 0.01}, outputs=2, grad=False, reference=_rmsprop,
         name="plain"),
    Case("portable.RMSPropUpdate",
         _weight_grad(21) + [_positive(23), rand(*_SHAPE, seed=24, low=-0.3, high=0.3),
                             rand(*_SHAPE, seed=25)],
         {"lr": 0.01, "rho": 0.95, "momentum": 0.5, "clip_weights": 0.5, **_CLIPPED},
         outputs=4, grad=False, reference=_rmsprop, name="centered_momentum_clipped"),
    Case("portable.AdaGradUpdate", _weight_grad(26) + [_positive(28)],
         {"lr": 0.1, "epsilon": 1e-10, **_CLIPPED}, outputs=2, grad=False,
         reference=_adagrad, name="clipped"),
]

# -- the ONNX training ops (ai.onnx.preview.training), against onnx.reference ---------------

_TRAINING = "ai.onnx.preview.training."


def _step(r: float, t: int) -> list:
    return [np.array(r, np.float32), np.array(t, np.int64)]


def _group(seed: int, shape=_SHAPE) -> list:
    return [rand(*shape, seed=seed), rand(*shape, seed=seed + 1)]




def _reference_in_float32(inputs, attrs):
    """onnx.reference's Adam, whose norm_coefficient_post step returns float64 for float32
    tensors; ONNX keeps each tensor's type."""
    case = Case(_TRAINING + "Adam", inputs, attrs, outputs=3)
    return [np.asarray(o).astype(np.float32) for o in run_reference(case)]


CASES += [
    Case(_TRAINING + "Adagrad", _step(0.1, 3) + _group(30) + [_positive(32)],
         {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}, outputs=2,
         grad=False, name="one_tensor"),
    Case(_TRAINING + "Adagrad",
         _step(0.05, 0) + [rand(4, seed=33), rand(2, 2, seed=34), rand(4, seed=35),
                           rand(2, 2, seed=36), rand(4, seed=37, low=0.1, high=1.0),
                           rand(2, 2, seed=38, low=0.1, high=1.0)],
         {}, outputs=4, grad=False, name="two_tensors_defaults"),
    Case(_TRAINING + "Adam", _step(0.1, 0) + _group(40) + [rand(*_SHAPE, seed=42),
                                                          _positive(43)],
         {"alpha": 0.9, "beta": 0.99, "epsilon": 1e-4, "norm_coefficient": 0.01},
         outputs=3, grad=False, name="first_step"),
    Case(_TRAINING + "Adam", _step(0.01, 5) + _group(44) + [rand(*_SHAPE, seed=46),
                                                           _positive(47)],
         {"alpha": 0.8, "beta": 0.95, "norm_coefficient_post": 0.1}, outputs=3, grad=False,
         reference=_reference_in_float32, name="bias_corrected_post_decay"),
    Case(_TRAINING + "Momentum", _step(0.1, 0) + _group(50) + [rand(*_SHAPE, seed=52)],
         {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.01},
         outputs=2, grad=False, name="standard_first_step"),
    Case(_TRAINING + "Momentum",
         _step(0.1, 4) + [rand(3, seed=53), rand(2, seed=54), rand(3, seed=55),
                          rand(2, seed=56), rand(3, seed=57), rand(2, seed=58)],
         {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.0},
         outputs=4, grad=False, name="nesterov_two_tensors"),
]
