"""Symbol-API models export to ONNX that onnxruntime runs with our outputs (within 1e-4), and
importing the file and exporting it again gives the same outputs."""
import numpy as np
import pytest

from tests.exporters.helpers import ort_run, onnx

import portable as pt
from portable import symbol as sym
from portable.models.symbolic import lenet, mlp

from exporters.onnx import export_model, import_model

RNG = np.random.default_rng(0)


def lenet_batchnorm():
    x = sym.var("data")
    for i, filters in enumerate((4, 8), start=1):
        x = sym.Convolution(x, kernel=(3, 3), num_filter=filters, pad=(1, 1), name=f"conv{i}")
        x = sym.BatchNorm(x, name=f"bn{i}")
        x = sym.Activation(x, act_type="relu")
        x = sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max")
    x = sym.Dropout(x, p=0.25)
    x = sym.FullyConnected(x, num_hidden=16, name="fc1")
    x = sym.Activation(x, act_type="tanh")
    return sym.FullyConnected(x, num_hidden=10, name="fc2")


def _trained_executor(net, shape):
    """Random weights, then two SGD steps in training mode (running statistics move)."""
    label = sym.var("label", dtype="int64")
    loss = sym.SoftmaxCrossEntropy(net, label, name="loss")
    exe = loss.simple_bind(pt.cpu(), data=shape, label=(shape[0],))
    for name, array in exe.arg_dict.items():
        if name not in ("data", "label"):
            array[:] = RNG.normal(0, 0.3, array.shape).astype(np.float32)
    for _ in range(2):
        exe.forward(is_train=True, data=RNG.normal(size=shape).astype(np.float32),
                    label=RNG.integers(0, 10, shape[0]))
        exe.backward()
        for name, grad in exe.grad_dict.items():
            if name not in ("data", "label"):
                exe.arg_dict[name][:] = exe.arg_dict[name].asnumpy() - 0.1 * grad.asnumpy()
    args = {n: a for n, a in exe.arg_dict.items() if n not in ("data", "label")}
    return args, dict(exe.aux_dict)


@pytest.mark.parametrize("build,shape", [(lambda: mlp(hidden=(32, 16)), (4, 20)),
                                         (lambda: lenet(channels=(4, 8)), (2, 1, 12, 12)),
                                         (lenet_batchnorm, (3, 1, 12, 12))],
                         ids=["mlp", "lenet", "lenet_batchnorm"])
def test_symbol_round_trip(build, shape, tmp_path):
    net = build()
    args, aux = _trained_executor(net, shape)
    x = RNG.normal(size=shape).astype(np.float32)
    ours = net.bind(pt.cpu(), {**args, "data": pt.nd.array(x)}, grad_req="null",
                    aux_states=aux).forward()[0].asnumpy()

    path = tmp_path / "net.onnx"
    model = export_model(net, (args, aux), path, input_shapes={"data": shape},
                         dynamic_batch=True)
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert "Dropout" not in {n.op_type for n in model.graph.node}  # stripped for inference
    np.testing.assert_allclose(ort_run(path, {"data": x})[0], ours, rtol=1e-4, atol=1e-4)
    # the batch dimension is symbolic: onnxruntime takes another batch size
    doubled = ort_run(path, {"data": np.concatenate([x, x])})[0]
    np.testing.assert_allclose(doubled[:shape[0]], ours, rtol=1e-4, atol=1e-4)

    symbol, arg_params, aux_params = import_model(path)
    assert sorted(aux_params) == sorted(aux)
    again = symbol.bind(pt.cpu(), {**arg_params, "data": pt.nd.array(x)}, grad_req="null",
                        aux_states=aux_params).forward()[0].asnumpy()
    np.testing.assert_allclose(again, ours, rtol=1e-5, atol=1e-6)
    second = export_model(symbol, (arg_params, aux_params), tmp_path / "again.onnx",
                          input_shapes={"data": shape})
    np.testing.assert_allclose(ort_run(second, {"data": x})[0], ours, rtol=1e-4, atol=1e-4)


def test_export_needs_input_shapes():
    from portable.errors import BindError

    with pytest.raises(BindError, match="input_shapes"):
        export_model(mlp(), {})
