"""Data loading: a Dataset of uint8 images, transforms on the first field, a shuffling
DataLoader, and the accuracy reached on digits."""
import numpy as np

import portable as mx
from portable import autograd, gluon, nd
from portable.gluon import nn
from portable.gluon.data import ArrayDataset, DataLoader
from portable.gluon.data.vision import transforms
from digits_data import digits, report

mx.random.seed(5)
x_train, y_train, x_test, y_test = digits()
as_images = lambda x: (x.reshape(-1, 8, 8, 1) * 255).astype(np.uint8)   # HWC uint8
to_input = transforms.Compose([transforms.ToTensor(), transforms.Normalize(0.3, 0.35)])
train = ArrayDataset(nd.array(as_images(x_train), dtype="uint8"), y_train)
test = ArrayDataset(nd.array(as_images(x_test), dtype="uint8"), y_test)
train_loader = DataLoader(train.transform_first(to_input), batch_size=32, shuffle=True)
test_loader = DataLoader(test.transform_first(to_input), batch_size=100)
first_image, first_label = train.transform_first(to_input)[0]

net = nn.HybridSequential()
net.add(nn.Conv2D(16, kernel_size=3, activation="relu"), nn.Flatten(), nn.Dense(10))
net.initialize(mx.init.Xavier())
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
for epoch in range(5):
    for xb, yb in train_loader:
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(xb.shape[0])
metric = mx.metric.Accuracy()
for xb, yb in test_loader:
    metric.update([yb], [net(xb)])
report(accuracy=metric.get()[1], image_channels=first_image.shape[0],
       image_height=first_image.shape[1], image_is_float32=float(first_image.dtype == np.float32),
       batches=len(train_loader))
