"""MXNet 1.x's ``nd`` namespace beyond the op table: samplers (shapes and dtypes only: the
values are random), legacy layer functions, broadcast arithmetic, ``nd.linalg`` and
``nd.contrib`` control flow, recorded from the real MXNet 1.9.1 by ``record_mxnet.py``."""

SETUP = ("import numpy as np\n"
         "def kind(x):\n"
         "    return [list(x.shape), np.dtype(x.dtype).name]\n"
         "a = mx.nd.array([[1, 5, 3], [4, 2, 6]])\n"
         "x4 = mx.nd.array(np.arange(2 * 3 * 5 * 5).reshape(2, 3, 5, 5) % 7 - 3)\n"
         "sq = mx.nd.array([[4, 1, 0.5], [1, 3, 0.2], [0.5, 0.2, 2]])\n"
         "spd = mx.nd.stack(sq, sq * 2 + mx.nd.array(np.eye(3)))\n")

RANDOM = {
    "uniform_default": "out = kind(mx.nd.random.uniform())",
    "uniform_shape": "out = kind(mx.nd.random.uniform(-1, 1, shape=(2, 3)))",
    "uniform_int_shape": "out = kind(mx.nd.random.uniform(shape=4))",
    "uniform_float64": "out = kind(mx.nd.random.uniform(shape=(2,), dtype='float64'))",
    "uniform_array_params": ("out = kind(mx.nd.random.uniform(mx.nd.zeros((2, 3)), "
                             "mx.nd.ones((2, 3)), shape=(4, 5)))"),
    "uniform_array_params_no_shape": ("out = kind(mx.nd.random.uniform(mx.nd.zeros((2,)), "
                                      "mx.nd.ones((2,))))"),
    "uniform_array_params_float64": ("out = kind(mx.nd.random.uniform(mx.nd.zeros((2,), "
                                     "dtype='float64'), mx.nd.ones((2,), dtype='float64'), "
                                     "shape=3))"),
    "normal_shape": "out = kind(mx.nd.random.normal(0, 2, shape=(3, 2)))",
    "normal_array_params": ("out = kind(mx.nd.random.normal(mx.nd.zeros((3,)), "
                            "mx.nd.ones((3,)), shape=2))"),
    "randn": "out = kind(mx.nd.random.randn(2, 3))",
    "randint": "out = kind(mx.nd.random.randint(0, 10, shape=(2, 2)))",
    "randint_int64": "out = kind(mx.nd.random.randint(0, 10, shape=(3,), dtype='int64'))",
    "exponential": "out = kind(mx.nd.random.exponential(2, shape=(5,)))",
    "gamma": "out = kind(mx.nd.random.gamma(2, 3, shape=(2, 2)))",
    "poisson": "out = kind(mx.nd.random.poisson(3, shape=(4,)))",
    "negative_binomial": "out = kind(mx.nd.random.negative_binomial(3, 0.4, shape=(4,)))",
    "generalized_negative_binomial": ("out = kind(mx.nd.random.generalized_negative_binomial("
                                      "2, 0.3, shape=(4,)))"),
    "gamma_array_params": ("out = kind(mx.nd.random.gamma(mx.nd.ones((2,)), mx.nd.ones((2,)), "
                           "shape=(3,)))"),
    "multinomial_one": "out = kind(mx.nd.random.multinomial(mx.nd.array([0.2, 0.8])))",
    "multinomial_shape": ("out = kind(mx.nd.random.multinomial(mx.nd.array([[0.2, 0.8], "
                          "[0.5, 0.5]]), shape=3))"),
    "multinomial_prob": ("out = [kind(t) for t in mx.nd.random.multinomial("
                         "mx.nd.array([[0.2, 0.8]]), shape=2, get_prob=True)]"),
    "multinomial_certain": ("out = mx.nd.random.multinomial(mx.nd.array([[0, 1, 0], "
                            "[0, 0, 1.0]]), shape=2)"),
    "shuffle_keeps_rows": ("s = mx.nd.random.shuffle(mx.nd.array([[3, 1], [1, 2], [2, 3]]))\n"
                           "out = [kind(s), np.sort(s.asnumpy()[:, 0]) * 0 + "
                           "np.sort(s.asnumpy()[:, 0])]"),
    "legacy_random_uniform": "out = kind(mx.nd.random_uniform(shape=(2, 2)))",
    "legacy_random_normal": "out = kind(mx.nd.random_normal(loc=1, scale=2, shape=(3,)))",
    "legacy_uniform": "out = kind(mx.nd.uniform(low=0, high=2, shape=(3,)))",
    "legacy_normal": "out = kind(mx.nd.normal(shape=(2,)))",
    "legacy_sample_normal": ("out = kind(mx.nd.sample_normal(mx.nd.zeros((2,)), "
                             "mx.nd.ones((2,)), shape=(3,)))"),
    "legacy_sample_uniform": ("out = kind(mx.nd.sample_uniform(mx.nd.zeros((2,)), "
                              "mx.nd.ones((2,))))"),
    "legacy_random_randint": "out = kind(mx.nd.random_randint(0, 5, shape=(2,)))",
    "seed_repeats": ("mx.random.seed(7); u = mx.nd.random.uniform(shape=(5,))\n"
                     "mx.random.seed(7); v = mx.nd.random.uniform(shape=(5,))\n"
                     "out = (u == v).sum()"),
    "uniform_range": ("u = mx.nd.random.uniform(2, 3, shape=(1000,))\n"
                      "out = [(u >= 2).sum(), (u < 3).sum()]"),
}

