"""Gradient compression for the distributed stores (MXNet's ``set_gradient_compression``).

* ``fp16``: each rank sends its gradient rounded to float16 (half the bytes);
* ``2bit`` (MXNet's scheme, with error feedback): each rank adds the gradient to its residual,
  sends ``+threshold`` where the residual reached ``threshold``, ``-threshold`` where it reached
  ``-threshold`` and 0 elsewhere (2 bits per value, 16x fewer bytes), and keeps what it did not
  send in the residual, so nothing is lost, only delayed.

A compressed bucket is reduced by an ``Allgather`` of every rank's payload followed by a local
decode-and-sum (the sum of quantised values is not itself quantised, so it cannot be reduced
with MPI's ``SUM``). Every rank decodes the payloads in rank order, so all get the same floats.

Example:
    >>> codec = create_compressor({"type": "2bit", "threshold": 0.5})
    >>> payload = np.empty(codec.payload_nbytes(4), np.uint8)
    >>> codec.encode(np.array([0.7, -0.2, -0.6, 0.1], np.float32), payload, ("w", 0), 4, 0)
    >>> out = np.zeros(4, np.float32); codec.decode_add(payload, out); out.tolist()
    [0.5, 0.0, -0.5, 0.0]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import PortableError


class Compressor:
    """Turns float32 pieces into byte payloads and back (``decode_add`` accumulates)."""

    name = "none"

    def payload_nbytes(self, numel: int) -> int:
        raise NotImplementedError

    def encode(self, values: np.ndarray, out: np.ndarray, residual_key: Any, total: int,
               start: int) -> None:
        """Write the payload of ``values`` (elements ``start..`` of a tensor of ``total``
        elements identified by ``residual_key``; None: no error feedback, e.g. a rank that
        contributes zeros) into the uint8 array ``out``."""
        raise NotImplementedError

    def decode_add(self, payload: np.ndarray, out: np.ndarray) -> None:
        """``out += decode(payload)``."""
        raise NotImplementedError

    def config(self) -> dict:
        return {"type": self.name}


class FP16Compressor(Compressor):
    """Send float16: half the bytes, relative rounding error below 2**-11."""

    name = "fp16"

    def payload_nbytes(self, numel: int) -> int:
        return 2 * numel

    def encode(self, values: np.ndarray, out: np.ndarray, residual_key: Any, total: int,
               start: int) -> None:
        out.view(np.float16)[:] = values

    def decode_add(self, payload: np.ndarray, out: np.ndarray) -> None:
        out += payload.view(np.float16)


class TwoBitCompressor(Compressor):
    """MXNet's 2-bit quantisation with error feedback (one residual per tensor).

    Args:
        threshold: the magnitude sent for a quantised value (MXNet's default 0.5).
    """

    name = "2bit"

    def __init__(self, threshold: float = 0.5) -> None:
        if not threshold > 0:
            raise PortableError(f"2bit compression: threshold must be positive, got {threshold}")
        self.threshold = float(threshold)
        self._residuals: dict[Any, np.ndarray] = {}

    def payload_nbytes(self, numel: int) -> int:
        return (numel + 3) // 4

    def residual(self, key: Any, total: int) -> np.ndarray:
        """The error-feedback residual of tensor ``key`` (zeros at first)."""
        found = self._residuals.get(key)
        if found is None or found.size != total:
            found = self._residuals[key] = np.zeros(total, np.float32)
        return found

    def encode(self, values: np.ndarray, out: np.ndarray, residual_key: Any, total: int,
               start: int) -> None:
        t = self.threshold
        if residual_key is None:
            acc = values.astype(np.float32, copy=True)
        else:
            acc = self.residual(residual_key, total)[start:start + values.size]
            acc += values
        pos, neg = acc >= t, acc <= -t
        if residual_key is not None:  # keep what was not sent
            acc[pos] -= t
            acc[neg] += t
        codes = np.zeros(4 * out.size, np.uint8)
        codes[:values.size] = pos.view(np.uint8) | (neg.view(np.uint8) << 1)
        quads = codes.reshape(-1, 4)
        out[:] = quads[:, 0] | (quads[:, 1] << 2) | (quads[:, 2] << 4) | (quads[:, 3] << 6)

    def decode_add(self, payload: np.ndarray, out: np.ndarray) -> None:
        codes = np.empty((payload.size, 4), np.uint8)
        for i in range(4):
            codes[:, i] = (payload >> (2 * i)) & 3
        codes = codes.reshape(-1)[:out.size]
        out += self.threshold * ((codes == 1).astype(np.float32) - (codes == 2))

    def config(self) -> dict:
        return {"type": self.name, "threshold": self.threshold}


def create_compressor(params: dict | None) -> Compressor | None:
    """A compressor from MXNet-style parameters (``{"type": "2bit", "threshold": 0.5}``).

    Args:
        params: None or ``{"type": "none"}`` for no compression, ``fp16`` or ``2bit``.

    Returns:
        The compressor, or None.
    """
    if not params:
        return None
    if not isinstance(params, dict) or "type" not in params:
        raise PortableError(f"gradient compression parameters must be a dict with a 'type' "
                            f"(none, fp16 or 2bit), got {params!r}")
    params = dict(params)
    kind = str(params.pop("type")).lower()
    if kind == "none":
        return None
    if kind == "fp16":
        if params:
            raise PortableError(f"fp16 compression takes no parameters, got {sorted(params)}")
        return FP16Compressor()
    if kind == "2bit":
        unknown = set(params) - {"threshold"}
        if unknown:
            raise PortableError(f"2bit compression: unknown parameters {sorted(unknown)} "
                                f"(accepted: threshold)")
        return TwoBitCompressor(float(params.get("threshold", 0.5)))
    raise PortableError(f"unknown gradient compression type {kind!r}; accepted: none, fp16, "
                        f"2bit")
