"""Every compiled loop a plan runs is compiled (or loaded from numba's disk cache) while the
plan is built, not at its first run: the first run's time and memory are what the planner
predicts (``tests/memory/test_light_models.py`` measures the memory). A plan hands its
constants to the kernels as read-only arrays, which numba compiles separately, so the warm-up
calls must take those too. Checked in a fresh process, where a loop's signatures are only
those this process compiled or loaded: planning, then one run, must add none."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from backends.numpy import jit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import importlib, json, os, pkgutil, sys
import numpy as np
import onnx
import backends.numpy.jit as J
from numba.core.registry import CPUDispatcher
from exporters.onnx import backend

def signatures():
    found = {}
    for info in pkgutil.iter_modules(J.__path__):
        module = importlib.import_module("backends.numpy.jit." + info.name)
        for name, value in vars(module).items():
            if isinstance(value, CPUDispatcher):
                found[info.name + "." + name] = set(map(str, value.signatures))
    return found

late = {}
for path in sys.argv[1:]:
    model = onnx.load(path)
    weights = {t.name for t in model.graph.initializer}
    graph_input = [i for i in model.graph.input if i.name not in weights][0]
    shape = [d.dim_value or 1 for d in graph_input.type.tensor_type.shape.dim]
    feeds = {graph_input.name: np.random.default_rng(0).standard_normal(shape).astype(
        np.float32)}
    rep = backend.prepare(model)
    rep.plan(feeds)
    before = signatures()
    rep.run(feeds)
    added = {k: sorted(v - before.get(k, set())) for k, v in signatures().items()}
    late[os.path.basename(path)] = {k: v for k, v in added.items() if v}
print(json.dumps(late))
"""


@pytest.mark.skipif(not jit.enabled(), reason="the compiled tier is off (numba is not "
                    "installed, or PORTABLE_JIT=0)")
def test_a_plans_first_run_compiles_nothing():
    onnx = pytest.importorskip("onnx")
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    small = os.path.join(ROOT, "tests", "fixtures", "torch_small")
    # The stacked and small Convs, pointwise and depthwise loops, pools, small Gemms,
    # LayerNormalization, Softmax and LSTM, each with weights the plan holds read-only.
    paths = [os.path.join(small, f"{name}.onnx") for name in
             ("lenet", "mobilenetv2_small", "resnet18_small", "lstm", "encoder")]
    paths += [os.path.join(light, f"light_{name}.onnx") for name in ("squeezenet",
                                                                     "inception_v1")]
    paths = [p for p in paths if os.path.exists(p)]
    assert paths, "no model to plan"
    done = subprocess.run([sys.executable, "-c", SCRIPT, *paths], capture_output=True,
                          text=True, cwd=ROOT, timeout=900,
                          env=dict(os.environ, PYTHONPATH=ROOT, PORTABLE_JIT="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    late = json.loads(done.stdout.strip().splitlines()[-1])
    assert late == {os.path.basename(p): {} for p in paths}, late