LAYERS = {
    "fully_connected": ("w = mx.nd.array(np.arange(12).reshape(4, 3) / 10)\n"
                        "out = mx.nd.FullyConnected(a, w, mx.nd.array([1, 2, 3, 4]), "
                        "num_hidden=4)"),
    "fully_connected_no_bias": ("w = mx.nd.array(np.arange(12).reshape(4, 3) / 10)\n"
                                "out = mx.nd.FullyConnected(data=a, weight=w, num_hidden=4, "
                                "no_bias=True)"),
    "fully_connected_flatten": ("w = mx.nd.array(np.arange(150).reshape(2, 75) / 100)\n"
                                "out = mx.nd.FullyConnected(x4, w, num_hidden=2, "
                                "no_bias=True)"),
    "fully_connected_no_flatten": ("w = mx.nd.array(np.arange(10).reshape(2, 5) / 10)\n"
                                   "out = mx.nd.FullyConnected(x4, w, mx.nd.array([1, -1]), "
                                   "num_hidden=2, flatten=False)"),
    "convolution": ("w = mx.nd.array(np.arange(4 * 3 * 9).reshape(4, 3, 3, 3) % 5 - 2)\n"
                    "out = mx.nd.Convolution(x4, w, mx.nd.array([0, 1, 2, 3]), kernel=(3, 3), "
                    "num_filter=4)"),
    "convolution_stride_pad": ("w = mx.nd.array(np.arange(2 * 3 * 9).reshape(2, 3, 3, 3) % 3)\n"
                               "out = mx.nd.Convolution(data=x4, weight=w, kernel=(3, 3), "
                               "stride=(2, 2), pad=(1, 1), num_filter=2, no_bias=True)"),
    "convolution_group": ("w = mx.nd.array(np.ones((3, 1, 2, 2)))\n"
                          "out = mx.nd.Convolution(x4, w, kernel=(2, 2), num_filter=3, "
                          "num_group=3, no_bias=True)"),
    "convolution_1d": ("w = mx.nd.array(np.ones((2, 3, 2)))\n"
                       "out = mx.nd.Convolution(x4[:, :, 0], w, kernel=(2,), num_filter=2, "
                       "no_bias=True)"),
    "deconvolution": ("w = mx.nd.array(np.ones((3, 2, 2, 2)))\n"
                      "out = mx.nd.Deconvolution(x4, w, kernel=(2, 2), stride=(2, 2), "
                      "num_filter=2)"),
    "pooling_max": "out = mx.nd.Pooling(x4, kernel=(2, 2), pool_type='max', stride=(2, 2))",
    "pooling_default_stride": "out = mx.nd.Pooling(x4, kernel=(2, 2))",
    "pooling_avg_full": ("out = mx.nd.Pooling(x4, kernel=(2, 2), pool_type='avg', "
                         "stride=(2, 2), pooling_convention='full')"),
    "pooling_avg_pad": ("out = mx.nd.Pooling(x4, kernel=(3, 3), pool_type='avg', "
                        "pad=(1, 1), stride=(2, 2))"),
    "pooling_avg_pad_exclude": ("out = mx.nd.Pooling(x4, kernel=(3, 3), pool_type='avg', "
                                "pad=(1, 1), stride=(2, 2), count_include_pad=False)"),
    "pooling_sum": "out = mx.nd.Pooling(x4, kernel=(2, 2), pool_type='sum', stride=(2, 2))",
    "pooling_global_max": "out = mx.nd.Pooling(x4, kernel=(1, 1), global_pool=True)",
    "pooling_global_avg": ("out = mx.nd.Pooling(x4, kernel=(1, 1), pool_type='avg', "
                           "global_pool=True)"),
    "batchnorm_inference": ("g = mx.nd.array([1, 2, 3]); b = mx.nd.array([0, 1, -1])\n"
                            "m = mx.nd.array([0.5, 1, 0]); v = mx.nd.array([1, 4, 0.25])\n"
                            "out = mx.nd.BatchNorm(x4, g, b, m, v)"),
    "batchnorm_no_fix_gamma": ("g = mx.nd.array([1, 2, 3]); b = mx.nd.array([0, 1, -1])\n"
                               "m = mx.nd.array([0.5, 1, 0]); v = mx.nd.array([1, 4, 0.25])\n"
                               "out = mx.nd.BatchNorm(x4, g, b, m, v, fix_gamma=False, "
                               "eps=1e-5)"),
    "batchnorm_axis_last": ("g = mx.nd.array([1, 2, 3]); b = mx.nd.array([0, 1, -1])\n"
                            "m = mx.nd.array([0.5, 1, 0]); v = mx.nd.array([1, 4, 0.25])\n"
                            "out = mx.nd.BatchNorm(a, g, b, m, v, fix_gamma=False, axis=-1)"),
    "flatten": "out = mx.nd.Flatten(x4)",
    "flatten_lower": "out = mx.nd.flatten(x4)",
    "dropout_inference": "out = mx.nd.Dropout(a, p=0.5)",
    "dropout_in_training_keeps_scale": ("with mx.autograd.record():\n"
                                        "    d = mx.nd.Dropout(mx.nd.ones((1000,)), p=0.5)\n"
                                        "out = kind(d) + [sorted(set(d.asnumpy().tolist()))]"),
    "softmax_activation_instance": "out = mx.nd.SoftmaxActivation(a)",
    "softmax_activation_channel": "out = mx.nd.SoftmaxActivation(x4 / 3, mode='channel')",
    "embedding": ("w = mx.nd.array(np.arange(12).reshape(4, 3))\n"
                  "out = mx.nd.Embedding(mx.nd.array([[0, 3], [1, 1]]), w, input_dim=4, "
                  "output_dim=3)"),
    "leaky_relu": "out = mx.nd.LeakyReLU(a - 3)",
    "leaky_relu_slope": "out = mx.nd.LeakyReLU(a - 3, act_type='leaky', slope=0.1)",
    "elu": "out = mx.nd.LeakyReLU(a - 3, act_type='elu', slope=0.5)",
    "selu": "out = mx.nd.LeakyReLU(a - 3, act_type='selu')",
    "gelu": "out = mx.nd.LeakyReLU(a - 3, act_type='gelu')",
    "prelu": ("out = mx.nd.LeakyReLU(x4[:1, :, :2], gamma=mx.nd.array([0.1, 0.2, 0.3]), "
              "act_type='prelu')"),
}

