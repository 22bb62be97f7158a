"""``gluon.data.vision.transforms``: image transforms giving NDArrays (``portable.data``'s)."""
from portable.data.transforms import (Cast, CenterCrop, Compose, Normalize, RandomCrop,
                                      RandomFlipLeftRight, RandomFlipTopBottom,
                                      RandomResizedCrop, Resize, ToTensor)

__all__ = ["Cast", "CenterCrop", "Compose", "Normalize", "RandomCrop", "RandomFlipLeftRight",
           "RandomFlipTopBottom", "RandomResizedCrop", "Resize", "ToTensor"]
