"""MXNet 1.x's Symbol API where portable's used to differ: MXNet's symbol functions (``dot``,
``Concat``, ``slice_axis``, ``LeakyReLU``, ``Embedding``, ``SliceChannel``, creation symbols),
the reductions ``sum``/``mean``/``max``/``min`` with ``axis``, Reshape's shape codes,
composition (``net2(data2=net1)``), ``ctx=`` in bind/simple_bind/eval, and attributes."""
from __future__ import annotations

SETUP = ("import numpy as np\n"
         "x = mx.sym.var('x', shape=(2, 3))\n"
         "y = mx.sym.var('y', shape=(2, 3, 4))\n"
         "a = mx.nd.array([[-1.5, 2, -3], [4, -0.5, 6]])\n"
         "def run(s, **kw):\n"
         "    return s.eval(x=a, **kw)[0]\n")

FUNCTIONS = {
    "dot": "out = mx.sym.dot(x, mx.sym.var('w', shape=(3, 4)))",
    "dot_transpose_b": "out = mx.sym.dot(x, x, transpose_b=True)",
    "dot_transpose_a_values": "out = run(mx.sym.dot(x, x, transpose_a=True))",
    "dot_lhs_rhs": "out = run(mx.sym.dot(lhs=x, rhs=x, transpose_b=True))",
    "batch_dot": "out = mx.sym.batch_dot(y, y, transpose_b=True).infer_shape()[1]",
    "broadcast_to": "out = mx.sym.broadcast_to(mx.sym.sum(x, axis=0, keepdims=True), "
                    "shape=(4, 3))",
    "broadcast_to_values": "out = run(mx.sym.broadcast_to(mx.sym.max(x, axis=0, keepdims=True),"
                           " shape=(2, 3)))",
    "concat_dim0": "out = mx.sym.Concat(x, x, dim=0)",
    "concat_default_dim": "out = mx.sym.Concat(x, x, x)",
    "concat_arguments": ("out = mx.sym.Concat(mx.sym.var('p'), mx.sym.var('q'), dim=0)"
                         ".list_arguments()"),
    "concat_values": "out = run(mx.sym.Concat(x, x * 2, dim=0))",
    "slice_axis": "out = mx.sym.slice_axis(x, axis=1, begin=0, end=2)",
    "slice_axis_end_none": "out = run(mx.sym.slice_axis(x, axis=1, begin=1, end=None))",
    "slice_axis_3d": "out = mx.sym.slice_axis(y, axis=2, begin=1, end=3).infer_shape()[1]",
    "leaky_relu": "out = run(mx.sym.LeakyReLU(x, act_type='leaky', slope=0.1))",
    "leaky_relu_default": "out = run(mx.sym.LeakyReLU(data=x))",
    "elu": "out = run(mx.sym.LeakyReLU(x, act_type='elu', slope=0.5))",
    "prelu_arguments": "out = mx.sym.LeakyReLU(x, act_type='prelu', name='p')",
    "embedding_shapes": ("e = mx.sym.Embedding(x, input_dim=10, output_dim=4, name='emb')\n"
                         "arg, o, _ = e.infer_shape(x=(2, 3))\n"
                         "out = [sorted(e.list_arguments()), "
                         "sorted(zip(e.list_arguments(), arg)), o]"),
    "embedding_values": ("e = mx.sym.Embedding(mx.sym.var('i'), input_dim=4, output_dim=2, "
                         "name='emb')\n"
                         "w = mx.nd.array(np.arange(8).reshape(4, 2))\n"
                         "out = e.eval(i=mx.nd.array([[0, 3], [2, 2]]), emb_weight=w)[0]"),
    "block_grad": "out = mx.sym.BlockGrad(x)",
    "block_grad_values": "out = run(mx.sym.BlockGrad(x * 2))",
    "stop_gradient": "out = run(mx.sym.stop_gradient(x))",
    "make_loss": "out = mx.sym.MakeLoss(x)",
    "make_loss_values": "out = run(mx.sym.MakeLoss(mx.sym.square(x)))",
    "slice_channel": "out = mx.sym.SliceChannel(x, num_outputs=3, axis=1)",
    "slice_channel_count": "out = len(mx.sym.SliceChannel(x, num_outputs=3, axis=1))",
    "slice_channel_outputs": ("out = mx.sym.SliceChannel(x, num_outputs=3, axis=1, "
                              "name='sc').list_outputs()"),
    "split_default_axis": "out = mx.sym.split(x, num_outputs=3)",
    "split_squeeze": "out = mx.sym.split(x, num_outputs=2, axis=0, squeeze_axis=True)",
    "expand_dims": "out = mx.sym.expand_dims(x, axis=1)",
    "squeeze_axis": "out = mx.sym.squeeze(mx.sym.expand_dims(x, axis=0), axis=0)",
    "cast_numpy_dtype": "out = mx.sym.Cast(x, dtype=np.float16)",
    "cast_values": "out = run(mx.sym.Cast(x, dtype='int32'))",
    "add_n": "out = run(mx.sym.add_n(x, x, x))",
    "element_wise_sum": "out = mx.sym.ElementWiseSum(x, x)",
    "stack": "out = mx.sym.stack(x, x, axis=1)",
    "where_float_condition": "out = run(mx.sym.where(x > 0, x, x * 10))",
    "argmax_axis": "out = run(mx.sym.argmax(x, axis=1))",
    "argmax_keepdims": "out = mx.sym.argmax(x, axis=0, keepdims=True)",
    "round_halves": ("out = mx.sym.round(mx.sym.var('h')).eval("
                     "h=mx.nd.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]))[0]"),
    "pad": ("out = mx.sym.pad(mx.sym.var('z', shape=(1, 1, 2, 2)), mode='constant', "
            "pad_width=(0, 0, 0, 0, 1, 1, 2, 0), constant_value=5).infer_shape()[1]"),
    "maximum_scalar": "out = run(mx.sym.maximum(x, 1))",
    "minimum_scalar_left": "out = run(mx.sym.minimum(0, x))",
    "maximum_symbols": "out = run(mx.sym.maximum(x, x * -1))",
    "power_scalar": "out = run(mx.sym.power(x, 2))",
    "broadcast_add": "out = mx.sym.broadcast_add(x, mx.sym.sum(x, axis=1, keepdims=True))",
    "elemwise_mul_values": "out = run(mx.sym.elemwise_mul(x, x))",
    "fully_connected_auto_weight": ("out = mx.sym.Convolution(mx.sym.var('img'), kernel=(3, 3),"
                                    " num_filter=4, pad=(1, 1), name='c')"
                                    ".infer_shape(img=(1, 2, 5, 5))"),
    "deconvolution_no_bias_default": ("out = mx.sym.Deconvolution(mx.sym.var('img'), "
                                      "kernel=(2, 2), num_filter=3, name='d').list_arguments()"),
    "auto_created_rhs": "out = mx.sym.dot(x, name='dd').list_arguments()",
}

