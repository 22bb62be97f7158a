"""Closed-form NumPy (float64) references of the optimizer updates, written from the published
formulas (MXNet's for SGD/NAG/Adam, PyTorch's for AdamW/RMSProp/AdaGrad), independently of
portable's code."""
from __future__ import annotations

import math

import numpy as np


def prepare(g, w, kw, fold_wd=True):
    g = g * kw.get("rescale_grad", 1.0)
    clip = kw.get("clip_gradient")
    if clip is not None:
        g = np.clip(g, -clip, clip)
    if fold_wd:
        g = g + kw.get("wd", 0.0) * w
    return g


def sgd(w, g, state, t, kw):
    g = prepare(g, w, kw)
    lr, mu = kw["learning_rate"], kw.get("momentum", 0.0)
    mom = state.get("mom", np.zeros_like(w))
    mom = mu * mom - lr * g
    state["mom"] = mom
    return w + mom


def nag(w, g, state, t, kw):
    g = prepare(g, w, kw)
    lr, mu = kw["learning_rate"], kw.get("momentum", 0.9)
    mom = mu * state.get("mom", np.zeros_like(w)) + g
    state["mom"] = mom
    return w - lr * (g + mu * mom)


def adam(w, g, state, t, kw, decoupled=False):
    b1, b2 = kw.get("beta1", 0.9), kw.get("beta2", 0.999)
    eps, lr, wd = kw.get("epsilon", 1e-8), kw["learning_rate"], kw.get("wd", 0.0)
    g = prepare(g, w, kw, fold_wd=not decoupled)
    if decoupled:
        w = w * (1 - lr * wd)
    m = b1 * state.get("m", np.zeros_like(w)) + (1 - b1) * g
    v = b2 * state.get("v", np.zeros_like(w)) + (1 - b2) * g * g
    state["m"], state["v"] = m, v
    lr_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    return w - lr_t * m / (np.sqrt(v) + eps)


def adamw(w, g, state, t, kw):
    return adam(w, g, state, t, kw, decoupled=True)


def rmsprop(w, g, state, t, kw):
    g = prepare(g, w, kw)
    rho, mu = kw.get("rho", 0.9), kw.get("momentum", 0.0)
    eps, lr = kw.get("epsilon", 1e-8), kw["learning_rate"]
    v = rho * state.get("v", np.zeros_like(w)) + (1 - rho) * g * g
    state["v"] = v
    if kw.get("centered"):
        a = rho * state.get("a", np.zeros_like(w)) + (1 - rho) * g
        state["a"] = a
        d = g / (np.sqrt(v - a * a) + eps)
    else:
        d = g / (np.sqrt(v) + eps)
    if mu:
        buf = mu * state.get("buf", np.zeros_like(w)) + d
        state["buf"] = buf
        return w - lr * buf
    return w - lr * d


def adagrad(w, g, state, t, kw):
    g = prepare(g, w, kw)
    h = state.get("h", np.zeros_like(w)) + g * g
    state["h"] = h
    return w - kw["learning_rate"] * g / (np.sqrt(h) + kw.get("epsilon", 1e-7))


REFERENCES = {"sgd": sgd, "nag": nag, "adam": adam, "adamw": adamw, "rmsprop": rmsprop,
              "adagrad": adagrad}
