"""Built-in image datasets: scikit-learn's bundled digits (no download, the default), and MNIST
/ Fashion-MNIST read from local IDX files.

Samples are ``(image, label)`` with HWC images (MXNet's convention): uint8 for MNIST and
Fashion-MNIST, float32 in [0, 1] for digits; ``transforms.ToTensor`` makes them CHW float32.
``load_arrays`` returns a whole split as NCHW float32 arrays for fast training (MNIST and
Fashion-MNIST scaled to [0, 1]; digits standardised per pixel, ``load_digits_split``'s default).

MNIST and Fashion-MNIST are never downloaded: put the four IDX files (raw or ``.gz``) from
http://yann.lecun.com/exdb/mnist/ or https://github.com/zalandoresearch/fashion-mnist in a
folder and pass it as ``root``.

Example:
    >>> train = Digits(train=True)
    >>> image, label = train[0]
    >>> image.shape, image.dtype
    ((8, 8, 1), dtype('float32'))
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from portable.data import transforms  # noqa: F401  (gluon.data.vision.transforms)
from portable.data.dataset import Dataset, _Columns
from portable.data.digits import Split, load_digits_split
from portable.data.idx import read_idx
from portable.errors import PortableError, ShapeError

IDX_FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
DEFAULT_ROOT = Path(os.environ.get("PORTABLE_DATA", Path.home() / ".portable" / "datasets"))


def _find(root: Path, name: str) -> Path | None:
    for candidate in (name, name + ".gz", name.replace("-idx", ".idx"),
                      name.replace("-idx", ".idx") + ".gz"):
        path = root / candidate
        if path.is_file():
            return path
    return None


def _nd(image: np.ndarray) -> Any:
    from portable.ndarray.ndarray import array

    return array(image, dtype=image.dtype)


class _ImageDataset(Dataset):
    def __init__(self, images: np.ndarray, labels: np.ndarray,
                 transform: Callable[[Any, Any], Any] | None) -> None:
        self._images, self._labels, self._transform = images, labels, transform

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, idx: int) -> Any:
        # MXNet's items: the image an NDArray (HWC), the label a NumPy scalar
        image, label = _nd(self._images[idx]), self._labels[idx]
        if self._transform is not None:
            return self._transform(image, label)
        return image, label

    def get_batch(self, indices: Any) -> Any:
        if self._transform is not None:
            return super().get_batch(indices)
        index = np.asarray(indices, dtype=np.int64)  # one stacked copy, not one per sample
        return _Columns((self._images[index], self._labels[index]), single=False)


class MNIST(_ImageDataset):
    """MNIST handwritten digits from local IDX files: 28x28x1 uint8 images, int32 labels.

    Args:
        root: the folder holding ``train-images-idx3-ubyte`` (or ``.gz``) and the other three
            files (default ``$PORTABLE_DATA/mnist`` or ``~/.portable/datasets/mnist``).
        train: the 60,000 training images (True) or the 10,000 test images (False).
        transform: ``fn(image, label) -> sample``, applied on access.
    """

    folder = "mnist"
    title = "MNIST"
    url = "http://yann.lecun.com/exdb/mnist/"

    def __init__(self, root: str | os.PathLike | None = None, train: bool = True,
                 transform: Callable[[Any, Any], Any] | None = None) -> None:
        self.root = Path(root).expanduser() if root else DEFAULT_ROOT / self.folder
        image_file, label_file = (self._locate(name) for name in IDX_FILES[bool(train)])
        images, labels = read_idx(image_file), read_idx(label_file)
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ShapeError(f"{self.title} files {image_file.name} {list(images.shape)} and "
                             f"{label_file.name} {list(labels.shape)} do not form a dataset "
                             f"of (N, H, W) images and N labels")
        super().__init__(images[:, :, :, None], labels.astype(np.int32), transform)

    def _locate(self, name: str) -> Path:
        path = _find(self.root, name)
        if path is None:
            expected = ", ".join(n for pair in IDX_FILES.values() for n in pair)
            raise PortableError(
                f"{self.title}: {name} (or {name}.gz) not found in {self.root}. Put the four "
                f"IDX files ({expected}; raw or .gz) from {self.url} in that folder, or pass "
                f"the folder holding them (portable train --data-dir DIR). Nothing is "
                f"downloaded.")
        return path


class FashionMNIST(MNIST):
    """Fashion-MNIST (Zalando) from local IDX files, with the same file names as MNIST."""

    folder = "fashion-mnist"
    title = "Fashion-MNIST"
    url = "https://github.com/zalandoresearch/fashion-mnist"


class CIFAR10(_ImageDataset):
    """CIFAR-10 from its local binary batches (``cifar-10-batches-bin``): 32x32x3 uint8
    images, int32 labels, as MXNet's ``gluon.data.vision.CIFAR10`` gives them.

    Args:
        root: the folder holding ``data_batch_1.bin`` ... ``data_batch_5.bin`` and
            ``test_batch.bin`` (directly or in ``cifar-10-batches-bin/``).
        train: the five training batches (True) or the test batch (False).
        transform: ``fn(image, label) -> sample``, applied on access.
    """

    folder = "cifar10"
    record = 1 + 3 * 32 * 32  # a label byte, then the image's three 32x32 channel planes

    def __init__(self, root: str | os.PathLike | None = None, train: bool = True,
                 transform: Callable[[Any, Any], Any] | None = None) -> None:
        base = Path(root).expanduser() if root else DEFAULT_ROOT / self.folder
        if (base / "cifar-10-batches-bin").is_dir():
            base = base / "cifar-10-batches-bin"
        names = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
        parts = []
        for name in names:
            path = base / name
            if not path.is_file():
                raise PortableError(f"CIFAR10: {name} not found in {base}. Put the binary "
                                    f"batches of https://www.cs.toronto.edu/~kriz/cifar.html "
                                    f"there; nothing is downloaded.")
            size = path.stat().st_size
            if size % self.record or size > 10_001 * self.record:
                raise ShapeError(f"CIFAR10: {path} holds {size} bytes, not a whole number of "
                                 f"{self.record}-byte records (at most 10,001)")
            parts.append(np.fromfile(path, np.uint8).reshape(-1, self.record))
        raw = np.concatenate(parts)
        images = raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        super().__init__(np.ascontiguousarray(images), raw[:, 0].astype(np.int32), transform)


class Digits(_ImageDataset):
    """scikit-learn's bundled 8x8 digits (1,797 images; no download), split reproducibly.

    Args:
        train: the training part (80%) or the test part (20%).
        test_fraction: the share of images held out for testing.
        seed: seeds the split (fixed by default, so results compare across runs).
        transform: ``fn(image, label) -> sample``, applied on access.
    """

    def __init__(self, train: bool = True, test_fraction: float = 0.2, seed: int = 0,
                 transform: Callable[[Any, Any], Any] | None = None) -> None:
        split = load_digits_split(test_fraction, seed, standardize=False)
        images, labels = ((split.x_train, split.y_train) if train
                          else (split.x_test, split.y_test))
        super().__init__(np.ascontiguousarray(images.transpose(0, 2, 3, 1)),
                         labels.astype(np.int32), transform)


DATASETS = {"digits": Digits, "mnist": MNIST, "fashion-mnist": FashionMNIST,
            "cifar10": CIFAR10}


def load_arrays(name: str, root: str | os.PathLike | None = None) -> Split:
    """A whole dataset as NCHW float32 images and int64 labels, train and test.

    Args:
        name: ``digits``, ``mnist`` or ``fashion-mnist``.
        root: the folder of the IDX files (MNIST and Fashion-MNIST).

    Example:
        >>> load_arrays("digits").x_train.shape
        (1438, 1, 8, 8)
    """
    if name == "digits":
        return load_digits_split()
    cls = DATASETS.get(name)
    if cls is None:
        raise PortableError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    parts = []
    for train in (True, False):
        data = cls(root, train=train)
        images = data._images.transpose(0, 3, 1, 2).astype(np.float32) / 255.0
        parts += [np.ascontiguousarray(images), data._labels.astype(np.int64)]
    return Split(*parts)
