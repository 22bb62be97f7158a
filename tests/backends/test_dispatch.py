"""Device parsing, backend discovery and honest placement errors."""
import numpy as np
import pytest

import portable as pt
from portable.backend import Backend
from portable.device import BACKEND_MODULES, Device, as_device, available_devices
from portable.errors import BackendError, MissingKernelError
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder


def test_device_names_and_parsing():
    assert str(pt.cpu()) == "cpu(0)" and pt.opencl(1) == Device("opencl", 1)
    assert as_device("opencl:2") == pt.opencl(2)
    assert as_device("cuda(0)") == pt.cuda(0)
    assert as_device(None) == pt.cpu()
    with pytest.raises(BackendError, match="unknown device type 'tpu'"):
        as_device("tpu")


def test_cpu_backend_is_numpy_with_every_declared_op():
    from portable.ops import registry

    backend = pt.cpu().backend
    assert backend.name == "numpy"
    missing = sorted(set(registry.ops) - set(backend.kernels))
    assert not missing, f"ops without a NumPy kernel: {missing}"


def test_a_missing_kernel_names_op_and_device():
    backend = Backend(pt.cpu(), {})
    backend.xp = np
    with pytest.raises(MissingKernelError, match=r"op Relu has no kernel on device cpu\(0\)"):
        backend.kernel("Relu")


def test_unavailable_backends_explain_why():
    report = dict(available_devices())
    assert set(str(d).split("(")[0] for d in report) == set(BACKEND_MODULES)
    assert "NumPy" in report[pt.cpu()]


def test_null_backend_runs_a_plan_without_computing():
    b = GraphBuilder("g")
    x = b.input("x", (64, 64))
    y = b.op("Relu", b.op("MatMul", x, x))
    plan = CompiledGraph(b.build([y]), pt.null())
    backend = pt.null().backend
    (out,) = plan.run({"x": backend.from_numpy(np.ones((64, 64), np.float32))})
    assert out.shape == (64, 64) and out.dtype == np.float32
