"""Recurrent layers (MXNet 1.x ``gluon.rnn``) on the ONNX LSTM and GRU ops."""
from portable.gluon.rnn.rnn_layer import GRU, LSTM

__all__ = ["GRU", "LSTM"]
