"""MXNet 1.x data iterators (``mx.io``) and loss-output ops (``SoftmaxOutput``, the regression
outputs): batches, pads, roll-over, names and dtypes, forward values and the gradients backward
gives without a head gradient. Recorded from MXNet 1.9.1 by ``record_mxnet.py``."""

SETUP = ("import numpy as np\n"
         "x = np.arange(20, dtype=np.float32).reshape(10, 2)\n"
         "y = np.arange(10, dtype=np.float32)\n"
         "def batches(it):\n"
         "    return [[b.data[0], b.label[0] if b.label else None, b.pad] for b in it]\n"
         "scores = mx.nd.array([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0], [2.0, 2.0, 2.0],"
         " [0.3, 0.2, 0.1]])\n"
         "labels = mx.nd.array([1, 2, 0, 2])\n"
         "def grad_of(op, data, label, **kw):\n"
         "    data = data.copy(); data.attach_grad()\n"
         "    with mx.autograd.record():\n"
         "        out = op(data, label, **kw)\n"
         "    out.backward()\n"
         "    return [out, data.grad]\n"
         "def bound_grad(net, **arrays):\n"
         "    exe = net.simple_bind(mx.cpu(), **{k: v.shape for k, v in arrays.items()})\n"
         "    for k, v in arrays.items(): exe.arg_dict[k][:] = v\n"
         "    exe.forward(is_train=True); exe.backward()\n"
         "    return [exe.outputs[0], exe.grad_dict['data']]\n"
         # CSVIter / MNISTIter read files written first (MNIST's IDX header by hand)
         "def files():\n"
         "    import os, struct, tempfile\n"
         "    folder = tempfile.mkdtemp()\n"
         "    csv_x = os.path.join(folder, 'x.csv'); csv_y = os.path.join(folder, 'y.csv')\n"
         "    np.savetxt(csv_x, np.arange(15).reshape(5, 3), delimiter=',')\n"
         "    np.savetxt(csv_y, np.arange(5) % 2, delimiter=',')\n"
         "    images = os.path.join(folder, 'img-idx3-ubyte')\n"
         "    labels = os.path.join(folder, 'lab-idx1-ubyte')\n"
         "    with open(images, 'wb') as f:\n"
         "        f.write(struct.pack('>BBBBIII', 0, 0, 8, 3, 5, 2, 2) + "
         "bytes(range(0, 200, 10)))\n"
         "    with open(labels, 'wb') as f:\n"
         "        f.write(struct.pack('>BBBBI', 0, 0, 8, 1, 5) + bytes([3, 1, 4, 1, 5]))\n"
         "    return csv_x, csv_y, images, labels\n")

ITERATORS = {
    "pad_batches": "out = batches(mx.io.NDArrayIter(x, y, batch_size=4))",
    "pad_more_than_data": "out = batches(mx.io.NDArrayIter(x[:3], y[:3], batch_size=8))",
    "discard_batches": ("out = batches(mx.io.NDArrayIter(x, y, batch_size=4, "
                        "last_batch_handle='discard'))"),
    "roll_over_two_epochs": ("it = mx.io.NDArrayIter(x, y, batch_size=4, "
                             "last_batch_handle='roll_over')\n"
                             "out = batches(it); it.reset(); out += batches(it)"),
    "reset_pad": ("it = mx.io.NDArrayIter(x, y, batch_size=4)\n"
                  "out = batches(it); it.reset(); out += batches(it)"),
    "no_label": "out = batches(mx.io.NDArrayIter(x, batch_size=5))",
    "provide_data": ("it = mx.io.NDArrayIter(x, y, batch_size=4)\n"
                     "out = [[d.name, list(d.shape), np.dtype(d.dtype).name, d.layout] "
                     "for d in it.provide_data + it.provide_label]"),
    "dict_and_list_names": ("it = mx.io.NDArrayIter({'b': x, 'a': x}, [y, y], batch_size=5)\n"
                            "out = [d.name for d in it.provide_data + it.provide_label]"),
    "custom_names": ("it = mx.io.NDArrayIter(x, y, batch_size=5, data_name='img', "
                     "label_name='lab')\nout = [d.name for d in it.provide_data + "
                     "it.provide_label]"),
    "int_ndarray_kept": ("it = mx.io.NDArrayIter(mx.nd.array(x, dtype='int32'), "
                         "batch_size=5)\nout = next(it).data[0]"),
    "numpy_int_becomes_float32": ("out = next(mx.io.NDArrayIter(x.astype(np.int64), "
                                  "batch_size=5)).data[0]"),
    "shuffled_is_a_permutation": ("np.random.seed(0)\n"
                                  "it = mx.io.NDArrayIter(x, y, batch_size=5, shuffle=True)\n"
                                  "b = batches(it)\n"
                                  "out = [sorted(np.concatenate([r[1].asnumpy() for r in b])"
                                  ".tolist()), np.dtype(b[0][0].dtype).name]"),
    "next_and_iter_next": ("it = mx.io.NDArrayIter(x, y, batch_size=4)\n"
                           "out = [it.iter_next(), it.getpad(), it.getdata()[0], "
                           "it.getlabel()[0], it.getindex()]"),
    "batch_fields": ("b = mx.io.DataBatch(data=[mx.nd.ones((2, 3))], label=[mx.nd.zeros((2,))],"
                     " pad=1)\nout = [b.pad, b.index, b.bucket_key, b.provide_data, str(b)]"),
    "data_desc": ("d = mx.io.DataDesc('data', (4, 3))\n"
                  "out = [d.name, list(d.shape), np.dtype(d.dtype).name, d.layout, "
                  "mx.io.DataDesc.get_batch_axis('TNC'), d[0], list(d[1])]"),
    "data_desc_get_list": ("out = [[d.name, np.dtype(d.dtype).name] for d in "
                           "mx.io.DataDesc.get_list([('a', (1,)), ('b', (2,))], "
                           "[('a', np.int32), ('b', np.float16)])]"),
    "resize_iter": ("it = mx.io.ResizeIter(mx.io.NDArrayIter(x, y, batch_size=4), 5)\n"
                    "out = batches(it)"),
    "prefetching_iter": ("it = mx.io.PrefetchingIter(mx.io.NDArrayIter(x, y, batch_size=4))\n"
                         "out = batches(it) + [[d.name for d in it.provide_data]]"),
}