BROADCAST = {
    "broadcast_add": "out = mx.nd.broadcast_add(a, mx.nd.array([[1], [2]]))",
    "broadcast_sub": "out = mx.nd.broadcast_sub(a, mx.nd.array([1, 2, 3]))",
    "broadcast_mul": "out = mx.nd.broadcast_mul(a, mx.nd.array([[2], [3]]))",
    "broadcast_div": "out = mx.nd.broadcast_div(a, mx.nd.array([1, 2, 4]))",
    "broadcast_plus": "out = mx.nd.broadcast_plus(a, mx.nd.array([1, 2, 4]))",
    "broadcast_minus": "out = mx.nd.broadcast_minus(a, mx.nd.array([1, 2, 4]))",
    "broadcast_maximum": "out = mx.nd.broadcast_maximum(a, mx.nd.array([[3], [4]]))",
    "broadcast_minimum": "out = mx.nd.broadcast_minimum(a, mx.nd.array([[3], [4]]))",
    "broadcast_power": "out = mx.nd.broadcast_power(a, mx.nd.array([[2], [0.5]]))",
    "broadcast_equal": "out = mx.nd.broadcast_equal(a, mx.nd.array([[1], [2]]))",
    "broadcast_not_equal": "out = mx.nd.broadcast_not_equal(a, mx.nd.array([[1], [2]]))",
    "broadcast_greater": "out = mx.nd.broadcast_greater(a, mx.nd.array([3, 3, 3]))",
    "broadcast_greater_equal": "out = mx.nd.broadcast_greater_equal(a, mx.nd.array([3, 3, 3]))",
    "broadcast_lesser": "out = mx.nd.broadcast_lesser(a, mx.nd.array([3, 3, 3]))",
    "broadcast_lesser_equal": "out = mx.nd.broadcast_lesser_equal(a, mx.nd.array([3, 3, 3]))",
    "broadcast_logical_and": "out = mx.nd.broadcast_logical_and(a - 1, mx.nd.array([0, 1, 2]))",
    "broadcast_logical_or": "out = mx.nd.broadcast_logical_or(a - 1, mx.nd.array([0, 1, 0]))",
    "broadcast_logical_xor": "out = mx.nd.broadcast_logical_xor(a - 1, mx.nd.array([0, 1, 0]))",
    "broadcast_int32": ("out = mx.nd.broadcast_greater(mx.nd.array([1, 5], dtype='int32'), "
                        "mx.nd.array([2], dtype='int32'))"),
    "elemwise_add": "out = mx.nd.elemwise_add(a, a)",
    "elemwise_sub": "out = mx.nd.elemwise_sub(a, a * 2)",
    "elemwise_mul": "out = mx.nd.elemwise_mul(a, a)",
    "elemwise_div": "out = mx.nd.elemwise_div(a, a + 1)",
    "broadcast_axis": "out = mx.nd.broadcast_axis(mx.nd.array([[1], [2]]), axis=1, size=3)",
    "broadcast_axes": ("out = mx.nd.broadcast_axes(mx.nd.array([[[1]], [[2]]]), axis=(1, 2), "
                       "size=(2, 3))"),
    "broadcast_like": "out = mx.nd.broadcast_like(mx.nd.array([[1], [2]]), a)",
    "add_n": "out = mx.nd.add_n(a, a, a)",
    "element_wise_sum": "out = mx.nd.ElementWiseSum(a, a * 2)",
}

