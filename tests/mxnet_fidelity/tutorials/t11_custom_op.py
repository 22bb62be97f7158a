"""Custom operators in Python: MXNet's softmax example as a CustomOp, trained inside a
Gluon network on digits."""
import numpy as np

import portable as mx
from portable import autograd, gluon, nd
from portable.gluon import nn
from digits_data import digits, report


class Softmax(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        y = np.exp(x - x.max(axis=1, keepdims=True))
        y /= y.sum(axis=1, keepdims=True)
        self.assign(out_data[0], req[0], mx.nd.array(y))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        label = in_data[1].asnumpy().ravel().astype(int)
        y = out_data[0].asnumpy()
        y[np.arange(label.shape[0]), label] -= 1.0
        self.assign(in_grad[0], req[0], mx.nd.array(y))


@mx.operator.register("softmax")
class SoftmaxProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=False)

    def list_arguments(self):
        return ["data", "label"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        data_shape = in_shape[0]
        return [data_shape, (in_shape[0][0],)], [data_shape], []

    def create_operator(self, ctx, shapes, dtypes):
        return Softmax()


mx.random.seed(4)
x_train, y_train, x_test, y_test = digits()
net = nn.Sequential()
net.add(nn.Dense(64, activation="relu"), nn.Dense(10))
net.initialize(mx.init.Xavier())
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
for epoch in range(20):
    for start in range(0, len(y_train), 32):
        xb, yb = nd.array(x_train[start:start + 32]), nd.array(y_train[start:start + 32])
        with autograd.record():
            probabilities = mx.nd.Custom(net(xb), yb, op_type="softmax")
        probabilities.backward()
        trainer.step(xb.shape[0])
probabilities = mx.nd.Custom(net(nd.array(x_test)), nd.array(y_test), op_type="softmax")
accuracy = (probabilities.argmax(axis=1) == nd.array(y_test)).mean().asscalar()
report(accuracy=accuracy, rows_sum_to_one=float(np.allclose(probabilities.sum(axis=1).asnumpy(), 1,
                                                             atol=1e-5)))
