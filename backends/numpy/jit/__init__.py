"""The compiled CPU tier: numba loops for the kernels NumPy is structurally slow at.

NumPy runs sliding windows as one strided op per kernel offset (pools) or as im2col plus a
batch of tiny GEMMs (depthwise Conv); a compiled loop over each plane does the same work in
one pass without copies. ``kernels`` maps op names to overrides of the xp kernel table; each
override handles one narrow configuration (2-D, float32/float64, C-contiguous) and calls the
xp kernel it replaces for everything else.

numba is imported lazily: the overrides are stubs that import their module (and numba) when
first prepared, so using the cpu device costs nothing until a pool or depthwise Conv runs.
Should numba be installed yet fail to import, the stubs warn once and run the xp kernels.
Loops are compiled once per dtype and cached on disk, in a folder named by a digest of this
package's sources (``cache_folder``, set when the first loop module loads) unless
``NUMBA_CACHE_DIR`` names one.

Example:
    >>> from backends.numpy import jit
    >>> jit.available()            # doctest: +SKIP
    True
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Callable

from backends.xp.kernels import conv as xp_conv
from backends.xp.kernels import elementwise as xp_elementwise
from backends.xp.kernels import fused as xp_fused
from backends.xp.kernels import linalg as xp_linalg
from backends.xp.kernels import nn as xp_nn
from backends.xp.kernels import rnn as xp_rnn
from portable.backend import PreparedKernel, bound_kernel
from portable.cache_dirs import cache_dir

# op -> (module of this package that compiles it, the xp kernel it overrides)
OVERRIDES: dict[str, tuple[str, Callable]] = {
    "MaxPool": ("max_pool", xp_conv.max_pool),
    "portable.MaxPoolGrad": ("max_pool", xp_conv.max_pool_grad),
    "AveragePool": ("average_pool", xp_conv.average_pool),
    "portable.AveragePoolGrad": ("average_pool", xp_conv.average_pool_grad),
    "Conv": ("plain_conv", xp_conv.conv),  # (dense plan, small loop, then depthwise)
    "portable.FusedConv": ("fused_conv", xp_fused.fused_conv),  # (bias and Relu/Clip inside)
    # (dense Convs' gradients, then depthwise ones)
    "ConvTranspose": ("conv_grads", xp_conv.conv_transpose),
    "portable.ConvGradWeight": ("conv_grads", xp_conv.conv_grad_weight),
    # (per-channel Mul/Add chains: one pass over each plane)
    "portable.FusedElementwise": ("channel_chain", xp_fused.fused_elementwise),
    "Where": ("select", xp_elementwise.where),  # (gradient masks: a blend, not a branch)
    "Gemm": ("small_gemm", xp_linalg.gemm),  # (a few rows: no weight packing)
    "portable.FusedGemm": ("small_gemm", xp_fused.kernels["portable.FusedGemm"]),
    "LayerNormalization": ("normalize", xp_nn.layer_normalization),  # (one call a row set)
    "Softmax": ("normalize", xp_nn.softmax_kernel),
    "LSTM": ("recurrent", xp_rnn.kernels["LSTM"]),
    "GRU": ("recurrent", xp_rnn.kernels["GRU"]),
}

_loaded: dict[str, Callable] = {}


def cache_folder(package: Path = Path(__file__).parent) -> Path:
    """Where numba caches the loops of ``package`` (this one): ``cache_dir("numba")`` / a
    digest of every module of the package. numba keys a cached loop by its own file's
    timestamp only, so a loop that inlines or calls one from another module here kept that
    module's old code after it changed (seen after an edit of ``depthwise.bound``; an
    upgrade of portable that changes one module would do the same). A new digest is a new
    folder: everything compiles afresh, once."""
    digest = hashlib.sha256()
    for source in sorted(package.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return cache_dir("numba") / digest.hexdigest()[:16]


def point_numba_cache() -> None:
    """Set ``NUMBA_CACHE_DIR`` to ``cache_folder()`` before the loops are decorated (numba
    picks a loop's cache folder then), unless the user set it; a folder that cannot be
    written leaves numba's default (``__pycache__`` beside the modules). ``support`` calls
    it before it imports numba (every loop module imports ``support`` first), so that using
    the backend without a compiled kernel sets nothing and hashes nothing."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    folder = cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return
    os.environ["NUMBA_CACHE_DIR"] = str(folder)  # (numba imported later, and child processes)
    config = sys.modules.get("numba.core.config")
    if config is not None:  # (numba already imported: it read its environment then)
        config.CACHE_DIR = str(folder)



def available() -> bool:
    """Whether numba is installed (it is not imported here)."""
    return importlib.util.find_spec("numba") is not None


def enabled() -> bool:
    """Whether the NumPy backend should use the compiled tier: numba is installed and the
    environment variable PORTABLE_JIT is not ``0``."""
    return os.environ.get("PORTABLE_JIT", "1") != "0" and available()


def _load(op: str) -> Callable:
    """The compiled kernel of ``op``, importing its module on first use; the xp kernel (after
    one warning) when numba cannot be imported."""
    kernel = _loaded.get(op)
    if kernel is None:
        module, fallback = OVERRIDES[op]
        try:
            kernel = importlib.import_module(f"{__name__}.{module}").kernels[op]
        except (ImportError, OSError) as exc:  # (llvmlite's library can fail to load too)
            warnings.warn(f"the compiled CPU kernels are off: numba failed to import ({exc}); "
                          f"{op} runs on the NumPy kernel", RuntimeWarning, stacklevel=3)
            kernel = fallback
        _loaded[op] = kernel
    return kernel


class _Stub(PreparedKernel):
    """A table entry whose bound form is the compiled kernel's own bound call (``bind``), not
    a call through the stub's ``run`` (one Python call less per step)."""

    def bind(self, backend, input_types: list, output_types: list, attrs: dict) -> Callable:
        return self.prepare(backend, input_types, output_types, attrs)


def _stub(op: str, fallback: Callable) -> PreparedKernel:
    """The table entry of ``op``: at plan time it loads the compiled kernel (importing numba
    on first use) and prepares it; at run time it calls what was prepared."""
    def prepare(backend, input_types, output_types, attrs):
        return bound_kernel(_load(op), backend, input_types, output_types, attrs)

    def run(bound, ctx, inputs, outputs, attrs):
        return bound(ctx, inputs, outputs, attrs)

    run.__name__ = run.__qualname__ = getattr(fallback, "__name__", op)
    run.__doc__ = f"Compiled {op} (backends.numpy.jit), else the xp kernel."
    def held(input_types, output_types, attrs) -> int:
        rule = getattr(_load(op), "held", None)  # (what the compiled kernel keeps, if any)
        return 0 if rule is None else rule(input_types, output_types, attrs)

    def workspace(input_types, output_types, attrs):
        rule = getattr(_load(op), "workspace", None) or fallback.workspace
        return rule(input_types, output_types, attrs)

    kernel = _Stub(run, prepare)
    if getattr(fallback, "workspace", None) is not None:
        # The compiled kernel's rule where it has one (it may take more than the xp kernel).
        kernel.workspace = workspace
    kernel.held = held
    return kernel


kernels: dict[str, Callable] = {op: _stub(op, fallback)
                                for op, (_, fallback) in OVERRIDES.items()}
