"""Each optimizer against a closed-form NumPy reference and against PyTorch (when installed),
over several steps with the same hyper-parameters."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.errors import PortableError, SerializationError
from tests.optim.references import REFERENCES

STEPS = 6

# (name, our kwargs, torch factory) - the torch factory gets (params) and returns an optimizer
CASES = [
    ("sgd", {"learning_rate": 0.1}, lambda p, t: t.optim.SGD(p, lr=0.1)),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01},
     lambda p, t: t.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("nag", {"learning_rate": 0.05, "momentum": 0.9, "wd": 0.01},
     lambda p, t: t.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True)),
    ("adam", {"learning_rate": 0.01, "beta1": 0.8, "beta2": 0.99, "wd": 0.01},
     lambda p, t: t.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.01)),
    ("adamw", {"learning_rate": 0.01, "wd": 0.1},
     lambda p, t: t.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
    ("rmsprop", {"learning_rate": 0.01, "rho": 0.9, "wd": 0.01},
     lambda p, t: t.optim.RMSprop(p, lr=0.01, alpha=0.9, weight_decay=0.01)),
    ("rmsprop", {"learning_rate": 0.01, "rho": 0.95, "momentum": 0.5, "centered": True},
     lambda p, t: t.optim.RMSprop(p, lr=0.01, alpha=0.95, momentum=0.5, centered=True)),
    ("adagrad", {"learning_rate": 0.1, "epsilon": 1e-10, "wd": 0.01},
     lambda p, t: t.optim.Adagrad(p, lr=0.1, eps=1e-10, weight_decay=0.01)),
]
IDS = [f"{name}-{'-'.join(kw)}" for name, kw, _ in CASES]


def _data(seed=0, shape=(4, 5)):
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=shape).astype(np.float32)
    grads = [rng.normal(size=shape).astype(np.float32) for _ in range(STEPS)]
    return w0, grads


def _run_ours(name, kwargs, w0, grads, index=0):
    opt = pt.optim.create(name, **kwargs)
    w = pt.nd.array(w0)
    state = opt.create_state(index, w)
    out = []
    for g in grads:
        opt.update(index, w, pt.nd.array(g), state)
        out.append(w.asnumpy())
    return out


def _run_reference(name, kwargs, w0, grads):
    w, state, out = w0.astype(np.float64), {}, []
    for t, g in enumerate(grads, start=1):
        w = REFERENCES[name](w, g.astype(np.float64), state, t, kwargs)
        out.append(w)
    return out


@pytest.mark.parametrize("name,kwargs,_", CASES, ids=IDS)
def test_matches_closed_form(name, kwargs, _):
    w0, grads = _data()
    for step, (ours, ref) in enumerate(zip(_run_ours(name, kwargs, w0, grads),
                                           _run_reference(name, kwargs, w0, grads))):
        np.testing.assert_allclose(ours, ref, rtol=2e-5, atol=2e-6, err_msg=f"step {step + 1}")


@pytest.mark.parametrize("name,kwargs,torch_factory", CASES, ids=IDS)
def test_matches_pytorch(name, kwargs, torch_factory):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional reference)")
    w0, grads = _data(1)
    param = torch.nn.Parameter(torch.tensor(w0))
    opt = torch_factory([param], torch)
    theirs = []
    for g in grads:
        param.grad = torch.tensor(g)
        opt.step()
        theirs.append(param.detach().numpy().copy())
    for step, (ours, ref) in enumerate(zip(_run_ours(name, kwargs, w0, grads), theirs)):
        np.testing.assert_allclose(ours, ref, rtol=2e-5, atol=2e-6, err_msg=f"step {step + 1}")


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_rescale_and_clip_gradient(name):
    kwargs = {"learning_rate": 0.05, "rescale_grad": 0.5, "clip_gradient": 0.3, "wd": 0.01}
    if name in ("sgd", "nag", "rmsprop"):
        kwargs["momentum"] = 0.9
    w0, grads = _data(2)
    for ours, ref in zip(_run_ours(name, kwargs, w0, grads),
                         _run_reference(name, kwargs, w0, grads)):
        np.testing.assert_allclose(ours, ref, rtol=2e-5, atol=2e-6)


def test_gradient_buffer_is_not_modified():
    opt = pt.optim.create("sgd", learning_rate=0.1, wd=0.5, rescale_grad=2.0, clip_gradient=0.1)
    w, g = pt.nd.ones((3,)), pt.nd.array([1.0, -2.0, 3.0])
    opt.update(0, w, g, None)
    assert g.asnumpy().tolist() == [1.0, -2.0, 3.0]


def test_lr_and_wd_multipliers_by_index():
    opt = pt.optim.create("sgd", learning_rate=1.0, wd=0.5)
    opt.set_lr_mult({0: 0.1})
    opt.set_wd_mult({0: 0.0})
    w = pt.nd.ones((2,))
    opt.update(0, w, pt.nd.ones((2,)), None)
    np.testing.assert_allclose(w.asnumpy(), [0.9, 0.9], rtol=1e-6)


def test_update_is_one_engine_op_ordered_after_the_gradient():
    # the update reads the gradient: a write queued on the gradient before it must land first
    opt = pt.optim.create("sgd", learning_rate=1.0)
    w, g = pt.nd.zeros((2,)), pt.nd.zeros((2,))
    g[:] = np.array([1.0, 2.0], np.float32)
    opt.update(0, w, g, None)
    g[:] = np.array([100.0, 100.0], np.float32)
    assert w.asnumpy().tolist() == [-1.0, -2.0]


def test_scheduler_drives_the_learning_rate():
    sched = pt.optim.lr_scheduler.FactorScheduler(step=2, factor=0.5)
    opt = pt.optim.create("sgd", learning_rate=1.0, lr_scheduler=sched)
    w, lrs = pt.nd.zeros((1,)), []
    for _ in range(5):
        before = w.asnumpy()[0]
        opt.update(0, w, pt.nd.ones((1,)), None)
        lrs.append(before - w.asnumpy()[0])
    np.testing.assert_allclose(lrs, [1.0, 1.0, 0.5, 0.5, 0.25])


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_states_round_trip_resumes_exactly(name):
    w0, grads = _data(3)
    kwargs = {"learning_rate": 0.05}
    full = _run_ours(name, kwargs, w0, grads)[-1]

    upd = pt.optim.get_updater(pt.optim.create(name, **kwargs))
    w = pt.nd.array(w0)
    for g in grads[:3]:
        upd(0, pt.nd.array(g), w)
    blob = upd.get_states(dump_optimizer=True)
    resumed = pt.optim.get_updater(pt.optim.create("sgd"))  # replaced by the dumped config
    resumed.set_states(blob)
    assert type(resumed.optimizer).__name__.lower() == name
    for g in grads[3:]:
        resumed(0, pt.nd.array(g), w)
    np.testing.assert_array_equal(w.asnumpy(), full)


def test_corrupted_states_are_refused():
    upd = pt.optim.get_updater(pt.optim.create("adam"))
    upd(0, pt.nd.ones((4,)), pt.nd.ones((4,)))
    blob = bytearray(upd.get_states())
    blob[-3] ^= 0xFF
    with pytest.raises(SerializationError, match="corrupted"):
        pt.optim.get_updater(pt.optim.create("adam")).set_states(bytes(blob))
    with pytest.raises(SerializationError, match="truncated|not a readable"):
        pt.optim.get_updater(pt.optim.create("adam")).set_states(bytes(blob[:-10]))


def test_state_shape_mismatch_is_refused():
    upd = pt.optim.get_updater(pt.optim.create("adam"))
    upd(0, pt.nd.ones((4,)), pt.nd.ones((4,)))
    other = pt.optim.get_updater(pt.optim.create("adam"))
    other.set_states(upd.get_states())
    with pytest.raises(SerializationError, match="shape"):
        other(0, pt.nd.ones((3,)), pt.nd.ones((3,)))


def test_unknown_optimizer_names_the_known_ones():
    with pytest.raises(PortableError, match="adamw"):
        pt.optim.create("lion")


def _available_devices():
    devices = [pt.cpu()]
    try:
        pt.opencl().backend
        devices.append(pt.opencl())
    except pt.errors.BackendError:
        pass
    return devices


@pytest.mark.parametrize("name,kwargs,_", CASES, ids=IDS)
def test_same_update_on_every_available_device(name, kwargs, _):
    """The fused update runs with the device's array namespace (NumPy, OpenCL, ...)."""
    devices = _available_devices()
    if len(devices) == 1:
        pytest.skip("no device besides the CPU is available (OpenCL/PoCL or CUDA)")
    w0, grads = _data(4)
    kwargs = {**kwargs, "clip_gradient": 0.8, "rescale_grad": 0.9}
    ref = _run_reference(name, kwargs, w0, grads)[-1]
    for device in devices[1:]:
        opt = pt.optim.create(name, **kwargs)
        w = pt.nd.array(w0, device=device)
        state = opt.create_state(0, w)
        for g in grads:
            opt.update(0, w, pt.nd.array(g, device=device), state)
        np.testing.assert_allclose(w.asnumpy(), ref, rtol=2e-5, atol=2e-6, err_msg=str(device))
