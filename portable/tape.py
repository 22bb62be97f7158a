"""What autograd records, below NDArray: the recording and training switches (per thread) and
the tape of op applications that ``invoke`` appends to. ``portable.autograd`` walks the tape
backwards; NDArray code only writes to it, so the array layer never imports the backward pass.

Example:
    >>> from portable import tape
    >>> with tape.record():
    ...     tape.is_recording()
    True
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from portable.ops import registry

class _State(threading.local):
    # Class-level defaults: reading a switch never set in this thread finds these instead of
    # raising AttributeError inside getattr (a microsecond on every imperative op).
    recording = False
    training = False


_state = _State()


def is_recording() -> bool:
    """True inside ``record()`` (and not inside ``pause()``)."""
    return _state.recording


def is_training() -> bool:
    """True when ops run with training behaviour (Dropout active, BatchNorm batch statistics)."""
    return _state.training


def set_recording(flag: bool) -> bool:
    previous = is_recording()
    _state.recording = bool(flag)
    return previous


def set_training(flag: bool) -> bool:
    previous = is_training()
    _state.training = bool(flag)
    return previous


@contextmanager
def scope(recording: bool | None, training: bool | None) -> Iterator[None]:
    """Set recording and training (None: leave as is) for the block, then restore both."""
    old_rec, old_train = is_recording(), is_training()
    if recording is not None:
        _state.recording = recording
    if training is not None:
        _state.training = training
    try:
        yield
    finally:
        _state.recording, _state.training = old_rec, old_train


def record(train_mode: bool = True):
    """Record ops for differentiation (training behaviour by default)."""
    return scope(True, train_mode)


def pause(train_mode: bool = False):
    """Stop recording inside a ``record()`` block."""
    return scope(False, train_mode)


def train_mode():
    """Training behaviour without changing whether ops are recorded."""
    return scope(None, True)


def predict_mode():
    """Inference behaviour without changing whether ops are recorded."""
    return scope(None, False)


# -- the tape -------------------------------------------------------------------------------------


@dataclass(eq=False)
class TapeEntry:
    """One recorded op application."""

    op_name: str
    op: registry.OpDef
    attrs: dict
    inputs: list
    outputs: list


def needs_grad(array: Any) -> bool:
    """True for an array with attach_grad, or computed from one while recording."""
    return array is not None and (array._entry is not None or array._grad_req != "null")


def record_op(op_name: str, op: registry.OpDef, attrs: dict, inputs: Sequence[Any],
              outputs: Sequence[Any]) -> None:
    """Called by ``invoke`` for every op while recording."""
    if not any(needs_grad(x) for x in inputs):
        return
    entry = TapeEntry(op_name, op, dict(attrs), list(inputs), list(outputs))
    for index, out in enumerate(outputs):
        if out is not None:
            out._entry = (entry, index)