LINALG = {
    "gemm": ("out = mx.nd.linalg.gemm(a, a, mx.nd.ones((3, 3)), transpose_a=True, alpha=0.5, "
             "beta=2)"),
    "gemm_batched": "out = mx.nd.linalg.gemm(spd, spd, spd, transpose_b=True)",
    "gemm2": "out = mx.nd.linalg.gemm2(a, a, transpose_b=True)",
    "gemm2_alpha_batched": "out = mx.nd.linalg.gemm2(spd, spd, alpha=0.25, transpose_a=True)",
    "potrf": "out = mx.nd.linalg.potrf(sq)",
    "potrf_batched": "out = mx.nd.linalg.potrf(spd)",
    "potri": "out = mx.nd.linalg.potri(mx.nd.linalg.potrf(spd))",
    "trmm": "out = mx.nd.linalg.trmm(sq, a.T)",
    "trmm_options": ("out = mx.nd.linalg.trmm(sq, a, transpose=True, rightside=True, "
                     "lower=False, alpha=2)"),
    "trsm": "out = mx.nd.linalg.trsm(sq, a.T)",
    "trsm_upper_transposed": "out = mx.nd.linalg.trsm(sq, a.T, transpose=True, lower=False)",
    "trsm_rightside": "out = mx.nd.linalg.trsm(spd, mx.nd.stack(a, a), rightside=True, alpha=3)",
    "sumlogdiag": "out = mx.nd.linalg.sumlogdiag(spd)",
    "sumlogdiag_single": "out = mx.nd.linalg.sumlogdiag(sq)",
    "syrk": "out = mx.nd.linalg.syrk(a)",
    "syrk_transpose": "out = mx.nd.linalg.syrk(a, transpose=True, alpha=0.5)",
    "extractdiag": "out = mx.nd.linalg.extractdiag(spd)",
    "extractdiag_offset": "out = mx.nd.linalg.extractdiag(sq, offset=-1)",
    "makediag": "out = mx.nd.linalg.makediag(mx.nd.array([[1, 2], [3, 4]]))",
    "makediag_offset": "out = mx.nd.linalg.makediag(mx.nd.array([1, 2]), offset=1)",
    "extracttrian": "out = mx.nd.linalg.extracttrian(spd)",
    "extracttrian_upper": "out = mx.nd.linalg.extracttrian(sq, lower=False)",
    "extracttrian_offset": "out = mx.nd.linalg.extracttrian(sq, offset=1)",
    "extracttrian_negative": "out = mx.nd.linalg.extracttrian(sq, offset=-1)",
    "maketrian": "out = mx.nd.linalg.maketrian(mx.nd.array([1, 2, 3, 4, 5, 6]))",
    "maketrian_upper": "out = mx.nd.linalg.maketrian(mx.nd.array([1, 2, 3]), lower=False)",
    "maketrian_offset": "out = mx.nd.linalg.maketrian(mx.nd.array([[1, 2, 3]]), offset=-1)",
    "maketrian_offset_up": "out = mx.nd.linalg.maketrian(mx.nd.array([1, 2, 3]), offset=1)",
    "inverse": "out = mx.nd.linalg.inverse(sq)",
    "inverse_batched": "out = mx.nd.linalg.inverse(spd)",
    "inverse_pivoting": ("out = mx.nd.linalg.inverse(mx.nd.array([[0, 2, 1], [1, 0, 0], "
                         "[3, 1, 0]]))"),
    "det": "out = mx.nd.linalg.det(sq)",
    "det_batched": "out = mx.nd.linalg.det(mx.nd.stack(spd, spd * -1))",
    "det_pivoting": "out = mx.nd.linalg.det(mx.nd.array([[0, 2, 1], [1, 0, 0], [3, 1, 0]]))",
    "slogdet": "out = mx.nd.linalg.slogdet(sq)",
    "slogdet_batched": ("out = mx.nd.linalg.slogdet(mx.nd.array([[[2, 3], [1, 4]], "
                        "[[1, 2], [2, 4]], [[1, 2], [4, 3]]]))"),
    "det_gradient": ("m = spd.copy()\nm.attach_grad()\nwith mx.autograd.record():\n"
                     "    y = mx.nd.linalg.det(m)\ny.backward()\nout = m.grad"),
    "slogdet_gradient": ("m = sq.copy()\nm.attach_grad()\nwith mx.autograd.record():\n"
                         "    y = mx.nd.linalg.slogdet(m)[1]\ny.backward()\nout = m.grad"),
    "inverse_gradient": ("m = sq.copy()\nm.attach_grad()\nwith mx.autograd.record():\n"
                         "    y = mx.nd.linalg.inverse(m) * mx.nd.array([[1, 2, 3]])\n"
                         "y.backward()\nout = m.grad"),
    # syevd: rows of U are eigenvectors, each signed with its largest entry positive
    "syevd": "out = mx.nd.linalg.syevd(sq)",
    "syevd_batched": "out = mx.nd.linalg.syevd(spd)",
    "syevd_docstring": ("out = mx.nd.linalg.syevd(mx.nd.array([[[1, 2], [2, 4]], "
                        "[[1, 2], [2, 5]]]))"),
    # (no near-tie of magnitudes within a row: a tie's winner depends on LAPACK's rounding)
    "syevd_signs": ("out = mx.nd.linalg.syevd(mx.nd.array([[1, 2, 0, -1], [2, -3, 1, 0.5], "
                    "[0, 1, 4, 2], [-1, 0.5, 2, 0]], dtype='float64'))"),
    "syevd_negative_definite": "out = mx.nd.linalg.syevd(sq * -1 + mx.nd.array([[0, 0, 3]]).T)",
    "syevd_lower_triangle": ("out = mx.nd.linalg.syevd(mx.nd.array([[4, 9, 9], [1, 3, 9], "
                             "[0.5, 0.2, 2]]))"),
    "syevd_gradient": ("m = sq.copy()\nm.attach_grad()\nwith mx.autograd.record():\n"
                       "    u, l = mx.nd.linalg.syevd(m)\n"
                       "    y = (u * mx.nd.array([[1, 2, 3], [-1, 0.5, 2], [0.3, -2, 1]])).sum()"
                       " + (l * mx.nd.array([1, -2, 0.5])).sum()\n"
                       "y.backward()\nout = m.grad"),
    "syevd_gradient_eigenvalues": ("m = spd.copy()\nm.attach_grad()\n"
                                   "with mx.autograd.record():\n"
                                   "    y = mx.nd.linalg.syevd(m)[1]\n"
                                   "y.backward()\nout = m.grad"),
    "syevd_gradient_float64": ("m = spd.astype('float64')\nm.attach_grad()\n"
                               "with mx.autograd.record():\n"
                               "    u, l = mx.nd.linalg.syevd(m)\n"
                               "    y = (u[:, 0] * u[:, 2]).sum() + (l * l).sum()\n"
                               "y.backward()\nout = m.grad"),
    # gelqf: (Q, L) with A = L Q, LAPACK's Householder signs
    "gelqf": "out = mx.nd.linalg.gelqf(a)",
    "gelqf_docstring": ("out = mx.nd.linalg.gelqf(mx.nd.array([[[1, 2, 3], [4, 5, 6]], "
                        "[[7, 8, 9], [10, 11, 12]]]))"),
    "gelqf_square": "out = mx.nd.linalg.gelqf(spd)",
    "gelqf_float64": "out = mx.nd.linalg.gelqf(x4[:, :, :2, :].astype('float64') + 0.5)",
    "gelqf_gradient": ("m = a.copy()\nm.attach_grad()\nwith mx.autograd.record():\n"
                       "    q, l = mx.nd.linalg.gelqf(m)\n"
                       "    y = (q * mx.nd.array([[1, 2, 3], [-1, 0.5, 2]])).sum()"
                       " + (l * mx.nd.array([[1, 0], [-2, 0.5]])).sum()\n"
                       "y.backward()\nout = m.grad"),
    "gelqf_gradient_factor": ("m = spd.copy()\nm.attach_grad()\n"
                              "with mx.autograd.record():\n"
                              "    y = mx.nd.linalg.gelqf(m)[1]\n"
                              "y.backward()\nout = m.grad"),
}

