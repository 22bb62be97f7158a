"""Gluon blocks: a custom Block with its own forward, deferred shapes, parameters, and the
accuracy it reaches on digits."""
import portable as mx
from portable import autograd, gluon, nd
from portable.gluon import nn
from digits_data import digits, report


class MLP(nn.Block):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = nn.Dense(64, activation="relu")
        self.output = nn.Dense(10)

    def forward(self, x):
        return self.output(self.hidden(x))


mx.random.seed(7)
x_train, y_train, x_test, y_test = digits()
net = MLP()
net.initialize(mx.init.Xavier())
net(nd.array(x_train[:2]))                                   # deferred shapes are now known
n_params = sum(p.data().size for p in net.collect_params().values())
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
for epoch in range(20):
    for start in range(0, len(y_train), 32):
        xb = nd.array(x_train[start:start + 32])
        yb = nd.array(y_train[start:start + 32])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(xb.shape[0])
accuracy = (net(nd.array(x_test)).argmax(axis=1) == nd.array(y_test)).mean().asscalar()
report(accuracy=accuracy, n_params=n_params,
       hidden_weight_rows=net.hidden.weight.shape[0], hidden_weight_cols=net.hidden.weight.shape[1])
