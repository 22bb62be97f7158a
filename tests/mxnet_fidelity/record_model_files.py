"""Record model files written by the real MXNet 1.9.1, with a fixed input and MXNet's output for
each, for ``test_mxnet_model_files.py`` (which reads them without MXNet):

- ``lenet``: a Gluon HybridSequential LeNet, hybridized and ``export``ed;
- ``resnet18``: MXNet's own ``ResNetV1(BasicBlockV1, [2, 2, 2, 2], [16, 16, 32, 64, 128])``
  (ResNet-18's topology at a quarter of the width) with BatchNorm running statistics moved by a
  few training-mode passes, ``export``ed;
- ``mlp``: a Module-API checkpoint (``save_checkpoint``) of a symbol MLP with a BatchNorm
  (the symbol default ``fix_gamma=True`` over a gamma that is not 1), Dropout and SoftmaxOutput;
- ``ops.json``: small graphs of one MXNet op each (Reshape codes, pooling conventions, scalar
  and broadcast ops...), with their inputs and MXNet's outputs.

For each ``<name>``: ``<name>-symbol.json``, ``<name>-0000.params``, ``<name>-input.npy``,
``<name>-output.npy`` and ``<name>-facts.json`` (arguments, auxiliary states, outputs and the
inferred shapes MXNet gives for the input). Run it with MXNet's interpreter:

    /tmp/mxvenv/bin/python tests/mxnet_fidelity/record_model_files.py \\
        tests/mxnet_fidelity/fixtures/model_files
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np


def _seed(mx, seed: int) -> None:
    mx.random.seed(seed)
    np.random.seed(seed)


def _save_io(folder: str, name: str, x: np.ndarray, y: np.ndarray, symbol, shapes) -> None:
    np.save(os.path.join(folder, f"{name}-input.npy"), x, allow_pickle=False)
    np.save(os.path.join(folder, f"{name}-output.npy"), y, allow_pickle=False)
    arg_shapes, out_shapes, aux_shapes = symbol.infer_shape(**shapes)
    facts = {"arguments": symbol.list_arguments(),
             "auxiliary_states": symbol.list_auxiliary_states(),
             "outputs": symbol.list_outputs(),
             "input_shapes": {k: list(v) for k, v in shapes.items()},
             "arg_shapes": [list(s) for s in arg_shapes],
             "out_shapes": [list(s) for s in out_shapes],
             "aux_shapes": [list(s) for s in aux_shapes]}
    with open(os.path.join(folder, f"{name}-facts.json"), "w") as handle:
        json.dump(facts, handle, indent=1, sort_keys=True)


def record_lenet(mx, folder: str) -> None:
    _seed(mx, 1)
    nn = mx.gluon.nn
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(6, 5, activation="relu"), nn.MaxPool2D(),
                nn.Conv2D(16, 5, activation="relu"), nn.MaxPool2D(),
                nn.Dense(120, activation="relu"), nn.Dense(84, activation="relu"), nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = np.random.uniform(-1, 1, (2, 1, 28, 28)).astype(np.float32)
    y = net(mx.nd.array(x)).asnumpy()
    net.export(os.path.join(folder, "lenet"))
    symbol = mx.sym.load(os.path.join(folder, "lenet-symbol.json"))
    _save_io(folder, "lenet", x, y, symbol, {"data": x.shape})


def record_resnet(mx, folder: str) -> None:
    _seed(mx, 2)
    vision = mx.gluon.model_zoo.vision
    net = vision.ResNetV1(vision.BasicBlockV1, [2, 2, 2, 2], [16, 16, 32, 64, 128], classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    for _ in range(3):  # training-mode passes move the running statistics off 0 and 1
        with mx.autograd.record():
            net(mx.nd.array(np.random.normal(0.5, 2.0, (4, 3, 64, 64)).astype(np.float32)))
    x = np.random.uniform(-1, 1, (2, 3, 64, 64)).astype(np.float32)
    y = net(mx.nd.array(x)).asnumpy()
    net.export(os.path.join(folder, "resnet18"))
    symbol = mx.sym.load(os.path.join(folder, "resnet18-symbol.json"))
    _save_io(folder, "resnet18", x, y, symbol, {"data": x.shape})


def record_module(mx, folder: str) -> None:
    _seed(mx, 3)
    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=32, name="fc1")
    net = mx.sym.BatchNorm(net, name="bn1")  # fix_gamma=True by default: gamma is taken as 1
    net = mx.sym.Activation(net, act_type="relu", name="relu1")
    net = mx.sym.Dropout(net, p=0.3, name="drop1")
    net = mx.sym.FullyConnected(net, num_hidden=10, name="fc2")
    net = mx.sym.SoftmaxOutput(net, name="softmax")
    mod = mx.mod.Module(net, data_names=["data"], label_names=["softmax_label"],
                        context=mx.cpu())
    mod.bind(data_shapes=[("data", (4, 20))], label_shapes=[("softmax_label", (4,))],
             for_training=False)
    mod.init_params(mx.init.Xavier())
    args, aux = mod.get_params()
    args["bn1_gamma"] = mx.nd.array(np.random.uniform(0.5, 2.0, (32,)))
    args["bn1_beta"] = mx.nd.array(np.random.uniform(-0.5, 0.5, (32,)))
    aux["bn1_moving_mean"] = mx.nd.array(np.random.uniform(-0.5, 0.5, (32,)))
    aux["bn1_moving_var"] = mx.nd.array(np.random.uniform(0.5, 2.0, (32,)))
    mod.set_params(args, aux)
    x = np.random.uniform(-1, 1, (4, 20)).astype(np.float32)
    mod.forward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.zeros((4,))]), is_train=False)
    y = mod.get_outputs()[0].asnumpy()
    prefix = os.path.join(folder, "mlp")
    mod.save_checkpoint(prefix, 0)
    symbol = mx.sym.load(f"{prefix}-symbol.json")
    # The same files through Gluon give the same answer (the label is an input there).
    block = mx.gluon.SymbolBlock.imports(f"{prefix}-symbol.json", ["data", "softmax_label"],
                                         f"{prefix}-0000.params")
    again = block(mx.nd.array(x), mx.nd.zeros((4,))).asnumpy()
    assert np.abs(again - y).max() < 1e-6, "Module and SymbolBlock disagree"
    _save_io(folder, "mlp", x, y, symbol, {"data": x.shape, "softmax_label": (4,)})


def _op_cases(mx) -> dict:
    """name -> (symbol over variables x (and y), {input: shape}): one MXNet op each, or a few."""
    sym = mx.sym
    x, y = sym.var("x"), sym.var("y")
    img = {"x": (2, 3, 6, 6)}
    return {
        "reshape_codes": (sym.reshape(x, shape=(0, -1)), {"x": (2, 3, 4)}),
        "reshape_minus2": (sym.reshape(x, shape=(-2, 1)), {"x": (2, 3, 4)}),
        "reshape_minus3": (sym.reshape(x, shape=(-3, -2)), {"x": (2, 3, 4)}),
        "reshape_minus4": (sym.reshape(x, shape=(-4, 1, -1, -2)), {"x": (2, 3, 4)}),
        "reshape_reverse": (sym.reshape(x, shape=(-1, 0), reverse=True), {"x": (2, 3, 4)}),
        "transpose": (sym.transpose(x, axes=(1, 0, 2)), {"x": (2, 3, 4)}),
        "transpose_default": (sym.transpose(x), {"x": (2, 3, 4)}),
        "expand_squeeze": (sym.squeeze(sym.expand_dims(x, axis=-1)), {"x": (2, 1, 4)}),
        "slice_axis": (sym.slice_axis(x, axis=1, begin=1, end=None), {"x": (2, 3, 4)}),
        "slice": (sym.slice(x, begin=(None, 1), end=(None, 3), step=(1, 1)), {"x": (2, 4)}),
        "slice_negative": (sym.slice(x, begin=(None, None), end=(None, None), step=(-1, 2)),
                           {"x": (3, 5)}),
        "clip": (sym.clip(x, a_min=-0.3, a_max=0.4), {"x": (3, 4)}),
        "reductions": (sym.Group([sym.sum(x, axis=1), sym.mean(x, axis=(0, 2), keepdims=True),
                                  sym.max(x), sym.min(x, axis=2)]), {"x": (2, 3, 4)}),
        "scalars": (sym.Group([x + 2, x - 1.5, 3 - x, x * 2, x / 4, 2 / (x + 3),
                               (x + 2) ** 2, sym.maximum(x, 0.1)]), {"x": (3, 4)}),
        "broadcast": (sym.Group([sym.broadcast_add(x, y), sym.broadcast_mul(x, y),
                                 sym.broadcast_greater(x, y), sym.broadcast_equal(x, x),
                                 sym.broadcast_maximum(x, y)]), {"x": (2, 3), "y": (1, 3)}),
        "elemwise": (sym.Group([sym.elemwise_add(x, y), sym.elemwise_sub(x, y),
                                sym.elemwise_mul(x, y), sym.elemwise_div(x, y + 3),
                                sym.add_n(x, y, x)]), {"x": (2, 3), "y": (2, 3)}),
        "unary": (sym.Group([sym.exp(x), sym.log(x + 2), sym.sqrt(x + 2), sym.tanh(x),
                             sym.sigmoid(x), sym.relu(x), sym.round(x * 3), sym.square(x),
                             sym.abs(x), sym.negative(x), sym.rsqrt(x + 2)]), {"x": (3, 4)}),
        "softmaxes": (sym.Group([sym.softmax(x), sym.softmax(x, axis=1, temperature=2.0),
                                 sym.log_softmax(x), sym.SoftmaxActivation(x)]),
                      {"x": (2, 3, 4)}),
        "activations": (sym.Group([sym.Activation(x, act_type=t) for t in
                                   ("relu", "sigmoid", "tanh", "softrelu", "softsign")]),
                        {"x": (3, 4)}),
        "leaky": (sym.Group([sym.LeakyReLU(x, act_type="leaky", slope=0.1),
                             sym.LeakyReLU(x, act_type="elu", slope=0.7),
                             sym.LeakyReLU(x, act_type="selu"),
                             sym.LeakyReLU(x, act_type="gelu")]), {"x": (3, 4)}),
        "prelu": (sym.LeakyReLU(x, gamma=y, act_type="prelu"), {"x": (2, 3, 4, 4), "y": (3,)}),
        "pool_max_full": (sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pool_type="max",
                                      pooling_convention="full"), {"x": (1, 2, 8, 8)}),
        "pool_avg_pad": (sym.Pooling(x, kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                                     pool_type="avg"), img),
        "pool_avg_nopad": (sym.Pooling(x, kernel=(3, 3), pad=(1, 1), pool_type="avg",
                                       count_include_pad=False), img),
        "pool_sum": (sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="sum"), img),
        "pool_lp": (sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="lp", p_value=2),
                    img),
        "pool_global": (sym.Group([sym.Pooling(x, kernel=(1, 1), global_pool=True,
                                               pool_type=t) for t in ("max", "avg", "sum")]),
                        img),
        "conv_group_dilate": (sym.Convolution(x, kernel=(3, 3), num_filter=4, num_group=1,
                                              dilate=(2, 2), pad=(1, 1), stride=(2, 2),
                                              name="c"), img),
        "deconv": (sym.Deconvolution(x, kernel=(3, 3), num_filter=2, stride=(2, 2),
                                     pad=(1, 1), adj=(1, 1), name="d"), img),
        "fc_no_flatten": (sym.FullyConnected(x, num_hidden=5, flatten=False, name="f"),
                          {"x": (2, 3, 4)}),
        "batchnorm_fix_gamma": (sym.BatchNorm(x, name="bn"), img),
        "lrn": (sym.LRN(x, nsize=3, alpha=0.01, beta=0.6, knorm=1.5), img),
        "upsampling": (sym.UpSampling(x, scale=2, sample_type="nearest"), img),
        "embedding": (sym.Embedding(x, input_dim=7, output_dim=3, name="e"), {"x": (2, 3)}),
        "cast_concat_flatten": (sym.Flatten(sym.concat(sym.Cast(x, dtype="float16"),
                                                       sym.Cast(y, dtype="float16"), dim=2)),
                                {"x": (2, 3, 2), "y": (2, 3, 1)}),
        "dot": (sym.Group([sym.dot(x, y), sym.dot(x, y, transpose_a=True, transpose_b=True)]),
                {"x": (3, 3), "y": (3, 3)}),
        "batch_dot": (sym.batch_dot(x, y, transpose_b=True), {"x": (2, 3, 4), "y": (2, 5, 4)}),
        "where": (sym.where(x > 0, x, y), {"x": (3, 4), "y": (3, 4)}),
        "split": (sym.split(x, num_outputs=3, axis=1, squeeze_axis=True), {"x": (2, 3, 4)}),
        "dropout_identity": (sym.Dropout(x, p=0.5), {"x": (3, 4)}),
    }


def record_ops(mx, folder: str) -> None:
    """Small graphs of one MXNet op each: the symbol JSON, inputs and MXNet's outputs."""
    _seed(mx, 4)
    cases = {}
    for name, (symbol, shapes) in _op_cases(mx).items():
        arg_shapes, _, aux_shapes = symbol.infer_shape(**shapes)
        args = {}
        for arg, shape in zip(symbol.list_arguments(), arg_shapes):
            values = np.random.uniform(-1, 1, shape)
            if name == "embedding" and arg == "x":
                values = np.random.randint(0, 7, shape)
            args[arg] = np.round(values, 3).astype(np.float32)
        aux = {a: np.random.uniform(0.5, 1.5, s).astype(np.float32)
               for a, s in zip(symbol.list_auxiliary_states(), aux_shapes)}
        executor = symbol.bind(mx.cpu(), {k: mx.nd.array(v) for k, v in args.items()},
                               aux_states={k: mx.nd.array(v) for k, v in aux.items()},
                               grad_req="null")
        outputs = [o.asnumpy() for o in executor.forward(is_train=False)]
        cases[name] = {"symbol": symbol.tojson(),
                       "inputs": {k: v.tolist() for k, v in args.items()},
                       "aux": {k: v.tolist() for k, v in aux.items()},
                       "outputs": [o.astype(np.float64).tolist() for o in outputs],
                       "dtypes": [o.dtype.name for o in outputs],
                       "shapes": [list(o.shape) for o in outputs]}
    with open(os.path.join(folder, "ops.json"), "w") as handle:
        json.dump(cases, handle, sort_keys=True)


def main() -> None:
    import mxnet as mx

    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    record_lenet(mx, folder)
    record_resnet(mx, folder)
    record_module(mx, folder)
    record_ops(mx, folder)
    with open(os.path.join(folder, "recorded_with.json"), "w") as handle:
        json.dump({"mxnet": mx.__version__, "numpy": np.__version__}, handle)


if __name__ == "__main__":
    main()
