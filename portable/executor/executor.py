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
from portable.engine import get_engine
from portable.errors import BindError
from portable.executor.compiled import CompiledGraph
from portable.ir.graph import Graph, TensorType
from portable.ndarray.ndarray import NDArray
from portable.ndarray import ndarray as nd
from portable.executor.training_plan import build_plan
from portable.passes.autodiff import HEAD_GRAD_SUFFIX

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
        self._plans: dict[bool, dict] = {}
        self._last_plan: dict | None = None
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

    def _plan(self, training: bool) -> dict:
        plan = self._plans.get(training)
        if plan is not None:
            return plan
        wrt = [n for n, req in self.grad_req.items() if req != "null"] if training else []
        trained = build_plan(self._graph, self.device, training, wrt)
        compiled = trained.compiled
        backend = self.device.backend
        heads = {}
        for out, name in trained.head_grads.items():
            type_: TensorType = compiled.type_of(name)
            heads[out] = backend.empty(type_.shape, type_.dtype)
        outputs = []
        for out in self._graph.outputs:
            type_ = compiled.type_of(out)
            outputs.append(NDArray(backend.empty(type_.shape, type_.dtype), self.device))
        plan = {"compiled": compiled, "updates": trained.updates, "grads": trained.grads,
                "heads": heads, "split": trained.split, "outputs": outputs,
                "state": get_engine().new_var("executor-activations"), "env": None}
        self._plans[training] = plan
        return plan

    # -- running ---------------------------------------------------------------------------
    def forward(self, is_train: bool = False, **kwargs: Any) -> list[NDArray]:
        """Push the forward pass to the engine (copying ``kwargs`` into the bound arguments
        first); returns the output NDArrays, which are ready when read."""
        for name, value in kwargs.items():
            if name not in self.arg_dict:
                raise BindError(f"forward: unknown argument {name!r}")
            self.arg_dict[name][:] = value
        plan = self._plan(bool(is_train))
        compiled: CompiledGraph = plan["compiled"]
        arrays = {**self.arg_dict, **self.aux_dict}
        aux = self.aux_dict
        outputs = plan["outputs"]
        names = self._graph.outputs

        def run() -> None:
            feeds = {n: a._data for n, a in arrays.items()}
            feeds.update({f"{out}{HEAD_GRAD_SUFFIX}": h for out, h in plan["heads"].items()})
            env = compiled.bind(feeds)
            compiled.execute(env, 0, plan["split"])
            plan["env"] = env
            for state, value in plan["updates"].items():
                aux[state]._data[...] = env[value]
            for array, name in zip(outputs, names):
                # Copied into the output's own buffer rather than swapped in: a view taken of
                # the output before this op ran (``out[:n]``, made at push time) must see it.
                array._data[...] = env[name]

        reads = [a._var for a in arrays.values()]
        writes = [o._var for o in outputs] + [a._var for a in aux.values()] + [plan["state"]]
        get_engine().push(run, reads=reads, writes=writes, device=self.device, name="forward")
        # The gradient segment reads the bound arguments' buffers through ``env`` (the weights
        # for dX, the data for dW), so it must also hold them against later writes such as an
        # optimizer's in-place update pushed right after backward().
        plan["bound_vars"] = reads
        self._last_plan = plan if is_train else None
        self.outputs = list(outputs)
        return self.outputs

    def backward(self, out_grads: Any = None) -> None:
        """Push the gradient segment; ``out_grads`` default to ones for every output."""
        plan = self._last_plan
        if plan is None:
            raise BindError("backward() needs a preceding forward(is_train=True)")
        outs = list(self._graph.outputs)
        if out_grads is None:
            out_grads = [None] * len(outs)
        elif isinstance(out_grads, (NDArray, np.ndarray)):
            out_grads = [out_grads]
        if len(out_grads) != len(outs):
            raise BindError(f"backward got {len(out_grads)} out_grads for {len(outs)} outputs")
        backend = self.device.backend
        reads = [plan["state"], *plan["bound_vars"]]
        fills = []
        for name, grad in zip(outs, out_grads):
            head = plan["heads"].get(name)
            if head is None:
                continue  # an integer or boolean output carries no gradient
            if grad is None:
                fills.append((head, 1))
                continue
            if isinstance(grad, NDArray):
                reads.append(grad._var)
            else:
                grad = backend.from_numpy(np.asarray(grad, dtype=head.dtype))
            if tuple(grad.shape) != tuple(head.shape):
                raise BindError(f"out_grad for {name!r} has shape {tuple(grad.shape)}, the "
                                f"output has {tuple(head.shape)}")
            fills.append((head, grad))
        compiled: CompiledGraph = plan["compiled"]
        targets = {n: self.grad_dict[n] for n in plan["grads"]}
        reqs = self.grad_req

        def run() -> None:
            env = plan["env"]
            for head, value in fills:
                head[...] = value._data if isinstance(value, NDArray) else value
            compiled.execute(env, plan["split"])
            for name, value in plan["grads"].items():
                if reqs[name] == "add":
                    targets[name]._data += env[value]
                else:
                    targets[name]._data[...] = env[value]

        writes = [t._var for t in targets.values()]
        get_engine().push(run, reads=reads + writes, writes=writes + [plan["state"]],
                          device=self.device, name="backward")

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
