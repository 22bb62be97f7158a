"""KVStore: init, push (summed over devices), pull, a custom updater, and a Trainer that
updates through the store."""
import portable as mx
from portable import autograd, gluon, nd
from portable.gluon import nn
from digits_data import digits, report

kv = mx.kv.create("local")
shape = (2, 3)
kv.init(3, nd.ones(shape) * 2)
a = nd.zeros(shape)
kv.pull(3, out=a)
initial = a.sum().asscalar()
kv.push(3, [nd.ones(shape), nd.ones(shape) * 2, nd.ones(shape) * 3])
kv.pull(3, out=a)
summed = a[0, 0].asscalar()


def update(key, value, stored):
    stored += value * 2


kv._set_updater(update)
kv.push(3, nd.ones(shape))
kv.pull(3, out=a)
updated = a[0, 0].asscalar()
named = mx.kv.create("local")                                 # one key type per store
named.init(["a", "b"], [nd.ones(shape), nd.zeros(shape)])
outs = [nd.zeros(shape), nd.zeros(shape)]
named.pull(["a", "b"], out=outs)

mx.random.seed(9)
x_train, y_train, x_test, y_test = digits()
net = nn.Dense(10)
net.initialize(mx.init.Xavier())
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                        kvstore=mx.kv.create("local"))
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
for epoch in range(15):
    for start in range(0, len(y_train), 32):
        xb, yb = nd.array(x_train[start:start + 32]), nd.array(y_train[start:start + 32])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(xb.shape[0])
accuracy = (net(nd.array(x_test)).argmax(axis=1) == nd.array(y_test)).mean().asscalar()
report(initial=initial, summed=summed, updated=updated, pulled_a=outs[0].sum().asscalar(),
       pulled_b=outs[1].sum().asscalar(), accuracy=accuracy,
       kv_type_local=float(kv.type == "local"))
