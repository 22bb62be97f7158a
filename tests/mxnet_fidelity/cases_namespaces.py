"""MXNet 1.x's small namespaces: metric values on fixed data, learning-rate schedules, symbol
name prefixes, context strings, initializer values and statistics, print_summary's table."""
from __future__ import annotations

SETUP = ("import numpy as np\n"
         "labels = [mx.nd.array([0, 1, 1, 0, 1]), mx.nd.array([1, 0, 1])]\n"
         "scores = [mx.nd.array([[.7, .3], [.2, .8], [.6, .4], [.9, .1], [.3, .7]]),\n"
         "          mx.nd.array([[.4, .6], [.3, .7], [.1, .9]])]\n"
         "def run(metric, lab=labels, pred=scores):\n"
         "    for l, p in zip(lab, pred):\n"
         "        metric.update([l], [p])\n"
         "    return list(metric.get())\n"
         "reg_l = [mx.nd.array([[1., 2.], [3., 4.]]), mx.nd.array([0.5, -1., 2.])]\n"
         "reg_p = [mx.nd.array([[1.5, 2.], [2., 5.]]), mx.nd.array([0., -1., 3.])]\n"
         "def lrs(s, steps=(0, 1, 2, 5, 9, 10, 11, 15, 20, 25, 30, 40, 50)):\n"
         "    return [s(n) for n in steps]\n")

METRICS = {
    "accuracy": "out = run(mx.metric.Accuracy())",
    "accuracy_create": "out = run(mx.metric.create('acc'))",
    "top_k": ("p = mx.nd.array([[.1, .5, .4], [.3, .3, .4], [.6, .1, .3], [.2, .7, .1]])\n"
              "out = run(mx.metric.TopKAccuracy(top_k=2), [mx.nd.array([2, 0, 1, 1])], [p])"),
    "f1_macro": "out = run(mx.metric.F1())",
    "f1_micro": "out = run(mx.metric.F1(average='micro'))",
    "mcc_macro": "out = run(mx.metric.MCC())",
    "mcc_micro": "out = run(mx.metric.MCC(average='micro'))",
    "cross_entropy": "out = run(mx.metric.CrossEntropy())",
    "nll": "out = run(mx.metric.create('nll_loss'))",
    "perplexity": "out = run(mx.metric.Perplexity(ignore_label=None))",
    "perplexity_ignore": "out = run(mx.metric.Perplexity(ignore_label=1))",
    "mae": "out = run(mx.metric.MAE(), reg_l, reg_p)",
    "mse": "out = run(mx.metric.MSE(), reg_l, reg_p)",
    "rmse": "out = run(mx.metric.RMSE(), reg_l, reg_p)",
    "pearson_macro": "out = run(mx.metric.PearsonCorrelation(), reg_l, reg_p)",
    "pearson_micro": "out = run(mx.metric.PearsonCorrelation(average='micro'), reg_l, reg_p)",
    "loss": "out = run(mx.metric.Loss(), reg_l, reg_p)",
    "composite": ("m = mx.metric.create(['acc', 'f1', 'ce'])\n"
                  "run(m)\n"
                  "out = [m.get(), m.get_name_value()]"),
    "update_lists": ("m = mx.metric.Accuracy()\n"
                     "m.update(labels, scores)\n"
                     "out = list(m.get())"),
    "update_dict": ("m = mx.metric.Accuracy(output_names=['b'], label_names=['y'])\n"
                    "m.update_dict({'y': labels[0], 'z': labels[1]}, {'a': scores[1], "
                    "'b': scores[0]})\n"
                    "out = list(m.get())"),
    "reset_nan": ("m = mx.metric.Accuracy()\n"
                  "run(m)\n"
                  "m.reset()\n"
                  "out = [m.get()[0], bool(np.isnan(m.get()[1]))]"),
    "reset_local_keeps_global": ("m = mx.metric.MAE()\n"
                                 "run(m, reg_l, reg_p)\n"
                                 "m.reset_local()\n"
                                 "m.update([reg_l[0]], [reg_p[0]])\n"
                                 "out = [list(m.get()), list(m.get_global())]"),
    "custom_lambda": ("m = mx.metric.CustomMetric(lambda l, p: float((l == p.argmax(1)).sum()))\n"
                      "out = run(m)"),
    "custom_tuple": ("def hits(l, p):\n"
                     "    return float((l == p.argmax(1)).sum()), len(l)\n"
                     "out = run(mx.metric.create(hits))"),
    "np_metric": ("def l1(l, p):\n"
                  "    return float(np.abs(l - p[:, 1]).mean())\n"
                  "out = run(mx.metric.np(l1))"),
    "str": "m = mx.metric.MSE()\nrun(m, reg_l, reg_p)\nout = str(m)",
    "config": "out = mx.metric.Accuracy(axis=0).get_config()",
}

