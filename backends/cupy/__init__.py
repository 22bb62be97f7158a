"""The CUDA backend, through CuPy (``pip install 'portable[cuda]'``).

``create_backend(device)`` opens ``portable.cuda(i)``: CUDA device ``i`` as CuPy numbers them
(``CUDA_VISIBLE_DEVICES`` narrows and reorders them, as for every CUDA program). Kernels are
the shared ones of ``backends.xp.kernels`` run with ``xp = cupy``, except the entries
``backends.cupy.overrides`` replaces or refuses, each with its reason.

Modules: ``device`` (the availability probe and why CUDA is absent), ``overrides`` (the
reviewed list; no CuPy import, so tests read it anywhere), ``scatter`` (overrides written over
``ctx.xp``), ``backend`` (the CupyBackend: arena from CuPy's memory pool, pinned host copies).
Importing this package does not import CuPy; ``create_backend`` does.

Example:
    >>> import portable as pt                                  # doctest: +SKIP
    >>> x = pt.nd.array([[1.0, -2.0]], device=pt.cuda(0))      # doctest: +SKIP
    >>> pt.nd.relu(x).asnumpy()                                # doctest: +SKIP
    array([[1., 0.]], dtype=float32)
"""
from __future__ import annotations

from portable.device import Device
from portable.errors import BackendError

from backends.cupy.device import probe


def create_backend(device: Device):
    """The backend of ``cuda(i)``; raises BackendError naming why CUDA is unavailable here."""
    status = probe()
    if not status.available:
        raise BackendError(f"CUDA is unavailable: {status.reason}")
    if not 0 <= device.device_id < status.device_count:
        raise BackendError(f"cuda({device.device_id}) does not exist: CuPy sees "
                           f"{status.device_count} CUDA device(s) (CUDA_VISIBLE_DEVICES="
                           f"{status.visible!r})")
    # (CuPy is imported here, after the probe succeeded: the package itself stays importable
    # without it, so the override list can be read on any machine)
    from backends.cupy.backend import CupyBackend

    return CupyBackend(device)
