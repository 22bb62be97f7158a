"""Predefined and pretrained models (MXNet 1.x ``gluon.model_zoo``).

``vision`` holds MXNet's image classifiers with its exact architectures and structural parameter
names, so parameter files written by MXNet (``save_parameters``, or the published pretrained
files under ``~/.mxnet/models``) load by name.

Example:
    >>> from portable.gluon.model_zoo import vision
    >>> net = vision.get_model("resnet18_v1", classes=10)
"""
from portable.gluon.model_zoo import model_store, vision

__all__ = ["model_store", "vision"]