CONTRIB = {
    "foreach": ("outs, s = mx.nd.contrib.foreach(lambda x, s: (x + s, x + s), a, "
                "mx.nd.zeros((3,)))\nout = [outs, s]"),
    "foreach_lists": ("outs, s = mx.nd.contrib.foreach(lambda x, s: ([x[0] * 2, x[1]], "
                      "[s[0] + x[0]]), [a, a * 3], [mx.nd.ones((3,))])\nout = [outs, s]"),
    "while_loop": ("out, v = mx.nd.contrib.while_loop(lambda i, s: i < 3, lambda i, s: "
                   "(s * 2, (i + 1, s + i)), (mx.nd.array([0]), mx.nd.array([1])), "
                   "max_iterations=5)\nout = [out[0][:3], list(out[0].shape), v]"),
    "while_loop_full": ("out, v = mx.nd.contrib.while_loop(lambda i: i < 10, lambda i: "
                        "([i, i * 2], [i + 1]), [mx.nd.array([0])], max_iterations=4)\n"
                        "out = [out, v]"),
    "cond_true": ("out = mx.nd.contrib.cond(mx.nd.array([1]), lambda: a * 2, "
                  "lambda: a - 1)"),
    "cond_false": ("out = mx.nd.contrib.cond(a.sum() < 0, lambda: a * 2, lambda: [a - 1, a])"),
    "isinf": "out = mx.nd.contrib.isinf(mx.nd.array([1, np.inf, -np.inf, np.nan]))",
    "isnan": "out = mx.nd.contrib.isnan(mx.nd.array([1, np.inf, -np.inf, np.nan]))",
    "isfinite": "out = mx.nd.contrib.isfinite(mx.nd.array([1, np.inf, -np.inf, np.nan]))",
    "arange_like": "out = mx.nd.contrib.arange_like(a)",
    "arange_like_axis": "out = mx.nd.contrib.arange_like(a, start=2, step=0.5, axis=1)",
    "arange_like_repeat": "out = mx.nd.contrib.arange_like(a, repeat=2)",
    "bilinear_resize": ("out = mx.nd.contrib.BilinearResize2D(x4[:, :1, :3, :3], height=5, "
                        "width=4)"),
}

