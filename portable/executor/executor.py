"""Executor: a Symbol bound to arrays on a device (MXNet 1.x ``Symbol.bind``).

Stages at bind: lower the symbol to a Graph with the bound shapes; for training, apply training
mode (state updates of BatchNormalization become extra outputs) and append the gradient graph
for every argument whose ``grad_req`` is not ``null``; compile both the training and inference
plans lazily. ``forward(is_train=True)`` runs the forward segment of the training plan and keeps
its values, so ``backward`` runs only the gradient segment.

Example:
    >>> exe = net.simple_bind(pt.cpu(), data=(32, 64))     # doctest: +SKIP
    >>> exe.forward(is_train=True, data=batch)             # doctest: +SKIP
    >>> exe.backward()                                     # doctest: +SKIP
    >>> exe.grad_dict["fc1_weight"]                        # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from portable.device import Device, as_device
from portable.errors import BindError
from portable.executor.compiled import CompiledGraph
from portable.ir.graph import Graph, TensorType
from portable.ndarray.ndarray import NDArray
from portable.ndarray import ndarray as nd
from portable.passes.autodiff import HEAD_GRAD_SUFFIX, differentiate
from portable.passes.training import set_training_mode

GRAD_REQS = ("write", "add", "null")


def _as_dict(names: Sequence[str], values: Any, what: str) -> dict[str, Any]:
    if values is None:
        return {}
    if isinstance(values, Mapping):
        unknown = set(values) - set(names)
        if unknown:
            raise BindError(f"{what} names unknown argument(s) {sorted(unknown)}; the symbol's "
                            f"are {names}")
        return dict(values)
    values = list(values)
    if len(values) != len(names):
        raise BindError(f"{what} has {len(values)} arrays for {len(names)} names {names}")
    return dict(zip(names, values))


class Executor:
    """Runs a bound symbol forward and backward.

    Attributes:
        arg_dict, grad_dict, aux_dict: the bound NDArrays by name.
        outputs: the outputs of the last forward, as NDArrays.
    """

    def __init__(self, symbol: Any, device: Device | str | None, args: Any, args_grad: Any,
                 grad_req: Any, aux_states: Any) -> None:
        self.symbol = symbol
        self.device = as_device(device)
        arg_names = symbol.list_arguments()
        aux_names = symbol.list_auxiliary_states()
        self.arg_dict: dict[str, NDArray] = _as_dict(arg_names, args, "args")
        missing = [n for n in arg_names if n not in self.arg_dict]
        if missing:
            raise BindError(f"bind: no array given for argument(s) {missing}")
        self.aux_dict: dict[str, NDArray] = _as_dict(aux_names, aux_states, "aux_states")
        missing = [n for n in aux_names if n not in self.aux_dict]
        if missing:
            raise BindError(f"bind: no array given for auxiliary state(s) {missing}")
        self.grad_req = self._grad_reqs(arg_names, grad_req)
        if isinstance(grad_req, str):  # integer arguments (labels, indices) have no gradient
            for name in arg_names:
                if self.arg_dict[name].dtype.kind != "f":
                    self.grad_req[name] = "null"
        self.grad_dict: dict[str, NDArray] = _as_dict(arg_names, args_grad, "args_grad")
        for name, req in self.grad_req.items():
            if req != "null" and name not in self.grad_dict:
                self.grad_dict[name] = nd.zeros(self.arg_dict[name].shape, self.device,
                                                self.arg_dict[name].dtype)
        shapes = {n: a.shape for n, a in {**self.arg_dict, **self.aux_dict}.items()}
        dtypes = {n: a.dtype for n, a in {**self.arg_dict, **self.aux_dict}.items()}
        self._graph: Graph = symbol.to_graph(shapes, dtypes)
        self._check_bound_shapes()
        self._plans: dict[bool, Any] = {}
        self._env: dict[str, Any] | None = None
        self.outputs: list[NDArray] = []

    @classmethod
    def allocate(cls, symbol: Any, device: Any, grad_req: Any, shapes: Mapping[str, Any],
                 type_dict: Mapping[str, Any] | None = None) -> "Executor":
        """``simple_bind``: zero-filled arguments, gradients and states from input shapes."""
        device = as_device(device)
        types = symbol._infer(dict(shapes), dict(type_dict or {})).types

        def zeros(name: str) -> NDArray:
            return nd.zeros(types[name].shape, device, types[name].dtype)

        args = {n: zeros(n) for n in symbol.list_arguments()}
        aux = {n: zeros(n) for n in symbol.list_auxiliary_states()}
        return cls(symbol, device, args, None, grad_req, aux)

    # -- setup -----------------------------------------------------------------------------
    @staticmethod
    def _grad_reqs(names: list[str], grad_req: Any) -> dict[str, str]:
        if isinstance(grad_req, str):
            reqs = {n: grad_req for n in names}
        elif isinstance(grad_req, Mapping):
            reqs = {n: grad_req.get(n, "null") for n in names}
        else:
            reqs = dict(zip(names, grad_req))
        for name, req in reqs.items():
            if req not in GRAD_REQS:
                raise BindError(f"grad_req {req!r} for {name!r} is not one of {GRAD_REQS}")
        return reqs

    def _check_bound_shapes(self) -> None:
        for name, array in self.grad_dict.items():
            if array.shape != self.arg_dict[name].shape:
                raise BindError(f"gradient array for {name!r} has shape {array.shape}, the "
                                f"argument has {self.arg_dict[name].shape}")

    def _plan(self, training: bool):
        plan = self._plans.get(training)
        if plan is not None:
            return plan
        graph, updates = set_training_mode(self._graph, training)
        forward_outputs = graph.outputs + tuple(updates.values())
        graph = graph.replace(outputs=forward_outputs)
        wrt = [n for n, req in self.grad_req.items() if req != "null"] if training else []
        forward_nodes = len(graph.nodes)
        grads: dict[str, str] = {}
        if wrt:
            heads = list(self._graph.outputs)
            graph, grads = differentiate(graph, wrt, heads=heads)
        compiled = CompiledGraph(graph, self.device)
        plan = {"compiled": compiled, "updates": updates, "grads": grads,
                "split": compiled.step_of_node(forward_nodes),
                "num_outputs": len(self._graph.outputs)}
        self._plans[training] = plan
        return plan

    # -- running ---------------------------------------------------------------------------
    def forward(self, is_train: bool = False, **kwargs: Any) -> list[NDArray]:
        """Run forward (copying ``kwargs`` into the bound arguments first)."""
        for name, value in kwargs.items():
            if name not in self.arg_dict:
                raise BindError(f"forward: unknown argument {name!r}")
            self.arg_dict[name][:] = value
        plan = self._plan(bool(is_train))
        compiled: CompiledGraph = plan["compiled"]
        feeds = {n: a.data for n, a in {**self.arg_dict, **self.aux_dict}.items()}
        for out in self._graph.outputs:
            head = f"{out}{HEAD_GRAD_SUFFIX}"
            if head in compiled.graph.input_names:
                type_: TensorType = compiled.type_of(head)
                feeds[head] = self.device.backend.empty(type_.shape, type_.dtype)
        env = compiled.bind(feeds)
        compiled.execute(env, 0, plan["split"])
        self._env = env if is_train else None
        self._last_plan = plan
        for state, value in plan["updates"].items():
            self.aux_dict[state]._data[...] = env[value]
        self.outputs = [NDArray(env[name], self.device) for name in self._graph.outputs]
        return self.outputs

    def backward(self, out_grads: Any = None) -> None:
        """Run the gradient segment; ``out_grads`` default to ones for every output."""
        if self._env is None:
            raise BindError("backward() needs a preceding forward(is_train=True)")
        plan = self._last_plan
        compiled: CompiledGraph = plan["compiled"]
        env = self._env
        outs = list(self._graph.outputs)
        if out_grads is None:
            out_grads = [None] * len(outs)
        elif isinstance(out_grads, (NDArray, np.ndarray)):
            out_grads = [out_grads]
        if len(out_grads) != len(outs):
            raise BindError(f"backward got {len(out_grads)} out_grads for {len(outs)} outputs")
        for name, grad in zip(outs, out_grads):
            if f"{name}{HEAD_GRAD_SUFFIX}" not in env:
                continue  # an integer or boolean output carries no gradient
            head = env[f"{name}{HEAD_GRAD_SUFFIX}"]
            if grad is None:
                head[...] = 1
            else:
                grad = grad.asnumpy() if isinstance(grad, NDArray) else np.asarray(grad)
                if grad.shape != tuple(head.shape):
                    raise BindError(f"out_grad for {name!r} has shape {grad.shape}, the output "
                                    f"has {tuple(head.shape)}")
                head[...] = self.device.backend.from_numpy(grad)
        compiled.execute(env, plan["split"])
        for name, value in plan["grads"].items():
            target = self.grad_dict[name]._data
            if self.grad_req[name] == "add":
                target += env[value]
            else:
                target[...] = env[value]

    def copy_params_from(self, arg_params: Mapping[str, Any],
                         aux_params: Mapping[str, Any] | None = None,
                         allow_extra_params: bool = False) -> None:
        for source, target in ((arg_params, self.arg_dict), (aux_params or {}, self.aux_dict)):
            for name, value in source.items():
                if name in target:
                    target[name][:] = value
                elif not allow_extra_params:
                    raise BindError(f"copy_params_from: {name!r} is not an argument of the "
                                    f"symbol")
