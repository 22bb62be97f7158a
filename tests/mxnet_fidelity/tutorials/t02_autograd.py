"""autograd: gradients of a formula, of Python control flow, with head gradients, and
linear regression by hand-written SGD."""
import numpy as np

import portable as mx
from portable import autograd, nd
from digits_data import report

x = nd.arange(4).reshape((4, 1))
x.attach_grad()
with autograd.record():
    y = 2 * nd.dot(x.T, x)
y.backward()
grad_formula = (x.grad - 4 * x).abs().sum().asscalar()     # d(2 x'x)/dx = 4x


def f(a):
    b = a * 2
    while b.norm().asscalar() < 1000:
        b = b * 2
    return b * 3 if b.sum().asscalar() > 0 else 100 * b


a = nd.array([0.3])
a.attach_grad()
with autograd.record():
    c = f(a)
c.backward()
control_flow = (a.grad - c / a).abs().asscalar()           # f is linear in a

h = nd.array([1.0, 2.0, 3.0])
h.attach_grad()
with autograd.record():
    z = h * h
z.backward(nd.array([10.0, 1.0, 0.1]))
head = h.grad.asnumpy().tolist()

rng = np.random.RandomState(0)
features = nd.array(rng.normal(size=(1000, 2)))
labels = nd.dot(features, nd.array([[2.0], [-3.4]])) + 4.2
labels = labels + 0.01 * nd.array(rng.normal(size=(1000, 1)))
w = nd.zeros((2, 1))
b = nd.zeros((1,))
for p in (w, b):
    p.attach_grad()
for epoch in range(3):
    for start in range(0, 1000, 10):
        xb, yb = features[start:start + 10], labels[start:start + 10]
        with autograd.record():
            loss = ((nd.dot(xb, w) + b - yb) ** 2 / 2).mean()
        loss.backward()
        for p in (w, b):
            p[:] = p - 0.03 * p.grad
final = ((nd.dot(features, w) + b - labels) ** 2 / 2).mean().asscalar()
report(grad_formula=grad_formula, control_flow=control_flow, head0=head[0], head1=head[1],
       head2=head[2], w0=w[0].asscalar(), w1=w[1].asscalar(), b=b.asscalar(), half_mse=final)