GLUON_DATA = {
    "array_dataset_numpy": ("ds = mx.gluon.data.ArrayDataset(np.arange(6).reshape(3, 2)"
                            ".astype('float32'), np.array([0, 1, 2]))\n"
                            "x, y = ds[1]\nout = [type(x).__name__, x, type(y).__name__, y, "
                            "len(ds)]"),
    "array_dataset_ndarray": ("ds = mx.gluon.data.ArrayDataset(mx.nd.ones((3, 2)), "
                              "mx.nd.array([0, 1, 2]))\nx, y = ds[2]\n"
                              "out = [type(x).__name__, x, type(y).__name__, y]"),
    "array_dataset_single": ("ds = mx.gluon.data.ArrayDataset(np.ones((3, 2)))\n"
                             "out = [type(ds[0]).__name__, ds[0]]"),
    "simple_dataset": "out = mx.gluon.data.SimpleDataset([1, 2, 3])[1]",
    "dataloader_numpy": ("ds = mx.gluon.data.ArrayDataset(np.arange(8.0).reshape(4, 2), "
                         "np.array([0, 1, 2, 3]))\n"
                         "b = next(iter(mx.gluon.data.DataLoader(ds, batch_size=3)))\n"
                         "out = [type(b).__name__, b[0], b[1]]"),
    "dataloader_ndarray": ("ds = mx.gluon.data.ArrayDataset(mx.nd.ones((5, 2)), "
                           "mx.nd.array([0, 1, 2, 3, 4]))\n"
                           "bs = list(mx.gluon.data.DataLoader(ds, batch_size=2, "
                           "last_batch='discard'))\nout = [len(bs), bs[1][0], bs[1][1]]"),
    "dataloader_single": ("loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset("
                          "np.ones((5, 2), 'float32')), batch_size=2, last_batch='rollover')\n"
                          "out = [b for b in loader]"),
    "to_tensor": ("img = mx.nd.array(np.arange(24).reshape(2, 4, 3), dtype='uint8')\n"
                  "out = mx.gluon.data.vision.transforms.ToTensor()(img)"),
    "normalize": ("t = mx.gluon.data.vision.transforms\n"
                  "img = mx.nd.array(np.arange(24).reshape(2, 4, 3), dtype='uint8')\n"
                  "out = t.Normalize(mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.4))"
                  "(t.ToTensor()(img))"),
    "compose": ("t = mx.gluon.data.vision.transforms\n"
                "img = mx.nd.array(np.arange(24).reshape(2, 4, 3), dtype='uint8')\n"
                "out = t.Compose([t.ToTensor(), t.Normalize(0.5, 0.25)])(img)"),
    "cast": ("out = mx.gluon.data.vision.transforms.Cast('float16')(mx.nd.array("
             "np.ones((2, 2, 1)), dtype='uint8'))"),
    "center_crop": ("img = mx.nd.array(np.arange(48).reshape(4, 4, 3), dtype='uint8')\n"
                    "out = mx.gluon.data.vision.transforms.CenterCrop((2, 3))(img)"),
    "resize_shape": ("img = mx.nd.array(np.arange(48).reshape(4, 4, 3), dtype='uint8')\n"
                     "out = kind(mx.gluon.data.vision.transforms.Resize((6, 2))(img))"),
    "resize_double": ("img = mx.nd.array(np.arange(32).reshape(4, 4, 2) * 4, dtype='uint8')\n"
                      "out = mx.gluon.data.vision.transforms.Resize(8)(img)"),
    "random_resized_crop": ("img = mx.nd.array(np.ones((10, 12, 3)), dtype='uint8')\n"
                            "out = kind(mx.gluon.data.vision.transforms.RandomResizedCrop("
                            "(5, 4))(img))"),
    "random_flip": ("img = mx.nd.array(np.ones((3, 4, 3)), dtype='uint8')\n"
                    "out = mx.gluon.data.vision.transforms.RandomFlipLeftRight()(img)"),
    "transform_first": ("t = mx.gluon.data.vision.transforms\n"
                        "ds = mx.gluon.data.ArrayDataset(mx.nd.array(np.ones((3, 2, 2, 3)), "
                        "dtype='uint8'), np.array([4, 5, 6], dtype='int32'))\n"
                        "x, y = ds.transform_first(t.ToTensor())[0]\n"
                        "out = [type(x).__name__, kind(x), type(y).__name__, y]"),
    "transform_loader": ("t = mx.gluon.data.vision.transforms\n"
                         "ds = mx.gluon.data.ArrayDataset(mx.nd.array(np.ones((3, 2, 2, 3)), "
                         "dtype='uint8'), np.array([4, 5, 6], dtype='int32'))\n"
                         "x, y = next(iter(mx.gluon.data.DataLoader(ds.transform_first("
                         "t.ToTensor()), batch_size=3)))\nout = [kind(x), y]"),
}

