"""Trainer: Adam with a learning-rate schedule and weight decay, gradient clipping by hand,
and the accuracy it reaches on digits."""
import portable as mx
from portable import autograd, gluon, nd
from portable.gluon import nn
from digits_data import digits, report

mx.random.seed(11)
x_train, y_train, x_test, y_test = digits()
net = nn.HybridSequential()
net.add(nn.Dense(128, activation="relu"), nn.Dropout(0.2), nn.Dense(10))
net.initialize(mx.init.Xavier(magnitude=2.24))
schedule = mx.lr_scheduler.FactorScheduler(step=200, factor=0.5)
trainer = gluon.Trainer(net.collect_params(), "adam",
                        {"learning_rate": 0.01, "wd": 1e-4, "lr_scheduler": schedule})
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
for epoch in range(10):
    for start in range(0, len(y_train), 64):
        xb, yb = nd.array(x_train[start:start + 64]), nd.array(y_train[start:start + 64])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        grads = [p.grad() for p in net.collect_params().values()]
        gluon.utils.clip_global_norm(grads, 5.0)
        trainer.step(xb.shape[0])
metric = mx.metric.Accuracy()
metric.update([nd.array(y_test)], [net(nd.array(x_test))])
report(accuracy=metric.get()[1], final_lr=trainer.learning_rate)
