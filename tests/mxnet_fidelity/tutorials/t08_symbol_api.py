"""The Symbol API: compose a graph, infer shapes, bind an executor and train it by hand."""
import numpy as np

import portable as mx
from portable import nd
from digits_data import digits, report

x_train, y_train, x_test, y_test = digits()
data = mx.sym.var("data")
label = mx.sym.var("softmax_label")
fc1 = mx.sym.FullyConnected(data=data, num_hidden=32, name="fc1")
act = mx.sym.Activation(data=fc1, act_type="tanh", name="tanh1")
fc2 = mx.sym.FullyConnected(data=act, num_hidden=10, name="fc2")
net = mx.sym.SoftmaxOutput(data=fc2, label=label, name="softmax")
arg_shapes, out_shapes, _ = net.infer_shape(data=(50, 64))
shapes = dict(zip(net.list_arguments(), arg_shapes))

exe = net.simple_bind(ctx=mx.cpu(), data=(50, 64), grad_req="write")
rng = np.random.RandomState(0)
for name in ("fc1_weight", "fc2_weight"):
    exe.arg_dict[name][:] = nd.array(rng.normal(0, 0.1, shapes[name]))
for name in ("fc1_bias", "fc2_bias"):
    exe.arg_dict[name][:] = 0
for epoch in range(30):
    for start in range(0, len(y_train) - 49, 50):
        exe.arg_dict["data"][:] = nd.array(x_train[start:start + 50])
        exe.arg_dict["softmax_label"][:] = nd.array(y_train[start:start + 50])
        exe.forward(is_train=True)
        exe.backward()
        for name in ("fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"):
            exe.arg_dict[name][:] -= 0.5 / 50 * exe.grad_dict[name]
correct = 0
for start in range(0, len(y_test), 50):
    batch = x_test[start:start + 50]
    exe.arg_dict["data"][:len(batch)] = nd.array(batch)
    exe.forward(is_train=False)
    guess = exe.outputs[0].asnumpy()[:len(batch)].argmax(axis=1)
    correct += int((guess == y_test[start:start + 50]).sum())
report(accuracy=correct / len(y_test), fc1_weight_rows=shapes["fc1_weight"][0],
       fc1_weight_cols=shapes["fc1_weight"][1], out_cols=out_shapes[0][1],
       n_arguments=len(net.list_arguments()))