# MXNet 1.9.1's CPU build infers NHWC convolutions but cannot run them (oneDNN refuses), so
# these record the NHWC layer's weight shape and, as the expected output, MXNet's channels-first
# convolution of the same data with that weight moved to (out, in, *kernel), transposed back;
# test_nd_random_linalg.py runs portable's NHWC layer against them.
_NHWC = ("def nhwc_reference(channels, kernel, **kw):\n"
         "    net = mx.gluon.nn.Conv2D(channels, kernel, layout='NHWC', in_channels=3, **kw)\n"
         "    net.initialize()\n"
         "    shape = net.weight.shape\n"
         "    w = mx.nd.array((np.arange(np.prod(shape)).reshape(shape) % 5 - 2) / 4)\n"
         "    ref = mx.gluon.nn.Conv2D(channels, kernel, in_channels=3, use_bias=False, **kw)\n"
         "    ref.initialize()\n"
         "    ref.weight.set_data(w.transpose((0, 3, 1, 2)))\n"
         "    x = mx.nd.array(np.arange(2 * 5 * 6 * 3).reshape(2, 5, 6, 3) % 7 - 3)\n"
         "    return [list(shape), w, ref(x.transpose((0, 3, 1, 2))).transpose((0, 2, 3, 1))]\n")

GLUON_LAYERS = {
    "conv2d_nhwc": _NHWC + "out = nhwc_reference(4, (2, 3))",
    "conv2d_nhwc_stride_pad": _NHWC + "out = nhwc_reference(2, 3, strides=2, padding=1)",
    "conv2d_nhwc_dilated": _NHWC + "out = nhwc_reference(2, 2, dilation=(1, 2))",
    "maxpool2d_nhwc": "out = mx.gluon.nn.MaxPool2D(layout='NHWC')(x4.transpose((0, 2, 3, 1)))",
    "avgpool2d_nhwc": ("out = mx.gluon.nn.AvgPool2D(3, 2, 1, layout='NHWC')"
                       "(x4.transpose((0, 2, 3, 1)))"),
    "identity": "out = mx.gluon.contrib.nn.Identity()(a)",
    "hybrid_concurrent": ("net = mx.gluon.contrib.nn.HybridConcurrent(axis=1)\n"
                          "net.add(mx.gluon.contrib.nn.Identity(), mx.gluon.nn.Activation("
                          "'relu'))\nout = net(a - 3)"),
    "concurrent_default_axis": ("net = mx.gluon.contrib.nn.Concurrent()\n"
                                "net.add(mx.gluon.contrib.nn.Identity(), "
                                "mx.gluon.contrib.nn.Identity())\nout = net(a)"),
    "sync_batch_norm": ("net = mx.gluon.contrib.nn.SyncBatchNorm(num_devices=1)\n"
                        "net.initialize()\nwith mx.autograd.record():\n    y = net(x4)\n"
                        "out = [y, list(net.gamma.shape)]"),
    "pixel_shuffle_1d": ("out = mx.gluon.contrib.nn.PixelShuffle1D(2)(mx.nd.array("
                         "np.arange(24).reshape(2, 4, 3)))"),
    "pixel_shuffle_2d": ("out = mx.gluon.contrib.nn.PixelShuffle2D(2)(mx.nd.array("
                         "np.arange(32).reshape(1, 8, 2, 2)))"),
    "pixel_shuffle_2d_rect": ("out = mx.gluon.contrib.nn.PixelShuffle2D((2, 3))(mx.nd.array("
                              "np.arange(48).reshape(1, 12, 2, 2)))"),
    "pixel_shuffle_3d": ("out = mx.gluon.contrib.nn.PixelShuffle3D((1, 2, 2))(mx.nd.array("
                         "np.arange(32).reshape(1, 8, 1, 2, 2)))"),
}