CREATION = {
    "zeros": "out = mx.sym.zeros((2, 3)).eval()[0]",
    "zeros_int_shape": "out = mx.sym.zeros(4).eval()[0]",
    "ones_dtype": "out = mx.sym.ones((2, 2), dtype='int32').eval()[0]",
    "full": "out = mx.sym.full((2, 2), 7).eval()[0]",
    "zeros_arguments": "out = mx.sym.zeros((2, 3)).list_arguments()",
    "arange": "out = mx.sym.arange(0, 5, 2).eval()[0]",
    "arange_stop_only": "out = mx.sym.arange(4).eval()[0]",
    "arange_repeat": "out = mx.sym.arange(3, repeat=2).eval()[0]",
    "arange_dtype": "out = mx.sym.arange(1, 3, 0.5, dtype='float64').eval()[0]",
    "zeros_plus_x": "out = run(x + mx.sym.zeros((2, 3)))",
}

REDUCTIONS = {
    "sum_axis": "out = mx.sym.sum(x, axis=1)",
    "sum_axis_3d": "out = mx.sym.sum(y, axis=1).infer_shape()[1]",
    "sum_positional_axis": "out = mx.sym.sum(y, 2).infer_shape()[1]",
    "mean_all": "out = mx.sym.mean(x)",
    "mean_all_3d": "out = mx.sym.mean(y).infer_shape()[1]",
    "mean_keepdims": "out = mx.sym.mean(x, axis=0, keepdims=True)",
    "max_axis": "out = run(mx.sym.max(x, axis=0))",
    "min_axis_tuple": "out = mx.sym.min(y, axis=(0, 2)).infer_shape()[1]",
    "min_values": "out = run(mx.sym.min(x, axis=1))",
    "prod": "out = run(mx.sym.prod(x, axis=1))",
    "norm": "out = run(mx.sym.norm(x))",
    "sum_values": "out = run(mx.sym.sum(x))",
    "sum_axis_alias": "out = run(mx.sym.sum_axis(x, axis=0))",
}