SCHEDULERS = {
    "factor": "out = lrs(mx.lr_scheduler.FactorScheduler(step=10, factor=0.5, base_lr=1.0))",
    "factor_floor": ("out = lrs(mx.lr_scheduler.FactorScheduler(5, 0.1, 1e-3, 1.0))"),
    "factor_warmup": ("out = lrs(mx.lr_scheduler.FactorScheduler(step=10, factor=0.5, "
                      "base_lr=1.0, warmup_steps=5, warmup_begin_lr=0.1))"),
    "multi_factor": ("out = lrs(mx.lr_scheduler.MultiFactorScheduler(step=[5, 10, 30], "
                     "factor=0.1, base_lr=2.0))"),
    "multi_factor_warmup_constant": (
        "out = lrs(mx.lr_scheduler.MultiFactorScheduler([5, 20], 0.5, 1.0, 3, 0.2, "
        "'constant'))"),
    "poly": "out = lrs(mx.lr_scheduler.PolyScheduler(max_update=40, base_lr=1.0, pwr=2))",
    "poly_warmup_final": ("out = lrs(mx.lr_scheduler.PolyScheduler(40, 0.5, 1, 0.01, "
                          "warmup_steps=10))"),
    "cosine": "out = lrs(mx.lr_scheduler.CosineScheduler(max_update=30, base_lr=1.0))",
    "cosine_warmup": ("out = lrs(mx.lr_scheduler.CosineScheduler(max_update=40, base_lr=0.8, "
                      "final_lr=0.1, warmup_steps=10, warmup_begin_lr=0.2))"),
}

NAMES = {
    "prefix_fc": ("data = mx.sym.var('data')\n"
                  "with mx.name.Prefix('mynet_'):\n"
                  "    net = mx.sym.FullyConnected(data, num_hidden=10, name='fc1')\n"
                  "out = net.list_arguments()"),
    "prefix_auto_names": ("data = mx.sym.var('data')\n"
                          "with mx.name.Prefix('p_'):\n"
                          "    a = mx.sym.FullyConnected(data, num_hidden=4)\n"
                          "    b = mx.sym.Activation(a, act_type='relu')\n"
                          "    c = mx.sym.FullyConnected(b, num_hidden=2)\n"
                          "out = [a.name, b.name, c.name, c.list_arguments()]"),
    "name_manager_restarts_counts": ("data = mx.sym.var('data')\n"
                                     "with mx.name.NameManager():\n"
                                     "    a = mx.sym.FullyConnected(data, num_hidden=4)\n"
                                     "    b = mx.sym.FullyConnected(a, num_hidden=4)\n"
                                     "out = [a.name, b.name]"),
    "manager_get": ("m = mx.name.Prefix('x_')\n"
                    "out = [m.get(None, 'conv'), m.get(None, 'conv'), m.get('mine', 'conv')]"),
}