OUTPUTS = {
    "softmax_output_forward": "out = mx.nd.SoftmaxOutput(scores, labels)",
    "softmax_output_grad": "out = grad_of(mx.nd.SoftmaxOutput, scores, labels)",
    "softmax_output_grad_scale_batch": ("out = grad_of(mx.nd.SoftmaxOutput, scores, labels, "
                                        "grad_scale=2.0, normalization='batch')"),
    "softmax_output_ignore_valid": ("out = grad_of(mx.nd.SoftmaxOutput, scores, labels, "
                                    "use_ignore=True, ignore_label=2, normalization='valid')"),
    "softmax_output_probability_label": ("out = grad_of(mx.nd.SoftmaxOutput, scores, "
                                         "mx.nd.softmax(scores * 0.5))"),
    "softmax_output_multi_output": (
        "d = mx.nd.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10)\n"
        "l = mx.nd.array([[0, 1, 2, 1], [2, 2, 0, 0]])\n"
        "out = grad_of(mx.nd.SoftmaxOutput, d, l, multi_output=True, normalization='batch')"),
    "softmax_output_preserve_shape": (
        "d = mx.nd.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10)\n"
        "l = mx.nd.array([[0, 1, 2], [3, 3, 0]])\n"
        "out = grad_of(mx.nd.SoftmaxOutput, d, l, preserve_shape=True)"),
    "softmax_output_smooth_alpha": ("out = grad_of(mx.nd.SoftmaxOutput, scores, labels, "
                                    "smooth_alpha=0.1)"),
    "softmax_output_out_grad": ("s = scores.copy(); s.attach_grad()\n"
                                "with mx.autograd.record():\n"
                                "    o = mx.nd.SoftmaxOutput(s, labels, out_grad=True)\n"
                                "o.backward(mx.nd.ones_like(o) * 3)\nout = s.grad"),
    "linear_regression": ("out = grad_of(mx.nd.LinearRegressionOutput, scores, "
                          "mx.nd.ones((4, 3)), grad_scale=2.0)"),
    "logistic_regression": ("out = grad_of(mx.nd.LogisticRegressionOutput, scores, "
                            "mx.nd.ones((4, 3)))"),
    "mae_regression": "out = grad_of(mx.nd.MAERegressionOutput, scores, mx.nd.ones((4, 3)))",
    "regression_column_label": ("out = grad_of(mx.nd.LinearRegressionOutput, scores[:, 0:1], "
                                "mx.nd.array([1, 2, 3, 4]))"),
    "sym_softmax_output_label_variable": (
        "net = mx.sym.SoftmaxOutput(data=mx.sym.var('data'), name='softmax')\n"
        "out = [net.list_arguments(), net.list_outputs(), "
        "[list(s) for s in net.infer_shape(data=(4, 3))[0]]]"),
    "sym_softmax_output_bound_backward": (
        "net = mx.sym.SoftmaxOutput(data=mx.sym.var('data'), name='softmax')\n"
        "out = bound_grad(net, data=scores, softmax_label=labels)"),
    "sym_regression_label_variables": (
        "d = mx.sym.var('data')\n"
        "out = [mx.sym.LinearRegressionOutput(d, name='lro').list_arguments(),\n"
        "       mx.sym.LogisticRegressionOutput(d, name='lgo').list_arguments(),\n"
        "       mx.sym.MAERegressionOutput(d, name='mae').list_arguments(),\n"
        "       [list(s) for s in mx.sym.LinearRegressionOutput(d, name='r')"
        ".infer_shape(data=(5, 1))[0]]]"),
    "sym_logistic_bound_backward": (
        "net = mx.sym.LogisticRegressionOutput(data=mx.sym.var('data'), name='lr')\n"
        "out = bound_grad(net, data=scores, lr_label=mx.nd.ones((4, 3)) * 0.5)"),
}

FILES = {
    "csv_round_batch": ("csv_x, csv_y, _, _ = files()\n"
                        "it = mx.io.CSVIter(data_csv=csv_x, data_shape=(3,), label_csv=csv_y, "
                        "batch_size=2)\nout = batches(it); it.reset(); out += batches(it)"),
    "csv_no_label_shape": ("csv_x, _, _, _ = files()\n"
                           "it = mx.io.CSVIter(data_csv=csv_x, data_shape=(1, 3), "
                           "batch_size=5)\nout = batches(it) + "
                           "[[[d.name, list(d.shape)] for d in it.provide_data + "
                           "it.provide_label]]"),
    "mnist_unshuffled": ("_, _, images, labels = files()\n"
                         "it = mx.io.MNISTIter(image=images, label=labels, batch_size=2, "
                         "shuffle=False)\nout = batches(it)"),
    "mnist_flat": ("_, _, images, labels = files()\n"
                   "it = mx.io.MNISTIter(image=images, label=labels, batch_size=5, "
                   "shuffle=False, flat=True)\nout = batches(it)"),
}

SETS = {"io_iterators": ITERATORS, "io_loss_outputs": OUTPUTS, "io_file_iterators": FILES}