RESHAPE = {
    "minus1_0": "out = mx.sym.reshape(y, shape=(-1, 0)).infer_shape()[1]",
    "minus3_0": "out = mx.sym.reshape(y, shape=(-3, 0)).infer_shape()[1]",
    "minus2": "out = mx.sym.reshape(y, shape=(-2, 1)).infer_shape()[1]",
    "minus3_minus2": "out = mx.sym.reshape(y, shape=(-3, -2)).infer_shape()[1]",
    "minus4": "out = mx.sym.reshape(y, shape=(-4, 1, -1, -2)).infer_shape()[1]",
    "reverse": "out = mx.sym.reshape(y, shape=(-1, 0), reverse=True).infer_shape()[1]",
    "class_name": "out = mx.sym.Reshape(y, shape=(0, -1)).infer_shape()[1]",
    "values": "out = run(mx.sym.reshape(x, shape=(-1,)))",
    "positional_shape": "out = mx.sym.reshape(x, (3, -1))",
    "data_keyword": "out = mx.sym.reshape(data=x, shape=(0, 3, 1))",
}

COMPOSITION = {
    "compose_keyword": ("data = mx.sym.var('data')\n"
                        "net1 = mx.sym.FullyConnected(data=data, name='fc1', num_hidden=10)\n"
                        "data2 = mx.sym.var('data2')\n"
                        "net2 = mx.sym.FullyConnected(data=data2, name='fc2', num_hidden=5)\n"
                        "c = net2(data2=net1, name='composed')\n"
                        "out = [c.list_arguments(), c.list_outputs(), "
                        "c.infer_shape(data=(2, 7))[1]]"),
    "compose_expression": ("p = mx.sym.var('p'); q = mx.sym.var('q')\n"
                           "s = (p + q) * 2\n"
                           "c = s(q=x * 3)\n"
                           "out = [sorted(set(c.list_arguments())), "
                           "c.eval(p=mx.nd.ones((2, 3)), x=a)[0]]"),
    "compose_keeps_original": ("p = mx.sym.var('p'); q = mx.sym.var('q')\n"
                               "s = p * q\n"
                               "s(q=x)\n"
                               "out = s.list_arguments()"),
    "compose_name": ("p = mx.sym.var('p')\n"
                     "out = (p * 2)(p=x, name='doubled').list_outputs()"),
}

EXECUTION = {
    "bind_ctx": ("ex = (x * 2).bind(ctx=mx.cpu(), args={'x': a})\n"
                 "out = ex.forward()[0]"),
    "bind_ctx_positional": ("ex = (x + 1).bind(mx.cpu(), {'x': a})\n"
                            "out = ex.forward()[0]"),
    "simple_bind_ctx": ("ex = (x * mx.sym.var('w')).simple_bind(ctx=mx.cpu(), x=(2, 3), "
                        "w=(2, 3))\n"
                        "out = [sorted(ex.arg_dict), sorted(ex.grad_dict), "
                        "ex.arg_dict['w'].shape]"),
    "eval_ctx": "out = (x * 3).eval(ctx=mx.cpu(), x=a)[0]",
}

ATTRIBUTES = {
    "lr_mult_attr": "out = mx.sym.var('w', lr_mult=2.0).attr('__lr_mult__')",
    "lr_mult_bare_attr": "out = mx.sym.var('w', lr_mult=2.0).attr('lr_mult')",
    "var_list_attr": ("out = mx.sym.var('w', lr_mult=2.0, wd_mult=0.5, shape=(2, 3), "
                      "dtype='float16').list_attr()"),
    "var_init_attr": "out = mx.sym.var('w', init=mx.init.Zero()).attr('__init__')",
    "var_attr_dict_argument": "out = mx.sym.var('w', attr={'a': 'b'}).list_attr()",
    "var_hidden_key_argument": "out = mx.sym.var('w', attr={'lr_mult': '3'}).list_attr()",
    "var_dunder_keyword": "out = mx.sym.var('w', __foo__=3).list_attr()",
    "var_no_attr": "out = mx.sym.var('w').attr('__lr_mult__')",
    "var_attr_dict": "out = mx.sym.var('w', lr_mult=2.0).attr_dict()",
    "op_list_attr": "out = mx.sym.sum(x, axis=1).list_attr()",
    "op_list_attr_tuple": "out = mx.sym.sum(x, axis=(1,)).list_attr()",
    "op_list_attr_bool": "out = mx.sym.dot(x, x, transpose_b=True).list_attr()",
    "op_list_attr_dtype": "out = mx.sym.Cast(x, dtype=np.float16).list_attr()",
    "op_attr": "out = mx.sym.slice_axis(x, axis=1, begin=0, end=2).attr('begin')",
    "op_user_attr": ("out = mx.sym.Concat(x, x, dim=0, name='c', "
                     "attr={'ctx_group': 'g'}).list_attr()"),
    "zeros_list_attr": "out = mx.sym.zeros((2, 3)).list_attr()",
    "group_list_attr": "out = mx.sym.Group([x, y]).attr_dict()",
}

