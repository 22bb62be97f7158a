"""``gluon.data.vision``: image datasets and transforms under MXNet's module paths.

Example:
    >>> import numpy as np
    >>> from portable.gluon.data.vision import transforms
    >>> transforms.ToTensor()(np.zeros((2, 2, 3), np.uint8)).shape
    (3, 2, 2)
"""
from portable.gluon.data.vision import datasets, transforms
from portable.gluon.data.vision.datasets import CIFAR10, MNIST, FashionMNIST

__all__ = ["CIFAR10", "FashionMNIST", "MNIST", "datasets", "transforms"]
