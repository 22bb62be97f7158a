"""hybridize: a small convolutional net compiled to a graph, the same answers as imperative,
exported, and its accuracy on digits."""
import os
import tempfile

import numpy as np

import portable as mx
from portable import autograd, gluon, nd
from portable.gluon import nn
from digits_data import digits, report

mx.random.seed(3)
x_train, y_train, x_test, y_test = digits(images=True)
net = nn.HybridSequential()
net.add(nn.Conv2D(16, kernel_size=3, padding=1, activation="relu"),
        nn.MaxPool2D(pool_size=2),
        nn.Conv2D(32, kernel_size=3, padding=1, activation="relu"),
        nn.Flatten(),
        nn.Dense(10))
net.initialize(mx.init.Xavier())
before = net(nd.array(x_test[:8])).asnumpy()
net.hybridize()
after = net(nd.array(x_test[:8])).asnumpy()
same_answers = float(np.abs(before - after).max() < 1e-5)

loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9})
for epoch in range(10):
    for start in range(0, len(y_train), 32):
        xb, yb = nd.array(x_train[start:start + 32]), nd.array(y_train[start:start + 32])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(xb.shape[0])
accuracy = (net(nd.array(x_test)).argmax(axis=1) == nd.array(y_test)).mean().asscalar()
with tempfile.TemporaryDirectory() as folder:
    net.export(os.path.join(folder, "digits"))
    exported = sorted(os.listdir(folder))
report(accuracy=accuracy, same_answers=same_answers, exported_files=len(exported))