# infer_type without shapes: each op's dtype rule, unified as MXNet does (weights from data,
# data from weights, a BatchNorm's float32 parameters for float16 data); dtype names compared.
_FC = "fc = mx.sym.FullyConnected(data=mx.sym.var('d'), num_hidden=3, name='fc')\n"
_NAMES = "[[np.dtype(t).name for t in part] for part in "
INFER_TYPE = {
    "fc_float32": _FC + "out = " + _NAMES + "fc.infer_type(d='float32')]",
    "fc_float16": _FC + "out = " + _NAMES + "fc.infer_type(d='float16')]",
    "fc_from_weight": _FC + "out = " + _NAMES + "fc.infer_type(fc_weight='float16')]",
    "fc_nothing_known": _FC + "out = fc.infer_type()",
    "fc_partial": _FC + "out = [[None if t is None else np.dtype(t).name for t in part] "
                        "for part in fc.infer_type_partial()]",
    "fc_numpy_type": _FC + "out = " + _NAMES + "fc.infer_type(d=np.float16)]",
    "fc_conflict": (_FC + "try:\n    fc.infer_type(d='float16', fc_weight='float32')\n"
                    "    out = 'no error'\nexcept Exception:\n    out = 'error'"),
    "convolution": ("s = mx.sym.Convolution(mx.sym.var('d'), kernel=(3, 3), num_filter=4, "
                    "name='conv')\nout = " + _NAMES + "s.infer_type(d='float16')]"),
    "batchnorm_float16": ("s = mx.sym.BatchNorm(mx.sym.var('d'), name='bn')\n"
                          "out = [s.list_auxiliary_states(), " + _NAMES
                          + "s.infer_type(d='float16')]]"),
    "batchnorm_float64": ("s = mx.sym.BatchNorm(mx.sym.var('d'), name='bn')\n"
                          "out = " + _NAMES + "s.infer_type(d='float64')]"),
    "cast": ("s = mx.sym.Cast(mx.sym.var('d'), dtype='int32')\n"
             "out = " + _NAMES + "s.infer_type(d='float16')]"),
    "cast_then_add": ("d = mx.sym.var('d')\n"
                      "s = mx.sym.Cast(d, dtype='float64') + mx.sym.var('e')\n"
                      "out = [s.list_arguments(), " + _NAMES + "s.infer_type(d='float16')]]"),
    "mlp_softmax_output": (
        "h = mx.sym.Activation(mx.sym.FullyConnected(mx.sym.var('d'), num_hidden=8, "
        "name='fc1'), act_type='relu')\n"
        "s = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(h, num_hidden=4, name='fc2'), "
        "name='softmax')\n"
        "out = [s.list_arguments(), " + _NAMES + "s.infer_type(d='float16')]]"),
    "add_variables": ("s = mx.sym.var('a') + mx.sym.var('b')\n"
                      "out = " + _NAMES + "s.infer_type(b='float64')]"),
    "scalar_operand": ("s = mx.sym.relu(mx.sym.var('d')) * 2.0\n"
                       "out = " + _NAMES + "s.infer_type(d='float16')]"),
    "pooling": ("s = mx.sym.Pooling(mx.sym.var('d'), kernel=(2, 2), pool_type='max')\n"
                "out = " + _NAMES + "s.infer_type(d='float16')]"),
    "declared_dtype": ("s = mx.sym.FullyConnected(mx.sym.var('d', dtype='float16'), "
                       "num_hidden=2, name='fc')\nout = " + _NAMES + "s.infer_type()]"),
}

SETS = {"sym_functions": FUNCTIONS, "sym_creation": CREATION, "sym_reductions": REDUCTIONS,
        "sym_reshape": RESHAPE, "sym_composition": COMPOSITION, "sym_execution": EXECUTION,
        "sym_attributes": ATTRIBUTES, "sym_infer_type": INFER_TYPE}
