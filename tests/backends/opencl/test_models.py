"""Whole models on OpenCL: digits LeNet training follows the CPU's trajectory and reaches
>= 97% test accuracy, and every value the nine light model-zoo nets compute matches NumPy. The
ONNX node conformance run (a minute or more, worker processes) needs
``PORTABLE_OPENCL_SLOW=1``."""
import os

import numpy as np
import pytest

import portable as pt
from portable.executor.compiled import CompiledGraph

slow = pytest.mark.skipif(os.environ.get("PORTABLE_OPENCL_SLOW") != "1",
                          reason="a minute or more on PoCL: set PORTABLE_OPENCL_SLOW=1 to run")


def _train(device, epochs):
    from portable.data.digits import load_digits_split
    from portable.models.symbolic import lenet
    from portable.models.symbolic_training import train_classifier

    return train_classifier(lenet(), load_digits_split(), epochs=epochs, device=device)


def test_lenet_epoch_follows_the_cpu(device):
    ours, theirs = _train(device, 1), _train(pt.cpu(), 1)
    np.testing.assert_allclose(ours["train_loss"], theirs["train_loss"], rtol=1e-4)
    assert abs(ours["test_accuracy"] - theirs["test_accuracy"]) <= 0.01


def test_lenet_reaches_97_percent_on_digits(device):
    assert _train(device, 20)["test_accuracy"] >= 0.97


def _light_models():
    onnx = pytest.importorskip("onnx", reason="onnx provides the light model zoo")
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return sorted(name[len("light_"):-len(".onnx")] for name in os.listdir(folder)
                  if name.endswith(".onnx"))


@pytest.mark.parametrize("name", ["bvlc_alexnet", "densenet121", "inception_v1",
                                  "inception_v2", "resnet50", "shufflenet", "squeezenet",
                                  "vgg19", "zfnet512"])
def test_light_model_matches_numpy_in_every_value(device, name):
    """Every value the model computes (not only its near-uniform output) agrees within 1e-3
    relative to the value's own scale."""
    import onnx

    from exporters.onnx.backend import fold_constants
    from portable.io.onnx.importer import import_graph
    from portable.ir.graph import TensorType

    if name not in _light_models():
        pytest.skip(f"onnx has no light model {name}")
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    model = onnx.load(os.path.join(folder, f"light_{name}.onnx"))
    graph, _ = import_graph(model, params_as_inputs=False)
    (input_name, declared), = [(n, t) for n, t in graph.inputs]
    shape = tuple(declared.shape)
    x = (np.arange(np.prod(shape)).reshape(shape) / np.prod(shape)).astype(np.float32)
    types = {input_name: TensorType(shape, np.float32)}
    graph = fold_constants(graph, types, {})
    values = [out for node in graph.nodes for out in node.outputs if out]
    results = {}
    for dev in (pt.cpu(), device):
        plan = CompiledGraph(graph, dev, types, keep=values)
        env = plan.bind({input_name: dev.backend.from_numpy(x)})
        plan.execute(env)
        results[str(dev)] = {v: np.array(dev.backend.to_numpy(env[v])) for v in values
                             if v in env}
    cpu, ours = results["cpu(0)"], results[str(device)]
    from tests.exporters.helpers import rounding_decides

    from portable.ops import registry

    # A Softmax over logits tied to the last float32 step (squeezenet's constant weights) is
    # decided by rounding alone, and so are views of it; its logits are still compared.
    decided: set = set()
    for node in graph.nodes:
        if ((node.op == "Softmax" and node.inputs[0] in cpu
             and rounding_decides(cpu[node.inputs[0]]))
                or (registry.get(node.op).view and node.inputs[0] in decided)):
            decided.add(node.outputs[0])
    for value, want in cpu.items():
        if value in decided:
            continue
        got = ours[value]
        scale = max(float(np.abs(want).max()), 1e-6) if want.size else 1.0
        assert np.abs(got.astype(np.float64) - want).max() <= 1e-3 * scale, value


@pytest.mark.parametrize("name", ["mobilenetv2_small", "resnet18_small"])
def test_fused_epilogues_match_onnxruntime(device, name):
    """PyTorch's MobileNetV2 and ResNet exports, optimised: their Convs end in fused ReLU6
    (Clip with constant bounds) and residual Adds, run by the composed fused kernel here."""
    ort = pytest.importorskip("onnxruntime")
    from portable.ir.graph import TensorType
    from portable.passes.pipeline import optimize
    from portable.predict.formats import load_graph

    folder = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "torch_small")
    path = os.path.join(folder, f"{name}.onnx")
    x = np.load(os.path.join(folder, f"{name}_input.npy"), allow_pickle=False)
    types = {"input": TensorType(x.shape, np.float32)}
    graph = optimize(load_graph(path), "all", input_types=types)
    assert any(len(n.inputs) > 3 and n.inputs[3] for n in graph.nodes)  # a residual fused
    (got,) = CompiledGraph(graph, device, types).run({"input": device.backend.from_numpy(x)})
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"input": x})
    np.testing.assert_allclose(np.asarray(device.backend.to_numpy(got)), want, rtol=1e-4,
                               atol=1e-4)


@slow
def test_conformance_passes_90_percent_of_core_cases():
    from exporters.onnx.conformance import run_conformance

    report = run_conformance(ops="core", device="opencl", jobs=2)
    assert report["pass_rate"] >= 0.9, report
