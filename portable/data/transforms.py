"""Image transforms (MXNet ``gluon.data.vision.transforms``): NDArray (or NumPy) images in,
NDArrays out, as MXNet's are.

Images are HWC (height, width, channels; a 2-D image is one channel) until ``ToTensor``
turns them into CHW float32 in [0, 1]; ``Normalize`` works on CHW. Sizes are given as MXNet
gives them, ``(width, height)``. Random transforms draw from their own generator, seeded from
``portable.random`` when created, so ``portable.random.seed`` makes them reproducible. The
pixels are computed on the host (a sample is small), then handed out as one NDArray.

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


def _host(image: Any) -> np.ndarray:
    return image.asnumpy() if hasattr(image, "asnumpy") else np.asarray(image)


def _nd(image: np.ndarray) -> Any:
    from portable.ndarray.ndarray import array

    image = np.ascontiguousarray(image)
    return array(image, dtype=image.dtype)


def _hwc(image: Any, name: str) -> np.ndarray:
    image = _host(image)
    if image.ndim == 2:
        return image[:, :, None]
    if image.ndim != 3:
        raise ShapeError(f"{name} expects an HWC image, got shape {list(image.shape)}")
    return image


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
        out = image.astype(np.float32) / np.float32(255.0)  # (MXNet divides any dtype)
        return _nd(out.transpose(2, 0, 1))


class Normalize:
    """``(x - mean) / std`` per channel of a CHW float image.

    Args:
        mean, std: one value, or one per channel.
    """

    def __init__(self, mean: float | Sequence[float] = 0.0,
                 std: float | Sequence[float] = 1.0) -> None:
        self.mean = np.asarray(mean, np.float32).reshape(-1, 1, 1)
        self.std = np.asarray(std, np.float32).reshape(-1, 1, 1)

    def __call__(self, image: Any) -> Any:
        image = _host(image)
        if image.ndim != 3 or self.mean.shape[0] not in (1, image.shape[0]):
            raise ShapeError(f"Normalize with {self.mean.shape[0]} channel(s) cannot apply to "
                             f"a CHW image of shape {list(image.shape)}")
        return _nd(((image - self.mean) / self.std).astype(image.dtype))


class RandomCrop:
    """Pad the borders by ``pad`` (with ``pad_value``), then crop a random ``size`` window.

    Args:
        size: the output (width, height), as MXNet gives it, or one int for a square.
        pad: pixels added on each side first (0: none).
        pad_value: the padding value.
        seed: seeds this transform's generator.
    """

    def __init__(self, size: int | Sequence[int], pad: int = 0, pad_value: float = 0,
                 seed: int | None = None) -> None:
        width, height = (size, size) if isinstance(size, int) else tuple(size)
        self.size = (int(height), int(width))
        self.pad, self.pad_value = int(pad or 0), pad_value
        self._rng = random.child(seed)

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
        return _nd(image[top:top + height, left:left + width])


class RandomFlipLeftRight:
    """Mirror an HWC image horizontally with probability ``p``."""

    def __init__(self, p: float = 0.5, seed: int | None = None) -> None:
        self.p = float(p)
        self._rng = random.child(seed)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        image = _hwc(image, "RandomFlipLeftRight")
        return _nd(image[:, ::-1] if self._rng.random() < self.p else image)


class Cast:
    """Convert to ``dtype``."""

    def __init__(self, dtype: Any = np.float32) -> None:
        self.dtype = np.dtype(dtype)

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return _nd(_host(image).astype(self.dtype))


def _size(size: int | Sequence[int]) -> tuple[int, int]:
    """MXNet's ``size``: one int (a square) or (width, height); returns (height, width)."""
    if isinstance(size, (int, np.integer)):
        return int(size), int(size)
    width, height = (int(v) for v in size)
    return height, width


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resampling of an HWC image with pixel centres aligned (OpenCV's
    ``INTER_LINEAR``, which MXNet's image functions use); integer images are rounded."""
    in_h, in_w = image.shape[:2]

    def weights(out_size: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        pos = (np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5
        pos = np.clip(pos, 0, in_size - 1)
        low = np.floor(pos).astype(np.int64)
        high = np.minimum(low + 1, in_size - 1)
        return low, high, (pos - low)

    y0, y1, fy = weights(height, in_h)
    x0, x1, fx = weights(width, in_w)
    data = image.astype(np.float64)
    top = data[y0][:, x0] * (1 - fx)[None, :, None] + data[y0][:, x1] * fx[None, :, None]
    bottom = data[y1][:, x0] * (1 - fx)[None, :, None] + data[y1][:, x1] * fx[None, :, None]
    out = top * (1 - fy)[:, None, None] + bottom * fy[:, None, None]
    if image.dtype.kind in "iu":
        info = np.iinfo(image.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return out.astype(image.dtype)


class Resize:
    """Resize an HWC image to ``size`` ((width, height) or one int), or, with ``keep_ratio``
    and an int size, its shorter side to ``size``."""

    def __init__(self, size: int | Sequence[int], keep_ratio: bool = False,
                 interpolation: int = 1) -> None:
        self.size, self.keep_ratio = size, bool(keep_ratio)

    def __call__(self, image: Any) -> Any:
        image = _hwc(image, "Resize")
        if self.keep_ratio and isinstance(self.size, (int, np.integer)):
            h, w = image.shape[:2]
            scale = self.size / min(h, w)
            height, width = (int(self.size), int(w * scale)) if h <= w else \
                (int(h * scale), int(self.size))
        else:
            height, width = _size(self.size)
        return _nd(resize_bilinear(image, height, width))


class CenterCrop:
    """Crop the centre ``size`` ((width, height) or one int) of an HWC image (resized up
    first when it is smaller)."""

    def __init__(self, size: int | Sequence[int], interpolation: int = 1) -> None:
        self.height, self.width = _size(size)

    def __call__(self, image: Any) -> Any:
        image = _hwc(image, "CenterCrop")
        h, w = image.shape[:2]
        if h < self.height or w < self.width:
            image = resize_bilinear(image, max(h, self.height), max(w, self.width))
            h, w = image.shape[:2]
        top, left = (h - self.height) // 2, (w - self.width) // 2
        return _nd(image[top:top + self.height, left:left + self.width])


class RandomResizedCrop:
    """Crop a random window of ``scale`` of the area and aspect ``ratio``, resized to ``size``
    ((width, height) or one int); falls back to a centre crop after ten tries."""

    def __init__(self, size: int | Sequence[int], scale: tuple = (0.08, 1.0),
                 ratio: tuple = (3.0 / 4.0, 4.0 / 3.0), interpolation: int = 1,
                 seed: int | None = None) -> None:
        self.height, self.width = _size(size)
        self.scale, self.ratio = scale, ratio
        self._rng = random.child(seed)

    def __call__(self, image: Any) -> Any:
        image = _hwc(image, "RandomResizedCrop")
        h, w = image.shape[:2]
        for _ in range(10):
            area = h * w * self._rng.uniform(*self.scale)
            aspect = np.exp(self._rng.uniform(np.log(self.ratio[0]), np.log(self.ratio[1])))
            cw, ch = int(round(np.sqrt(area * aspect))), int(round(np.sqrt(area / aspect)))
            if 0 < cw <= w and 0 < ch <= h:
                top = int(self._rng.integers(h - ch + 1))
                left = int(self._rng.integers(w - cw + 1))
                crop = image[top:top + ch, left:left + cw]
                return _nd(resize_bilinear(crop, self.height, self.width))
        side = min(h, w)
        top, left = (h - side) // 2, (w - side) // 2
        return _nd(resize_bilinear(image[top:top + side, left:left + side], self.height,
                                   self.width))


class RandomFlipTopBottom:
    """Mirror an HWC image vertically with probability 0.5."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.child(seed)

    def __call__(self, image: Any) -> Any:
        image = _hwc(image, "RandomFlipTopBottom")
        return _nd(image[::-1] if self._rng.random() < 0.5 else image)
