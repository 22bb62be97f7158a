"""NDArray: create, compute, index, reduce; least squares by the normal equations."""
import numpy as np

import portable as mx
from portable import nd
from digits_data import report

x = nd.array(np.random.RandomState(1).uniform(-1, 1, (200, 3)))
true_w = nd.array([[2.0], [-3.4], [1.5]])
y = nd.dot(x, true_w) + 4.2
y = y + 0.01 * nd.array(np.random.RandomState(2).normal(size=(200, 1)))

ones = nd.ones((x.shape[0], 1))
features = nd.concat(x, ones, dim=1)                       # MXNet's dim= keyword
gram = nd.dot(features.T, features)
rhs = nd.dot(features.T, y)
w = nd.array(np.linalg.solve(gram.asnumpy(), rhs.asnumpy()))
residual = ((nd.dot(features, w) - y) ** 2).mean()

z = nd.arange(12).reshape((3, 4))
report(w0=w[0].asscalar(), w1=w[1].asscalar(), w2=w[2].asscalar(), b=w[3].asscalar(),
       residual=residual.asscalar(),
       row_sum=z.sum(axis=1)[2].asscalar(), index=z[1, 2].asscalar(),
       slice_mean=z[1:, ::2].mean().asscalar(), argmax=z.argmax().asscalar(),
       clip=nd.clip(z, a_min=2, a_max=5).sum().asscalar(),
       compare=(z > 5).sum().asscalar(), dtype_is_float32=float(x.dtype == np.float32))
