"""The op table's machinery: a Case per op configuration, checked three ways.

- forward: our kernel (through a compiled one-node graph) against onnx.reference's evaluator
  (or, for private-domain ops, against a NumPy reference given in the case);
- gradient: symbolic autodiff against central finite differences, in float64;
- imperative gradient (when autograd exists) through the same rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from portable.device import Device, cpu
from portable.executor.segments import compile_graph
from portable.executor.feeds import to_device
from portable.ir import GraphBuilder, TensorType
from portable.ir.types import SequenceType, type_of_value
from portable.ops import registry
from portable.passes.autodiff import differentiate


@dataclass
class Case:
    """One op configuration of the table.

    Args:
        op: qualified op name.
        inputs: input arrays (None for an absent optional input).
        attrs: node attributes.
        const: indices of inputs given as constants (shapes, axes), known while planning.
        outputs: number of outputs (absent trailing outputs are not requested).
        grad: check gradients against finite differences (differentiable ops).
        wrt: inputs to differentiate (default: every float input not declared non-diff).
        reference: for private ops, a NumPy function of (inputs, attrs) -> list of outputs.
        rtol, atol: forward tolerances; grad_tol: gradient tolerance.
        name: a label for the test id.
        grad_reference: for ops whose backward is by design not their forward's derivative
            (MXNet's loss outputs), a NumPy function of (inputs, attrs, heads) -> the expected
            gradient of each ``wrt`` input, used instead of finite differences.
    """

    op: str
    inputs: Sequence[Any]
    attrs: dict = field(default_factory=dict)
    const: tuple[int, ...] = ()
    outputs: int = 1
    grad: bool = True
    wrt: tuple[int, ...] | None = None
    reference: Callable | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    grad_tol: float = 1e-5
    name: str = ""
    grad_reference: Callable | None = None

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}" if self.name else self.op


def rand(*shape, seed: int = 0, low: float = -1.0, high: float = 1.0,
         dtype=np.float32) -> np.ndarray:
    """Deterministic uniform random test data."""
    rng = np.random.default_rng(seed + 7919 * len(shape) + sum(shape))
    return rng.uniform(low, high, size=shape).astype(dtype)


def build(case: Case, inputs: Sequence[Any]):
    b = GraphBuilder(case.id)
    names = []
    for i, value in enumerate(inputs):
        if value is None:
            names.append(None)
        elif isinstance(value, list):  # a sequence (portable.ir.types), fed as a list
            fed = type_of_value([np.asarray(v) for v in value])
            b.inputs.append((f"in{i}", SequenceType(fed.elem, fed.dtype)))
            names.append(f"in{i}")
        elif i in case.const:
            names.append(b.const(np.asarray(value), name=f"in{i}"))
        else:
            value = np.asarray(value)
            names.append(b.input(f"in{i}", value.shape, value.dtype))
    outs = [f"out{j}" for j in range(case.outputs)]
    b.op(case.op, *names, outputs=outs, name="node", **case.attrs)
    graph = b.build(outs)
    feeds = {f"in{i}": [np.asarray(x) for x in v] if isinstance(v, list) else np.asarray(v)
             for i, v in enumerate(inputs) if v is not None and i not in case.const}
    return graph, feeds


def run_ours(case: Case, inputs: Sequence[Any] | None = None,
             device: Device | None = None) -> list[np.ndarray]:
    graph, feeds = build(case, case.inputs if inputs is None else inputs)
    device = device or cpu()
    # (outputs whose shapes depend on values run between planned segments)
    plan = compile_graph(graph, device)
    backend = device.backend
    outs = plan.run({k: to_device(backend, v) for k, v in feeds.items()})
    return [_host(backend, o) for o in outs]


def _host(backend, value: Any) -> Any:
    """An output on the host: an array copy, a list of them (a sequence) or None."""
    if value is None or isinstance(value, list):
        return value if value is None else [_host(backend, v) for v in value]
    return backend.to_numpy(value).copy()


def assert_output_matches(got: np.ndarray, want: Any, case: Case, j: int,
                          dtype: bool = True) -> None:
    """Output ``j`` of ``case`` is the reference's: shape, dtype (when ``dtype``) and values
    within the case's tolerance; string tensors hold the same strings (onnx.reference returns
    some as fixed-width str arrays)."""
    if want is None or got is None:  # an empty optional
        assert want is None and got is None, f"output {j} of {case.id}: {got!r:.80} vs {want!r:.80}"
        return
    if isinstance(want, (list, tuple)) or isinstance(got, list):  # sequences: element-wise
        assert isinstance(got, list) and len(got) == len(want), \
            f"output {j} of {case.id}: {got!r:.80} vs a sequence of {len(want)}"
        for got_item, want_item in zip(got, want):
            assert_output_matches(got_item, want_item, case, j, dtype)
        return
    want = np.asarray(want)
    assert got.shape == want.shape, f"output {j} of {case.id}: shape {got.shape} vs {want.shape}"
    if got.dtype == object and want.dtype.kind in "UO":
        np.testing.assert_array_equal(got, want.astype(object), err_msg=f"output {j} of {case.id}")
        return
    if dtype:
        assert got.dtype == want.dtype, f"output {j}: dtype {got.dtype} vs {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol,
                               err_msg=f"output {j} of {case.id}")


def run_reference(case: Case) -> list[np.ndarray]:
    """onnx.reference on a typed one-node model (typed so that function ops such as Gelu
    can be expanded), or the case's own NumPy reference for private ops."""
    if case.reference is not None:
        return [o if o is None or isinstance(o, list) else np.asarray(o)
                for o in case.reference(list(case.inputs), dict(case.attrs))]
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(case.inputs)]
    outputs = [f"out{j}" for j in range(case.outputs)]
    attrs = {k: (numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v)
             for k, v in case.attrs.items()}
    # (ops of ai.onnx.ml and ai.onnx.preview.training are declared "<domain>.<op_type>")
    domain, _, op_type = case.op.rpartition(".")
    node = helper.make_node(op_type, names, outputs, domain=domain or None, **attrs)
    typed = [helper.make_tensor_value_info(
        n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.asarray(v).shape)
        if not isinstance(v, list) else helper.make_tensor_sequence_value_info(
            n, helper.np_dtype_to_tensor_dtype(np.asarray(v[0]).dtype), None)
        for n, v in zip(names, case.inputs) if n]
    untyped = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    imports = [helper.make_opsetid("", onnx.defs.onnx_opset_version())] + (
        [helper.make_opsetid(domain, onnx.defs.get_schema(op_type, 99, domain).since_version)]
        if domain else [])
    model = helper.make_model(helper.make_graph([node], "case", typed, untyped),
                              opset_imports=imports)
    feeds = {n: v if isinstance(v, list) else np.asarray(v) for n, v in zip(names, case.inputs)
             if n}
    return [o if isinstance(o, list) else np.asarray(o)
            for o in ReferenceEvaluator(model).run(None, feeds)]


