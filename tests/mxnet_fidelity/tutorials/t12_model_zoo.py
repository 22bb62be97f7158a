"""The Gluon model zoo: ResNet-18 built by name and its parameters counted; the same
architecture at a sixteenth of the width, from the zoo's own classes, trained from scratch
on digits."""
import portable as mx
from portable import autograd, gluon, nd
from portable.gluon.model_zoo import vision
from digits_data import digits, report

mx.random.seed(6)
x_train, y_train, x_test, y_test = digits(images=True)
x_train, x_test = x_train.repeat(3, axis=1), x_test.repeat(3, axis=1)    # RGB input

resnet18 = vision.get_model("resnet18_v1", classes=10, thumbnail=True)
resnet18.initialize(mx.init.Xavier())
resnet18(nd.array(x_train[:1]))
n_params = sum(p.data().size for p in resnet18.collect_params().values())

net = vision.ResNetV1(vision.BasicBlockV1, [2, 2, 2, 2], [8, 8, 16, 32, 64], classes=10,
                      thumbnail=True)
net.initialize(mx.init.Xavier())
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9})
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
for epoch in range(8):
    for start in range(0, len(y_train), 64):
        xb, yb = nd.array(x_train[start:start + 64]), nd.array(y_train[start:start + 64])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(xb.shape[0])
accuracy = (net(nd.array(x_test)).argmax(axis=1) == nd.array(y_test)).mean().asscalar()
report(accuracy=accuracy, resnet18_params=n_params,
       resnet18_parameter_arrays=len(list(resnet18.collect_params().keys())))
