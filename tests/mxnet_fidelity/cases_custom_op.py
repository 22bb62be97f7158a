"""MXNet custom operators (``mx.operator.CustomOp`` / ``CustomOpProp`` / ``register``):
MXNet's custom softmax example and an op with two outputs and constructor arguments, run
imperatively (with autograd) and as bound symbols; answers recorded from MXNet 1.9.1.

Known difference, not a case: MXNet names a custom op's outputs ``<name>_<list_outputs()[i]>``
(``ss_scaled``); portable names several outputs ``<name>_output<i>``.
"""

SETUP = """import numpy as np


class CSoftmax(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        y = np.exp(x - x.max(axis=1).reshape((x.shape[0], 1)))
        y /= y.sum(axis=1).reshape((x.shape[0], 1))
        self.assign(out_data[0], req[0], mx.nd.array(y))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        label = in_data[1].asnumpy().ravel().astype(np.int64)
        y = out_data[0].asnumpy()
        y[np.arange(label.shape[0]), label] -= 1.0
        self.assign(in_grad[0], req[0], mx.nd.array(y))


@mx.operator.register("csoftmax")
class CSoftmaxProp(mx.operator.CustomOpProp):
    def __init__(self):
        super(CSoftmaxProp, self).__init__(need_top_grad=False)

    def list_arguments(self):
        return ['data', 'label']

    def list_outputs(self):
        return ['output']

    def infer_shape(self, in_shape):
        return [in_shape[0], (in_shape[0][0],)], [in_shape[0]], []

    def infer_type(self, in_type):
        return in_type, [in_type[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return CSoftmax()


class ScaleShift(mx.operator.CustomOp):
    def __init__(self, scale, shift):
        super(ScaleShift, self).__init__()
        self.scale, self.shift = scale, shift

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], x * self.scale + in_data[1])
        self.assign(out_data[1], req[1], mx.nd.sum(x, axis=1) + self.shift + float(is_train))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0]
        ones = mx.nd.ones_like(x)
        g = out_grad[0] * self.scale + out_grad[1].reshape((-1, 1)) * ones
        self.assign(in_grad[0], req[0], g)
        self.assign(in_grad[1], req[1], out_grad[0])


@mx.operator.register("scale_shift")
class ScaleShiftProp(mx.operator.CustomOpProp):
    def __init__(self, scale='1', shift='0'):
        super(ScaleShiftProp, self).__init__(need_top_grad=True)
        self.kinds = (type(scale).__name__, type(shift).__name__)
        self.scale, self.shift = float(scale), float(shift)

    def list_arguments(self):
        return ['data', 'bias']

    def list_outputs(self):
        return ['scaled', 'rowsum']

    def infer_shape(self, in_shape):
        return [in_shape[0], in_shape[0]], [in_shape[0], (in_shape[0][0],)], []

    def create_operator(self, ctx, shapes, dtypes):
        return ScaleShift(self.scale, self.shift)


x = mx.nd.array([[1, 2, 3], [3, 1, 0]])
label = mx.nd.array([2, 0])
b = mx.nd.array([[0.5, -1, 2], [1, 1, 1]])
"""

SETS = {"custom_op": {
    'nd_softmax_forward': "out = mx.nd.Custom(x, label, op_type='csoftmax')",
    'nd_softmax_input_gradient': (
        'x.attach_grad()\n'
        'with mx.autograd.record():\n'
        "    y = mx.nd.Custom(x, label, op_type='csoftmax')\n"
        'y.backward()\n'
        'out = [y, x.grad]'),
    'nd_two_outputs_kwargs': "out = mx.nd.Custom(x, b, op_type='scale_shift', scale=2, shift=0.5)",
    'nd_two_outputs_default_kwargs': "out = mx.nd.Custom(x, b, op_type='scale_shift')",
    'nd_kwargs_arrive_as_strings': (
        "@mx.operator.register('kinds_probe')\n"
        'class KindsProp(ScaleShiftProp):\n'
        '    def create_operator(self, ctx, shapes, dtypes):\n'
        '        global seen\n'
        '        seen = self.kinds\n'
        '        return ScaleShift(self.scale, self.shift)\n'
        "mx.nd.Custom(x, b, op_type='kinds_probe', scale=2, shift=0.5)[0].wait_to_read()\n"
        'out = list(seen)'),
    'nd_is_train_while_recording': (
        'with mx.autograd.record():\n'
        "    y = mx.nd.Custom(x, b, op_type='scale_shift', shift=0.5)\n"
        'out = y[1]'),
    'nd_two_outputs_gradients': (
        'x.attach_grad(); b.attach_grad()\n'
        'with mx.autograd.record():\n'
        "    s, r = mx.nd.Custom(x, b, op_type='scale_shift', scale=3)\n"
        'mx.autograd.backward([s, r], [mx.nd.ones_like(s) * 0.5, mx.nd.array([1, -2])])\n'
        'out = [x.grad, b.grad]'),
    'nd_custom_in_a_chain': (
        'x.attach_grad()\n'
        'with mx.autograd.record():\n'
        '    h = mx.nd.tanh(x * 0.5)\n'
        "    s, r = mx.nd.Custom(h, b, op_type='scale_shift', scale=2)\n"
        '    loss = (s * s).sum() + r.sum()\n'
        'loss.backward()\n'
        'out = [loss, x.grad]'),
    'sym_softmax_arguments': (
        "net = mx.sym.Custom(data=mx.sym.var('x'), op_type='csoftmax', name='softmax')\n"
        "out = [net.list_arguments(), net.infer_shape(x=(2, 3))]"),
    'sym_softmax_auto_name': (
        "args = mx.sym.Custom(mx.sym.var('x'), op_type='csoftmax').list_arguments()\n"
        "out = [args[0], args[1].startswith('custom'), args[1].endswith('_label')]"),
    'sym_two_outputs_shapes': (
        "net = mx.sym.Custom(data=mx.sym.var('x'), op_type='scale_shift', scale=3, name='ss')\n"
        "out = [net.list_arguments(), net.infer_shape(x=(2, 3))]"),
    'sym_softmax_forward_backward': (
        "net = mx.sym.Custom(data=mx.sym.var('data'), op_type='csoftmax', name='softmax')\n"
        'exe = net.simple_bind(mx.cpu(), data=(2, 3))\n'
        "exe.arg_dict['data'][:] = x\n"
        "exe.arg_dict['softmax_label'][:] = label\n"
        'y = exe.forward(is_train=True)[0].copy()\n'
        'exe.backward()\n'
        "out = [y, exe.grad_dict['data']]"),
    'sym_two_outputs_bind_backward': (
        "net = mx.sym.Custom(mx.sym.var('data'), mx.sym.var('bias'), op_type='scale_shift',\n"
        "                    scale=2, shift=1)\n"
        'gx, gb = mx.nd.zeros((2, 3)), mx.nd.zeros((2, 3))\n'
        "exe = net.bind(mx.cpu(), {'data': x, 'bias': b}, args_grad={'data': gx, 'bias': gb})\n"
        'outs = [o.copy() for o in exe.forward(is_train=True)]\n'
        'exe.backward([mx.nd.ones((2, 3)), mx.nd.array([2, 3])])\n'
        'out = outs + [gx, gb]'),
    'sym_in_a_network': (
        "data = mx.sym.var('data')\n"
        "fc = mx.sym.FullyConnected(data, num_hidden=4, name='fc')\n"
        "net = mx.sym.Custom(data=fc, op_type='csoftmax', name='softmax')\n"
        'out = net.infer_shape(data=(5, 3))'),
}}