def diff_inputs(case: Case) -> list[int]:
    op = registry.get(case.op)
    if case.wrt is not None:
        return list(case.wrt)
    return [i for i, v in enumerate(case.inputs)
            if v is not None and i not in case.const and i not in op.nondiff_inputs
            and np.asarray(v).dtype.kind == "f"]


def to64(case: Case) -> Case:
    inputs = [None if v is None else (np.asarray(v, np.float64)
                                      if np.asarray(v).dtype.kind == "f" else np.asarray(v))
              for v in case.inputs]
    attrs = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f"
                 else v) for k, v in case.attrs.items()}
    return Case(**{**case.__dict__, "inputs": inputs, "attrs": attrs})


def symbolic_gradients(case: Case, heads: list[np.ndarray], device: Device | None = None):
    """Our gradients of sum(outputs * heads) w.r.t. the case's differentiable inputs."""
    wrt = diff_inputs(case)
    graph, feeds = build(case, case.inputs)
    grad_graph, _ = differentiate(graph, [f"in{i}" for i in wrt])
    for j, head in enumerate(heads):
        feeds[f"out{j}_head_grad"] = head
    device = device or cpu()
    # (head gradients typed by their values: an output whose shape depends on values, a
    # Loop's scan output, is declared with unknown dims)
    heads_types = {f"out{j}_head_grad": TensorType(np.shape(h), np.asarray(h).dtype)
                   for j, h in enumerate(heads)}
    plan = compile_graph(grad_graph, device, heads_types)
    backend = device.backend
    outs = plan.run({k: backend.from_numpy(v) for k, v in feeds.items()})
    return wrt, [backend.to_numpy(o).copy() for o in outs[case.outputs:]]


def numeric_gradients(case: Case, heads: list[np.ndarray], wrt: list[int],
                      eps: float = 1e-6) -> list[np.ndarray]:
    """Central finite differences of sum(outputs * heads)."""
    def objective(inputs):
        outs = run_ours(case, inputs)
        return sum(float(np.sum(o.astype(np.float64) * h)) for o, h in zip(outs, heads))

    grads = []
    inputs = [None if v is None else np.array(v, copy=True) for v in case.inputs]
    for i in wrt:
        x = inputs[i]
        g = np.zeros_like(x, dtype=np.float64)
        flat = x.reshape(-1)
        for k in range(flat.size):
            old = flat[k]
            flat[k] = old + eps
            up = objective(inputs)
            flat[k] = old - eps
            down = objective(inputs)
            flat[k] = old
            g.reshape(-1)[k] = (up - down) / (2 * eps)
        grads.append(g)
    return grads
