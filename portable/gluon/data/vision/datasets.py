"""``gluon.data.vision.datasets``: MNIST, FashionMNIST and CIFAR10 read from local files
(never downloaded); items are (uint8 HWC NDArray, int32 label) as MXNet's."""
from portable.data.vision import CIFAR10, MNIST, Digits, FashionMNIST

__all__ = ["CIFAR10", "Digits", "FashionMNIST", "MNIST"]