# BatchNorm(scale=False) is MXNet's fix_gamma: a gamma set (or loaded) is not applied.
_BN = ("net = mx.gluon.nn.BatchNorm(scale={scale}, center={center}, in_channels=2)\n"
       "net.initialize()\n"
       "net.gamma.set_data(mx.nd.array([2.0, 3.0]))\n"
       "net.beta.set_data(mx.nd.array([0.5, -0.5]))\n"
       "net.running_mean.set_data(mx.nd.array([1.0, -1.0]))\n"
       "net.running_var.set_data(mx.nd.array([4.0, 0.25]))\n"
       "{hybridize}"
       "out = net(mx.nd.array(np.arange(8).reshape(1, 2, 2, 2)))")
GLUON_BATCHNORM = {
    f"batchnorm_scale_{scale}_center_{center}{'_hybrid' if hybrid else ''}": _BN.format(
        scale=scale, center=center, hybridize="net.hybridize()\n" if hybrid else "")
    for scale in (True, False) for center in (True, False) for hybrid in (False, True)}

SETS = {"gluon_layouts": GLUON_LAYERS, "gluon_batchnorm": GLUON_BATCHNORM, "gluon_data": GLUON_DATA, "nd_random": RANDOM,
        "nd_layers": LAYERS, "nd_broadcast": BROADCAST,
        "nd_linalg": LINALG, "nd_contrib": CONTRIB}
