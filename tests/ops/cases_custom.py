"""Op-table cases: the Python custom op (``portable.Custom``, MXNet's ``mx.operator.CustomOp``)
and its gradient op, through a prop registered here: two outputs, a constructor argument.

    y0 = sin(x) * w * scale,  y1 = sum(x * w, axis=1)
"""
import numpy as np

import portable.ndarray as nd
import portable.operator as operator
from tests.ops.harness import Case, rand

OP_TYPE = "op_table_sin_mul"


class _SinMul(operator.CustomOp):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, is_train, req, in_data, out_data, aux):
        x, w = in_data
        self.assign(out_data[0], req[0], nd.sin(x) * w * self.scale)
        self.assign(out_data[1], req[1], (x * w).sum(axis=1))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x, w = in_data
        d0, d1 = out_grad[0], out_grad[1].reshape((-1, 1))
        self.assign(in_grad[0], req[0], d0 * nd.cos(x) * w * self.scale + d1 * w)
        self.assign(in_grad[1], req[1], d0 * nd.sin(x) * self.scale + d1 * x)


@operator.register(OP_TYPE)
class _SinMulProp(operator.CustomOpProp):
    def __init__(self, scale="1"):
        super().__init__()
        self.scale = float(scale)

    def list_arguments(self):
        return ["x", "w"]

    def list_outputs(self):
        return ["scaled", "rowsum"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0], in_shape[0][:1]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _SinMul(self.scale)


def _forward_reference(inputs, attrs):
    x, w = inputs
    return [np.sin(x) * w * 2.0, (x * w).sum(axis=1)]


def _grad_reference(inputs, attrs):
    d0, d1, x, w = inputs[:4]
    return [d0 * np.cos(x) * w * 2.0 + d1[:, None] * w, d0 * np.sin(x) * 2.0 + d1[:, None] * x]


_ATTRS = {"op_type": OP_TYPE, "kwargs": ("scale=2.0",)}
_X, _W = rand(3, 4, seed=1), rand(3, 4, seed=2)
_Y = _forward_reference([_X, _W], _ATTRS)

CASES = [
    Case("portable.Custom", [_X, _W], attrs=_ATTRS, outputs=2, reference=_forward_reference,
         name="two_outputs_kwargs"),
    Case("portable.CustomGrad", [rand(3, 4, seed=3), rand(3, seed=4), _X, _W, *_Y],
         attrs=_ATTRS, outputs=2, reference=_grad_reference, grad=False, name="two_inputs"),
]