CONTEXTS = {
    "strings": ("out = [str(mx.cpu()), str(mx.gpu(1)), repr(mx.cpu(2)), "
                "str(mx.context.cpu_pinned()), mx.gpu(3).device_type, mx.cpu().device_id]"),
    "equality": ("out = [mx.cpu() == mx.cpu(0), mx.cpu(0) == mx.cpu(1), "
                 "mx.gpu(0) == mx.cpu(0), mx.Context('gpu', 1) == mx.gpu(1), "
                 "mx.Context(mx.gpu(2)) == mx.gpu(2)]"),
    "current": ("before = str(mx.current_context())\n"
                "with mx.Context('cpu', 1):\n"
                "    inside = str(mx.current_context())\n"
                "out = [before, inside, str(mx.current_context())]"),
    "array_context": "out = [str(mx.nd.array([1]).context), mx.nd.zeros((1,)).context == mx.cpu()]",
    "typeid": ("out = [mx.context.cpu().device_typeid, mx.gpu().device_typeid, "
               "mx.context.cpu_pinned().device_typeid]"),
}

INITIALIZERS = {
    "zero_one_constant": ("ws = [mx.nd.empty((2, 3)) for _ in range(3)]\n"
                          "mx.init.Zero()('a_weight', ws[0]); mx.init.One()('b_weight', ws[1])\n"
                          "mx.init.Constant(0.5)('c_weight', ws[2])\n"
                          "out = ws"),
    "name_dispatch": ("init = mx.init.Uniform()\n"
                      "names = ['fc_bias', 'bn_gamma', 'bn_beta', 'bn_moving_mean', "
                      "'bn_moving_var', 'q_min', 'q_max']\n"
                      "arrs = [mx.nd.empty((3,)) for _ in names]\n"
                      "for n, a in zip(names, arrs):\n"
                      "    init(n, a)\n"
                      "out = arrs"),
    "bilinear": "w = mx.nd.empty((2, 1, 4, 4))\nmx.init.Bilinear()('up_weight', w)\nout = w",
    "bilinear_odd": "w = mx.nd.empty((1, 1, 3, 5))\nmx.init.Bilinear()('up_weight', w)\nout = w",
    "lstm_bias": "w = mx.nd.empty((8,))\nmx.init.LSTMBias(2.5)('lstm_weight', w)\nout = w",
    "orthogonal": ("w = mx.nd.empty((20, 50))\n"
                   "mx.init.Orthogonal(scale=2.0)('o_weight', w)\n"
                   "g = w.asnumpy() @ w.asnumpy().T\n"
                   "out = [w.shape, np.round(g, 3).astype('float32')]"),
    "orthogonal_tall": ("w = mx.nd.empty((30, 4, 2))\n"
                        "mx.init.Orthogonal(rand_type='normal')('o_weight', w)\n"
                        "v = w.asnumpy().reshape(30, 8)\n"
                        "out = np.round(v.T @ v, 3).astype('float32')"),
    "xavier_stats": (
        "out = []\n"
        "for kw, shape in [({}, (300, 200)), ({'factor_type': 'in'}, (200, 50, 3, 3)),\n"
        "                  ({'rnd_type': 'gaussian', 'factor_type': 'out', 'magnitude': 2},"
        " (400, 300)),\n"
        "                  ({'magnitude': 6}, (100, 500))]:\n"
        "    w = mx.nd.empty(shape)\n"
        "    mx.init.Xavier(**kw)('x_weight', w)\n"
        "    v = w.asnumpy()\n"
        "    top = None if kw.get('rnd_type') == 'gaussian' else round(float(np.abs(v).max()), 2)\n"
        "    out.append([top, round(float(v.std()), 2), round(float(v.mean()), 2)])"),
    "msra_stats": (
        "out = []\n"
        "for kw in [{}, {'factor_type': 'in', 'slope': 0.0}, {'factor_type': 'out', "
        "'slope': 1.0}]:\n"
        "    w = mx.nd.empty((200, 100, 3, 3))\n"
        "    mx.init.MSRAPrelu(**kw)('m_weight', w)\n"
        "    out.append(round(float(w.asnumpy().std()), 2))"),
    "uniform_normal_defaults": (
        "u, n = mx.nd.empty((500, 400)), mx.nd.empty((500, 400))\n"
        "mx.init.Uniform()('u_weight', u); mx.init.Normal()('n_weight', n)\n"
        "out = [round(float(u.asnumpy().max()), 2), round(float(u.asnumpy().min()), 2),\n"
        "       round(float(n.asnumpy().std()), 3)]"),
    "mixed": ("init = mx.init.Mixed(['.*bias', '.*'], [mx.init.One(), mx.init.Constant(3)])\n"
              "a, b = mx.nd.empty((2,)), mx.nd.empty((2,))\n"
              "init('fc_bias', a); init('fc_weight', b)\n"
              "out = [a, b]"),
    "load": ("init = mx.init.Load({'arg:fc_weight': mx.nd.array([[1, 2]])}, "
             "default_init=mx.init.Zero())\n"
             "a, b = mx.nd.empty((1, 2)), mx.nd.empty((2,))\n"
             "init('fc_weight', a); init('fc_bias', b)\n"
             "out = [a, b]"),
    "dumps": ("out = [mx.init.Normal(0.5).dumps(), mx.init.Uniform().dumps(), "
              "mx.init.Xavier(factor_type='in', magnitude=2.34).dumps(), "
              "mx.init.MSRAPrelu().dumps(), mx.init.Zero().dumps()]"),
}

