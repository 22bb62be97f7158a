"""``mx.np`` / ``mx.npx`` (MXNet's NumPy interface) answers: dtypes, shapes and values of the
creation functions, arithmetic and its dtype rules, comparisons, 0-d reductions, indexing,
random shapes and moments, autograd through np arrays, and Gluon in NumPy mode.

Every case runs with NumPy mode on and switches it off again (``try``/``finally``), so the
other sets, which run in the same process, keep MXNet 1.x's legacy mode.
"""
from __future__ import annotations

SETUP = ("mx.npx.set_np()\n"
         "np = mx.np\n"
         "x = np.array([[1, 2], [3, 4]])\n"
         "i = np.array([1, 2, 3], dtype='int32')\n")

_CASES = {
    # creation: float32 by default, NumPy data keep their dtype
    "array_of_floats": "out = np.array([1.5, 2])",
    "array_of_ints": "out = np.array([1, 2])",
    "array_of_bools": "out = np.array([True, False])",
    "array_from_numpy_float64": "import numpy\nout = np.array(numpy.array([1.5]))",
    "array_from_numpy_int64": "import numpy\nout = np.array(numpy.array([1, 2]))",
    "array_dtype": "out = np.array([1, 2], dtype='int32')",
    "arange": "out = np.arange(5)",
    "arange_step": "out = np.arange(0, 1, 0.25)",
    "zeros": "out = np.zeros((2, 3))",
    "zeros_int": "out = np.zeros((2,), dtype=np.int32)",
    "ones_like": "out = np.ones_like(i)",
    "full": "out = np.full((2,), 3)",
    "full_like": "out = np.full_like(x, 7)",
    "linspace": "out = np.linspace(0, 1, 5)",
    "eye": "out = np.eye(3, k=1)",
    "constants": "out = [np.pi, np.e, np.newaxis]",
    # arithmetic and MXNet NumPy's dtype rules
    "int_times_float_scalar": "out = i * 1.5",
    "int_minus_float_scalar": "out = i - 0.5",
    "int_true_division": "out = i / 2",
    "int_times_float_array": "out = i * np.array([1.0, 2.0, 3.0])",
    "int64_plus_int32": "out = np.array([1, 2, 3], dtype='int64') + i",
    "float16_plus_int32": "out = np.array([1, 2, 3], dtype='float16') + i",
    "bool_times_int_scalar": "out = (i > 1) * 2",
    "bool_plus_int": "out = (i > 1) + i",
    "float64_plus_float32": "out = np.array([1.0, 2], dtype='float64') + np.array([1.0, 2])",
    "reverse_power": "out = 2 ** i",
    "power_scalar": "out = x ** 2",
    "broadcast": "out = x + np.array([10, 20])",
    "modulo": "out = np.array([-3.0, 4.0]) % 3",
    "negative": "out = -x",
    "in_place_add": "y = x.copy()\ny += 1\nout = y",
    "in_place_mul_scalar": "y = np.ones((2,))\ny *= 3\nout = y",
    "sqrt_of_int": "out = np.sqrt(np.array([1, 4, 9], dtype='int32'))",
    "exp_of_int": "out = np.exp(np.array([1, 2], dtype='int32'))",
    "unary_math": ("v = np.array([0.5, 1.5])\n"
                   "out = [np.exp(v), np.log(v), np.log1p(v), np.sqrt(v), np.square(v), "
                   "np.tanh(v), np.sin(v), np.cos(v), np.floor(v), np.ceil(v), np.abs(-v), "
                   "np.sign(-v)]"),
    "round_half_even": "out = np.round(np.array([0.5, 1.5, 2.5, -0.5]))",
    "abs_of_int": "out = np.abs(np.array([-1, 2], dtype='int32'))",
    "maximum_scalar": "out = np.maximum(x, 2.5)",
    "minimum_arrays": "out = np.minimum(x, np.array([2, 2]))",
    "power_function": "out = np.power(x, 3)",
    "clip": "out = np.clip(x, 2, 3)",
    "where": "out = np.where(x > 2, x, 0)",
    "isnan_isinf": "v = np.array([1.0, 0]) / 0\nout = [np.isnan(v), np.isinf(v)]",
    # comparisons give bool arrays
    "greater_scalar": "out = x > 2",
    "equal_arrays": "out = x == x",
    "not_equal": "out = x != 2",
    "less_equal": "out = x <= 3",
    "int_equal_float_scalar": "out = i == 1.0",
    "int_greater_float_scalar": "out = i > 1.5",
    # reductions: 0-d without an axis; MXNet NumPy's dtypes
    "sum_all": "out = x.sum()",
    "sum_int": "out = i.sum()",
    "sum_bool": "out = (x > 1).sum()",
    "mean_bool": "out = (x > 1).mean()",
    "mean_int": "out = i.mean()",
    "mean_axis_keepdims": "out = x.mean(axis=1, keepdims=True)",
    "sum_axes_tuple": "out = np.sum(x, axis=(0, 1))",
    "max_min": "out = [x.max(), x.min(axis=1), np.max(x, axis=0)]",
    "prod": "out = np.prod(x)",
    "std_var": "out = [x.std(), np.var(x, axis=0)]",
    "argmax_flat": "out = x.argmax()",
    "argmax_axis": "out = np.argmax(x, axis=0)",
    "argmin_flat": "out = np.argmin(x)",
    "cumsum": "out = np.cumsum(x)",
    "cumsum_axis": "out = np.cumsum(x, axis=1)",
    "all_any": "out = [np.all(x > 0), np.any(x > 3), np.all(x > 1, axis=1)]",
    "norm": "out = np.linalg.norm(x)",
    "norm_axis": "out = np.linalg.norm(x, axis=1)",
    "linalg_inv": "out = np.linalg.inv(x)",
    "linalg_det": "out = [np.linalg.det(x), np.linalg.det(np.stack([x, x.T * 2]))]",
    "linalg_slogdet": "out = np.linalg.slogdet(np.stack([x, x * 0, -x]))",
    "linalg_det_gradient": ("w = np.array([[2.0, 1.0], [1.0, 3.0]])\nw.attach_grad()\n"
                            "with mx.autograd.record():\n"
                            "    y = np.linalg.det(w) + np.linalg.inv(w).sum()\n"
                            "y.backward()\nout = w.grad"),
    # scalars out of arrays
    "item": "out = x.sum().item()",
    "float_of_0d": "out = float(x[1, 1])",
    "len_size_ndim": "out = [len(x), x.size, x.ndim, list(x.shape)]",
    # indexing: NumPy's, with 0-d results
    "index_scalar": "out = x[0, 1]",
    "index_row": "out = x[0]",
    "index_negative": "out = x[-1]",
    "index_column": "out = x[:, 1]",
    "index_slices": "out = x[1:, :1]",
    "index_newaxis": "out = x[..., None]",
    "index_step": "out = np.arange(10)[::3]",
    "index_bool_mask": "out = x[x > 2]",
    "index_int_array": "out = x[np.array([1, 0])]",
    "index_list": "out = x[[1, 0, 1]]",
    "index_pairs": "out = x[[0, 1], [1, 0]]",
    "index_range_and_labels": ("y_hat = np.array([[0.1, 0.3, 0.6], [0.3, 0.2, 0.5]])\n"
                               "y = np.array([0, 2])\n"
                               "out = y_hat[range(len(y_hat)), y]"),
    "index_column_array": "out = x[:, np.array([1, 0])]",
    "setitem_mask": "y = x.copy()\ny[y > 2] = 0\nout = y",
    "setitem_slice": "y = np.zeros((3, 2))\ny[1:] = 5\nout = y",
    # shape functions
    "transpose_T": "out = [x.T, np.transpose(x), x.transpose(1, 0)]",
    "reshape": "out = [x.reshape(-1), x.reshape(4, 1), x.reshape((1, 4)), np.reshape(x, (4,))]",
    "astype": "out = x.astype('int32')",
    "concatenate_stack": ("out = [np.concatenate([x, x]), np.concatenate([x, x], axis=1), "
                          "np.stack([x, x], axis=1), np.vstack([x, x]), np.hstack([x, x])]"),
    "split_sections": "out = np.split(x, 2)",
    "split_indices": "out = np.split(np.arange(6), [2, 5])",
    "swapaxes_expand_squeeze": ("out = [np.swapaxes(x, 0, 1), np.expand_dims(x, 1).shape, "
                                "np.squeeze(np.ones((1, 3, 1))).shape]"),
    "flip_tile_repeat": "out = [np.flip(x), np.flip(x, 0), np.tile(x, 2), np.repeat(x, 2)]",
    "broadcast_to": "out = np.broadcast_to(np.array([1, 2]), (3, 2))",
    "dot_matmul": ("v = np.array([1.0, 2.0])\n"
                   "out = [np.dot(x, x), np.dot(v, v), np.dot(x, v), np.matmul(x, x), x @ x]"),
    "tensordot_outer": ("out = [np.tensordot(x, x, axes=1), np.tensordot(x, x), "
                        "np.outer(np.array([1.0, 2]), np.array([3.0, 4, 5]))]"),
    "sort_argsort": ("v = np.array([3.0, 1, 2])\n"
                     "out = [np.sort(v), np.argsort(v), np.sort(np.array([[3, 1], [0, 2]]))]"),
    "unique": "out = np.unique(np.array([3, 1, 3, 2]))",
    "diag": "out = [np.diag(np.array([1.0, 2])), np.diag(x), np.diag(x, 1)]",
    "tril": "out = [np.tril(x), np.tril(np.ones((3, 3)), -1)]",
    # conversions between np and nd arrays
    "as_nd_ndarray": "out = [type(x.as_nd_ndarray()).__name__, x.as_nd_ndarray().sum()]",
    "as_np_ndarray": ("a = mx.nd.array([[1, 2]]).as_np_ndarray()\n"
                      "out = [type(a).__name__, a.sum(), a > 1]"),
    # random: shapes, dtypes and (seeded-free) moments
    "random_shapes_dtypes": ("out = [(r.shape, r.dtype.name) for r in ["
                             "np.random.normal(0, 1, (2, 3)), np.random.uniform(size=(4,)), "
                             "np.random.uniform(), np.random.randint(0, 5, (3,)), "
                             "np.random.rand(2, 2), np.random.randn(3), "
                             "np.random.normal(size=(2,), dtype='float64')]]"),
    "random_moments": ("s = np.random.normal(1.0, 2.0, (200000,))\n"
                       "u = np.random.uniform(-1, 3, (200000,))\n"
                       "out = [round(float(s.mean()), 1), round(float(s.std()), 1), "
                       "round(float(u.mean()), 1), bool(u.min() >= -1), bool(u.max() < 3)]"),
    "randint_range": ("r = np.random.randint(2, 5, (1000,))\n"
                      "out = [int(r.min()), int(r.max())]"),
    # autograd through np arrays
    "autograd_gradient": ("w = np.array([1.0, -2.0, 3.0])\nw.attach_grad()\n"
                          "with mx.autograd.record():\n"
                          "    y = (np.exp(w) * w).sum() + (w ** 2).mean()\n"
                          "y.backward()\nout = [type(w.grad).__name__, w.grad]"),
    "autograd_matrix": ("w = np.array([[1.0], [2.0]])\nw.attach_grad()\n"
                        "with mx.autograd.record():\n"
                        "    l = ((np.dot(x, w) - 1) ** 2 / 2).mean()\n"
                        "l.backward()\nout = w.grad"),
    "autograd_indexing": ("w = np.array([[0.2, 0.8], [0.6, 0.4]])\nw.attach_grad()\n"
                          "with mx.autograd.record():\n"
                          "    l = -np.log(w[[0, 1], [1, 0]]).sum()\n"
                          "l.backward()\nout = w.grad"),
    # npx
    "npx_activations": ("v = np.array([[-1.0, 0.0, 2.0]])\n"
                        "out = [mx.npx.relu(v), mx.npx.sigmoid(v), mx.npx.softmax(v), "
                        "mx.npx.log_softmax(v), mx.npx.activation(v, act_type='tanh')]"),
    "npx_one_hot_pick": ("out = [mx.npx.one_hot(np.array([1, 0]), 3), "
                         "mx.npx.pick(x, np.array([1, 0])), "
                         "mx.npx.batch_flatten(np.ones((2, 3, 4)))]"),
    "npx_topk": "out = mx.npx.topk(np.array([1.0, 3, 2]), k=2)",
    "npx_sequence_mask": ("out = mx.npx.sequence_mask(np.ones((3, 2)), np.array([1, 3]), "
                          "use_sequence_length=True, value=-1)"),
    "npx_reshape_codes": ("out = [mx.npx.reshape(np.ones((2, 3, 4)), (-2, -1)).shape, "
                          "mx.npx.reshape(np.ones((2, 3, 4)), (-5, -2)).shape, "
                          "mx.npx.reshape(np.ones((2, 3, 4)), (-6, 1, 2, -4)).shape]"),
    "npx_fully_connected": ("out = mx.npx.fully_connected(x, np.ones((3, 2)), np.zeros(3), "
                            "num_hidden=3)"),
    "npx_modes": "out = [mx.npx.is_np_array(), mx.npx.is_np_shape()]",
    # Gluon in NumPy mode
    "gluon_dense_types": ("net = mx.gluon.nn.Dense(2)\nnet.initialize(mx.init.One())\n"
                          "o = net(x)\n"
                          "out = [type(o).__name__, o, type(net.weight.data()).__name__, "
                          "type(net.weight.grad()).__name__]"),
    "gluon_loss": ("l = mx.gluon.loss.L2Loss()(x, np.ones((2, 2)))\n"
                   "out = [type(l).__name__, l]"),
    "gluon_sequential_grad": ("net = mx.gluon.nn.Sequential()\n"
                              "net.add(mx.gluon.nn.Dense(3, activation='relu'), "
                              "mx.gluon.nn.Dense(1))\n"
                              "net.initialize(mx.init.Constant(0.5))\n"
                              "with mx.autograd.record():\n"
                              "    l = (net(x) ** 2).sum()\n"
                              "l.backward()\n"
                              "out = [net[0].weight.grad(), net[1].bias.grad()]"),
    "gluon_dataloader": ("ds = mx.gluon.data.ArrayDataset(x, np.array([0, 1]))\n"
                         "b = next(iter(mx.gluon.data.DataLoader(ds, batch_size=2)))\n"
                         "out = [type(b[0]).__name__, b[0], b[1]]"),
}


def _with_reset(code: str) -> str:
    """The case, switching NumPy mode off afterwards even when it fails."""
    body = "\n".join("    " + line for line in code.splitlines())
    return f"try:\n{body}\nfinally:\n    mx.npx.reset_np()\n"


SETS = {"np_interface": {name: _with_reset(code) for name, code in _CASES.items()}}
