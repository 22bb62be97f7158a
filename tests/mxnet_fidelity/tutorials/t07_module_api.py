"""The Module API: a symbol MLP ending in SoftmaxOutput, NDArrayIter, fit, score, predict
and a checkpoint."""
import os
import tempfile

import portable as mx
from digits_data import digits, report

mx.random.seed(2)
x_train, y_train, x_test, y_test = digits()
train_iter = mx.io.NDArrayIter(x_train, y_train, batch_size=32, shuffle=True)
test_iter = mx.io.NDArrayIter(x_test, y_test, batch_size=32)

data = mx.sym.var("data")
hidden = mx.sym.FullyConnected(data=data, num_hidden=64, name="fc1")
hidden = mx.sym.Activation(data=hidden, act_type="relu", name="relu1")
logits = mx.sym.FullyConnected(data=hidden, num_hidden=10, name="fc2")
net = mx.sym.SoftmaxOutput(data=logits, name="softmax")

mod = mx.mod.Module(symbol=net, context=mx.cpu(), data_names=["data"],
                    label_names=["softmax_label"])
mod.fit(train_iter, eval_data=test_iter, optimizer="sgd",
        optimizer_params={"learning_rate": 0.1, "momentum": 0.9},
        initializer=mx.init.Xavier(), eval_metric="acc", num_epoch=10)
accuracy = dict(mod.score(test_iter, ["acc"]))["accuracy"]
predictions = mod.predict(test_iter)
with tempfile.TemporaryDirectory() as folder:
    prefix = os.path.join(folder, "mlp")
    mod.save_checkpoint(prefix, 10)
    loaded = mx.mod.Module.load(prefix, 10)
    loaded.bind(data_shapes=test_iter.provide_data, label_shapes=test_iter.provide_label,
                for_training=False)
    reloaded_accuracy = dict(loaded.score(test_iter, ["acc"]))["accuracy"]
report(accuracy=accuracy, reloaded_accuracy=reloaded_accuracy,
       prediction_rows=predictions.shape[0], prediction_cols=predictions.shape[1])
