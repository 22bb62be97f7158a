"""OpenCL kernels: RNN, LSTM and GRU and their backward ops (BPTT), with the time loop on the
host.

The recurrence is the shared one of ``backends/xp/recurrence.py`` run on device arrays: each
step enqueues one recurrent GEMM and the gate arithmetic, and the input projection and the
weight gradients are one GEMM each over all steps. What is OpenCL's own is the gate
activations: each (with the cell ``clip``) is one generated elementwise kernel, an ``Rnn<name>``
op of ``optable`` that shares its family kernels with every other elementwise op.
"""
from __future__ import annotations

from backends.opencl.allocator import host_value
from backends.opencl.elementwise import apply
from backends.opencl.kernels.table import kernel_table
from backends.xp.recurrence import RnnHooks, register_rnn_kernels

kernels, kernel = kernel_table()


class _Activation:
    """One gate activation with its parameters and the cell clip (0: none)."""

    def __init__(self, xp, name: str, alpha: float, beta: float, clip) -> None:
        self.name = f"Rnn{name}"
        self.params = [alpha, beta, 0.0 if clip is None else clip]

    def __call__(self, a):
        return apply(self.name, a, params=self.params)

    def backward(self, a, y, dy):
        """Gradient w.r.t. the pre-clip input ``a`` given the output ``y`` and its gradient."""
        return apply(f"{self.name}Grad", a, y, dy, params=self.params)


register_rnn_kernels(kernel, RnnHooks(_Activation, host_value))
