"""Image transforms (MXNet ``gluon.data.vision.transforms``) on NumPy images.

Images are HWC (height, width, channels; a 2-D image is one channel) until ``ToTensor``
turns them into CHW float32 in [0, 1]; ``Normalize`` works on CHW. Random transforms draw from
their own generator, seeded from ``portable.random`` when created, so ``portable.random.seed``
makes them reproducible.

Example:
    >>> import numpy as np
    >>> t = Compose([RandomCrop(28, pad=2), ToTensor(), Normalize(0.1307, 0.3081)])
    >>> t(np.zeros((28, 28, 1), np.uint8)).shape
    (1, 28, 28)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from portable import random
from portable.errors import ShapeError


def _hwc(image: np.ndarray, name: str) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim == 2:
        return image[:, :, None]
    if image.ndim != 3:
        raise ShapeError(f"{name} expects an HWC image, got shape {list(image.shape)}")
    return image


def _generator(seed: int | None) -> np.random.Generator:
    if seed is None:
        seed = int(random.generator().integers(2 ** 63))
    return np.random.default_rng(seed)


class Compose:
    """Apply transforms in order."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, x: Any) -> Any:
        for transform in self.transforms:
            x = transform(x)
        return x


class ToTensor:
    """HWC uint8 in [0, 255] -> CHW float32 in [0, 1] (float input is only transposed)."""

    def __call__(self, image: np.ndarray) -> np.ndarray:
        image = _hwc(image, "ToTensor")
        out = image.astype(np.float32)
        if image.dtype == np.uint8:
            out /= 255.0
        return np.ascontiguousarray(out.transpose(2, 0, 1))


class Normalize:
    """``(x - mean) / std`` per channel of a CHW float image.

    Args:
        mean, std: one value, or one per channel.
    """

    def __init__(self, mean: float | Sequence[float] = 0.0,
                 std: float | Sequence[float] = 1.0) -> None:
        self.mean = np.asarray(mean, np.float32).reshape(-1, 1, 1)
        self.std = np.asarray(std, np.float32).reshape(-1, 1, 1)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        image = np.asarray(image, np.float32)
        if image.ndim != 3 or self.mean.shape[0] not in (1, image.shape[0]):
            raise ShapeError(f"Normalize with {self.mean.shape[0]} channel(s) cannot apply to "
                             f"a CHW image of shape {list(image.shape)}")
        return (image - self.mean) / self.std


class RandomCrop:
    """Pad the borders by ``pad`` (with ``pad_value``), then crop a random ``size`` window.

    Args:
        size: the output (height, width), or one int for a square.
        pad: pixels added on each side first (0: none).
        pad_value: the padding value.
        seed: seeds this transform's generator.
    """

    def __init__(self, size: int | Sequence[int], pad: int = 0, pad_value: float = 0,
                 seed: int | None = None) -> None:
        self.size = (size, size) if isinstance(size, int) else tuple(size)
        self.pad, self.pad_value = int(pad), pad_value
        self._rng = _generator(seed)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        image = _hwc(image, "RandomCrop")
        if self.pad:
            p = self.pad
            image = np.pad(image, ((p, p), (p, p), (0, 0)), constant_values=self.pad_value)
        height, width = self.size
        if image.shape[0] < height or image.shape[1] < width:
            raise ShapeError(f"RandomCrop {list(self.size)} is larger than the (padded) image "
                             f"{list(image.shape[:2])}")
        top = int(self._rng.integers(image.shape[0] - height + 1))
        left = int(self._rng.integers(image.shape[1] - width + 1))
        return image[top:top + height, left:left + width]


class RandomFlipLeftRight:
    """Mirror an HWC image horizontally with probability ``p``."""

    def __init__(self, p: float = 0.5, seed: int | None = None) -> None:
        self.p = float(p)
        self._rng = _generator(seed)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        image = _hwc(image, "RandomFlipLeftRight")
        return image[:, ::-1] if self._rng.random() < self.p else image


class Cast:
    """Convert to ``dtype``."""

    def __init__(self, dtype: Any = np.float32) -> None:
        self.dtype = np.dtype(dtype)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return np.asarray(image).astype(self.dtype)