# print_summary's text: the layer name, shape, param count and previous layer of every row, and
# the total (the type in parentheses is the ONNX op's where portable's layer is one).
SUMMARY_SETUP = (
    "import contextlib, io\n"
    "def summary(net, **kw):\n"
    "    text = io.StringIO()\n"
    "    with contextlib.redirect_stdout(text):\n"
    "        mx.viz.print_summary(net, **kw)\n"
    "    lines = text.getvalue().splitlines()\n"
    "    a, b, c = (int(len(lines[0]) * p) for p in (.44, .64, .74))\n"
    "    rows = [[l[:a].split('(')[0].strip(), l[a:b].strip(), l[b:c].strip(), "
    "l[c:].strip()] for l in lines if l and l[0] not in '_=' and not l.startswith(('Layer', "
    "'Total'))]\n"
    "    return [rows, [l for l in lines if l.startswith('Total')], len(lines[0])]\n"
    "data = mx.sym.var('data')\n"
    "conv = mx.sym.Convolution(data, kernel=(3, 3), num_filter=8, name='conv1')\n"
    "bn = mx.sym.BatchNorm(conv, name='bn1')\n"
    "act = mx.sym.Activation(bn, act_type='relu', name='relu1')\n"
    "pool = mx.sym.Pooling(act, kernel=(2, 2), stride=(2, 2), pool_type='max', name='pool1')\n"
    "fc = mx.sym.FullyConnected(pool, num_hidden=10, name='fc1')\n")

SUMMARIES = {
    "convnet_shapes": "out = summary(fc, shape={'data': (1, 3, 8, 8)})",
    "convnet_no_shapes": "out = summary(fc)",
    "mlp": ("h = mx.sym.FullyConnected(data, num_hidden=16, name='h1')\n"
            "h = mx.sym.Activation(h, act_type='tanh', name='t1')\n"
            "h = mx.sym.FullyConnected(h, num_hidden=4, no_bias=True, name='h2')\n"
            "out = summary(h, shape={'data': (2, 7)}, line_length=100)"),
    "grouped_conv_no_bias": (
        "c = mx.sym.Convolution(data, kernel=(3, 3), num_filter=6, num_group=2, no_bias=True, "
        "name='g1')\n"
        "out = summary(mx.sym.FullyConnected(c, num_hidden=3, name='o'), "
        "shape={'data': (1, 4, 5, 5)})"),
}

SETUP += SUMMARY_SETUP

SETS = {"ns_summaries": SUMMARIES, "ns_metrics": METRICS, "ns_lr_schedulers": SCHEDULERS,
        "ns_names": NAMES, "ns_contexts": CONTEXTS, "ns_initializers": INITIALIZERS}
