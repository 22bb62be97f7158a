"""MXNet 1.x's loss-output ops run imperatively: ``nd.SoftmaxOutput(data, label)`` and the
regression outputs (``portable/ops/mxnet_outputs.py`` declares them). Under
``autograd.record()``, ``out.backward()`` gives the data the loss gradient against the label.

Example:
    >>> import portable as mx
    >>> x = mx.nd.array([[1.0, 2.0]])
    >>> mx.nd.SoftmaxOutput(x, mx.nd.array([1])).shape
    (1, 2)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray, array


def _make(op: str) -> Callable[..., NDArray]:
    def fn(data: Any = None, label: Any = None, out: NDArray | None = None,
           name: str | None = None, **attrs: Any) -> NDArray:
        attrs = {k: int(v) if isinstance(v, bool) else v for k, v in attrs.items()}
        if not isinstance(data, NDArray):
            data = array(np.asarray(data, np.float32))
        if not isinstance(label, NDArray):
            label = array(np.asarray(label, np.float32), device=data.device)
        return invoke(f"portable.{op}", [data, label], attrs, out=out)
    fn.__name__ = op
    fn.__doc__ = f"MXNet's {op}(data, label, **attrs), imperatively."
    return fn


FUNCTIONS = {op: _make(op) for op in ("SoftmaxOutput", "LinearRegressionOutput",
                                      "LogisticRegressionOutput", "MAERegressionOutput")}
SoftmaxOutput = FUNCTIONS["SoftmaxOutput"]
LinearRegressionOutput = FUNCTIONS["LinearRegressionOutput"]
LogisticRegressionOutput = FUNCTIONS["LogisticRegressionOutput"]
MAERegressionOutput = FUNCTIONS["MAERegressionOutput"]
