"""mx.np and mx.npx, as Dive into Deep Learning uses them: linear regression from scratch
and with Gluon, on synthetic data y = Xw + b + noise."""
import portable as mx
from portable import autograd, gluon, init, np, npx
from portable.gluon import nn
from digits_data import report

npx.set_np()
mx.random.seed(1)
true_w, true_b = np.array([2, -3.4]), 4.2
X = np.random.normal(0, 1, (1000, 2))
y = np.dot(X, true_w) + true_b + np.random.normal(0, 0.01, (1000,))
y = y.reshape(-1, 1)

w = np.random.normal(0, 0.01, (2, 1))
b = np.zeros(1)
w.attach_grad()
b.attach_grad()
for epoch in range(3):
    for start in range(0, 1000, 10):
        with autograd.record():
            loss = ((np.dot(X[start:start + 10], w) + b - y[start:start + 10]) ** 2 / 2)
        loss.backward()
        for param in (w, b):
            param[:] = param - 0.03 * param.grad / 10
scratch_loss = float(((np.dot(X, w) + b - y) ** 2 / 2).mean())

net = nn.Sequential()
net.add(nn.Dense(1))
net.initialize(init.Normal(sigma=0.01))
dataset = gluon.data.ArrayDataset(X, y)
loader = gluon.data.DataLoader(dataset, batch_size=10, shuffle=True)
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.03})
loss_fn = gluon.loss.L2Loss()
for epoch in range(3):
    for xb, yb in loader:
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        trainer.step(xb.shape[0])
concise_w = net[0].weight.data()
report(scratch_loss=scratch_loss, scratch_w_error=float(np.abs(w.reshape(-1) - true_w).max()),
       scratch_b_error=float(abs(b[0] - true_b)),
       concise_loss=float(loss_fn(net(X), y).mean()),
       concise_w_error=float(np.abs(concise_w.reshape(-1) - true_w).max()),
       concise_b_error=float(abs(net[0].bias.data()[0] - true_b)),
       bool_compare=float((X > 0).dtype == bool), scalar_ndim=float(X.sum().ndim))
