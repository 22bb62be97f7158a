"""Multi-layer LSTM and GRU layers (MXNet 1.x ``gluon.rnn.LSTM``/``GRU``).

Parameters keep MXNet's names, shapes and gate order (``l0_i2h_weight`` of shape
(gates * hidden, input); LSTM gates i, f, g, o; GRU gates r, z, n), so weights trained with
MXNet load unchanged. Each layer runs as one ONNX LSTM/GRU op (bidirectional layers as one
op with ``direction='bidirectional'``); ``hybrid_forward`` gathers the gate blocks into ONNX's
order (LSTM i, o, f, c; GRU z, r, h) and GRU uses ``linear_before_reset=1``, which is the
cuDNN/MXNet formulation ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.

Example:
    >>> import portable as pt
    >>> layer = LSTM(8, num_layers=2); layer.initialize()
    >>> layer(pt.nd.ones((5, 3, 4))).shape      # (T, N, C) -> (T, N, hidden)
    (5, 3, 8)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import PortableError
from portable.gluon.block import HybridBlock

# MXNet gate blocks in ONNX order: position k of ONNX's layout takes MXNet's block ORDER[k].
_GATE_ORDER = {"lstm": (0, 3, 1, 2), "gru": (1, 0, 2)}


class _RNNLayer(HybridBlock):
    """Shared body of LSTM and GRU."""

    def __init__(self, mode: str, hidden_size: int, num_layers: int, layout: str,
                 dropout: float, bidirectional: bool, input_size: int,
                 i2h_weight_initializer: Any, h2h_weight_initializer: Any,
                 i2h_bias_initializer: Any, h2h_bias_initializer: Any, dtype: Any,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if layout not in ("TNC", "NTC"):
            raise PortableError(f"layout must be 'TNC' or 'NTC', got {layout!r}")
        self._mode, self._hidden_size, self._num_layers = mode, hidden_size, num_layers
        self._layout, self._dropout = layout, float(dropout)
        self._dir = 2 if bidirectional else 1
        self._gates = len(_GATE_ORDER[mode])
        self._input_size = input_size
        rows = self._gates * hidden_size
        with self.name_scope():
            inputs = input_size
            for layer in range(num_layers):
                for d in "lr"[:self._dir]:
                    self._register(f"{d}{layer}_i2h_weight", (rows, inputs),
                                   i2h_weight_initializer, dtype)
                    self._register(f"{d}{layer}_h2h_weight", (rows, hidden_size),
                                   h2h_weight_initializer, dtype)
                    self._register(f"{d}{layer}_i2h_bias", (rows,), i2h_bias_initializer, dtype)
                    self._register(f"{d}{layer}_h2h_bias", (rows,), h2h_bias_initializer, dtype)
                inputs = hidden_size * self._dir
        self._rows = np.concatenate([np.arange(k * hidden_size, (k + 1) * hidden_size)
                                     for k in _GATE_ORDER[mode]]).tolist()

    def _register(self, name: str, shape: tuple, init: Any, dtype: Any) -> None:
        setattr(self, name, self.params.get(name, shape=shape, init=init, dtype=dtype,
                                            allow_deferred_init=True))

    def __repr__(self) -> str:
        inputs = self._reg_params["l0_i2h_weight"].shape[1] or None
        return (f"{type(self).__name__}({inputs} -> {self._hidden_size}, {self._layout}, "
                f"num_layers={self._num_layers}, bidirectional={self._dir == 2})")

    def state_info(self, batch_size: int = 0) -> list[dict]:
        shape = (self._num_layers * self._dir, batch_size, self._hidden_size)
        count = 2 if self._mode == "lstm" else 1
        return [{"shape": shape, "__layout__": "LNC"} for _ in range(count)]

    def begin_state(self, batch_size: int = 0, func: Any = None, **kwargs: Any) -> list:
        """Zero initial states: ``[h]`` (GRU) or ``[h, c]`` (LSTM), each (layers * dirs, N,
        hidden)."""
        if func is None:
            from portable import ndarray as nd

            func = nd.zeros
        return [func(info["shape"], **kwargs) for info in self.state_info(batch_size)]

    def infer_shape(self, inputs: Any, *args: Any) -> None:
        for d in "lr"[:self._dir]:
            self._reg_params[f"{d}0_i2h_weight"].shape = (self._gates * self._hidden_size,
                                                          inputs.shape[2])

    def __call__(self, inputs: Any, states: Any = None) -> Any:
        """Returns the output sequence, and the final states too when ``states`` is given."""
        from portable.ndarray import NDArray
        from portable.symbol import Symbol

        skip_states = states is None
        if isinstance(states, (NDArray, Symbol)):
            states = [states]
        out = super().__call__(inputs, states)
        return out[0] if skip_states else out

    def _onnx_weights(self, F: Any, params: dict, layer: int) -> tuple:
        """W, R and B of one layer, gates reordered and directions stacked as ONNX wants."""
        stacked = []
        for kind in ("i2h_weight", "h2h_weight", "bias"):
            per_dir = []
            for d in "lr"[:self._dir]:
                if kind == "bias":
                    value = F.concat(*[F.gather(params[f"{d}{layer}_{k}_bias"], self._rows,
                                                axis=0) for k in ("i2h", "h2h")], axis=0)
                else:
                    value = F.gather(params[f"{d}{layer}_{kind}"], self._rows, axis=0)
                per_dir.append(F.unsqueeze(value, [0]))
            stacked.append(per_dir[0] if len(per_dir) == 1 else F.concat(*per_dir, axis=0))
        return tuple(stacked)

    def hybrid_forward(self, F: Any, inputs: Any, states: Any = None, **params: Any) -> Any:
        x = F.transpose(inputs, perm=[1, 0, 2]) if self._layout == "NTC" else inputs
        direction = "bidirectional" if self._dir == 2 else "forward"
        count = len(self.state_info())
        finals: list[list] = [[] for _ in range(count)]
        for layer in range(self._num_layers):
            w, r, b = self._onnx_weights(F, params, layer)
            initial = [None] * count if states is None else [
                F.slice(s, [layer * self._dir], [(layer + 1) * self._dir], [0]) for s in states]
            if self._mode == "lstm":
                y, *final = F.lstm(x, w, r, b, None, *initial, hidden_size=self._hidden_size,
                                   direction=direction, num_outputs=3)
            else:
                y, *final = F.gru(x, w, r, b, None, *initial, hidden_size=self._hidden_size,
                                  direction=direction, linear_before_reset=1, num_outputs=2)
            # Y is (T, directions, N, hidden); the next layer reads (T, N, directions * hidden)
            x = F.reshape(F.transpose(y, perm=[0, 2, 1, 3]), [0, 0, -1])
            if self._dropout and layer < self._num_layers - 1:
                x = F.dropout(x, self._dropout)
            for store, value in zip(finals, final):
                store.append(value)
        out = F.transpose(x, perm=[1, 0, 2]) if self._layout == "NTC" else x
        return out, [s[0] if len(s) == 1 else F.concat(*s, axis=0) for s in finals]


class LSTM(_RNNLayer):
    """Multi-layer (bidirectional) LSTM, MXNet 1.x ``gluon.rnn.LSTM``.

    Args:
        hidden_size: the hidden state size.
        num_layers: stacked layers.
        layout: ``'TNC'`` (time major, default) or ``'NTC'``.
        dropout: dropout between layers in training.
        bidirectional: run each layer in both directions (outputs concatenated).
        input_size: 0 infers it on the first forward pass.
        i2h/h2h weight/bias initializers, dtype: as in MXNet.

    Calling ``layer(x)`` returns the output; ``layer(x, [h, c])`` returns ``(output, [h, c])``.
    """

    def __init__(self, hidden_size: int, num_layers: int = 1, layout: str = "TNC",
                 dropout: float = 0.0, bidirectional: bool = False, input_size: int = 0,
                 i2h_weight_initializer: Any = None, h2h_weight_initializer: Any = None,
                 i2h_bias_initializer: Any = "zeros", h2h_bias_initializer: Any = "zeros",
                 projection_size: int | None = None, h2r_weight_initializer: Any = None,
                 state_clip_min: float | None = None, state_clip_max: float | None = None,
                 state_clip_nan: bool = False, dtype: Any = "float32", **kwargs: Any) -> None:
        if projection_size is not None or state_clip_min is not None or \
                state_clip_max is not None or state_clip_nan:
            raise PortableError("LSTM projection_size and state clipping are not supported")
        super().__init__("lstm", hidden_size, num_layers, layout, dropout, bidirectional,
                         input_size, i2h_weight_initializer, h2h_weight_initializer,
                         i2h_bias_initializer, h2h_bias_initializer, dtype, **kwargs)


class GRU(_RNNLayer):
    """Multi-layer (bidirectional) GRU, MXNet 1.x ``gluon.rnn.GRU``; arguments as for LSTM.

    Calling ``layer(x)`` returns the output; ``layer(x, [h])`` returns ``(output, [h])``.
    """

    def __init__(self, hidden_size: int, num_layers: int = 1, layout: str = "TNC",
                 dropout: float = 0.0, bidirectional: bool = False, input_size: int = 0,
                 i2h_weight_initializer: Any = None, h2h_weight_initializer: Any = None,
                 i2h_bias_initializer: Any = "zeros", h2h_bias_initializer: Any = "zeros",
                 dtype: Any = "float32", **kwargs: Any) -> None:
        super().__init__("gru", hidden_size, num_layers, layout, dropout, bidirectional,
                         input_size, i2h_weight_initializer, h2h_weight_initializer,
                         i2h_bias_initializer, h2h_bias_initializer, dtype, **kwargs)
