"""IDX files, MNIST/Fashion-MNIST from local files, digits, and image transforms."""
from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from portable.data import transforms as T
from portable.data.idx import read_idx, write_idx
from portable.data.vision import MNIST, Digits, FashionMNIST, load_arrays
from portable.errors import PortableError, SerializationError, ShapeError


def _raw_idx(array: np.ndarray, code: int) -> bytes:
    """An IDX file built by hand from the format description (not with write_idx)."""
    header = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("dtype,code", [(np.uint8, 0x08), (np.int16, 0x0B), (np.int32, 0x0C),
                                        (np.float32, 0x0D), (np.float64, 0x0E)])
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_raw_and_gzip(tmp_path, dtype, code, gz):
    array = (np.arange(24).reshape(2, 3, 4) * 3).astype(dtype)
    data = _raw_idx(array, code)
    path = tmp_path / ("x.idx.gz" if gz else "x.idx")
    path.write_bytes(gzip.compress(data) if gz else data)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype) and np.array_equal(out, array)
    write_idx(tmp_path / "copy.gz", array)
    assert np.array_equal(read_idx(tmp_path / "copy.gz"), array)


def test_malformed_idx_is_refused(tmp_path):
    good = _raw_idx(np.zeros((2, 2), np.uint8), 0x08)
    for name, data, match in [("magic", b"\x01" + good[1:], "magic"),
                              ("type", good[:2] + b"\x07" + good[3:], "data type"),
                              ("short", good[:-1], "needs 4 data bytes")]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(SerializationError, match=match) as info:
            read_idx(path)
        assert name in str(info.value)


def test_idx_sizes_are_checked_before_the_data_is_read(tmp_path):
    """A header declaring 2^31 x 2^31 x 2^31 float64 (a count an int64 product wraps to 0), one
    over the byte limit, and a gzip stream holding more than its header says: all refused, the
    last without inflating the rest of its 64 MiB of zeros."""
    huge = bytes([0, 0, 0x0E, 3]) + struct.pack(">III", 1 << 31, 1 << 31, 1 << 31)
    (tmp_path / "huge").write_bytes(huge)
    with pytest.raises(SerializationError, match="declares .* more than the"):
        read_idx(tmp_path / "huge")
    over = _raw_idx(np.zeros(100, np.uint8), 0x08)
    (tmp_path / "over").write_bytes(over)
    with pytest.raises(SerializationError, match="100 data bytes, more than the 99-byte limit"):
        read_idx(tmp_path / "over", limit=99)
    bomb = gzip.compress(_raw_idx(np.zeros(4, np.uint8), 0x08) + bytes(64 << 20))
    (tmp_path / "bomb.gz").write_bytes(bomb)
    with pytest.raises(SerializationError, match="needs 4 data bytes, the file has more"):
        read_idx(tmp_path / "bomb.gz")


def _write_mnist(root, n_train=12, n_test=5, gz=True):
    rng = np.random.default_rng(0)
    suffix = ".gz" if gz else ""
    root.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28)).astype(np.uint8)
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        for kind, array, code in (("images-idx3", images, 0x08), ("labels-idx1", labels, 0x08)):
            data = _raw_idx(array, code)
            (root / f"{prefix}-{kind}-ubyte{suffix}").write_bytes(
                gzip.compress(data) if gz else data)
    return images, labels  # the test split's


@pytest.mark.parametrize("cls,gz", [(MNIST, True), (FashionMNIST, False)])
def test_mnist_from_local_idx_files(tmp_path, cls, gz):
    images, labels = _write_mnist(tmp_path, gz=gz)
    train, test = cls(tmp_path, train=True), cls(tmp_path, train=False)
    assert len(train) == 12 and len(test) == 5
    image, label = test[3]
    assert image.shape == (28, 28, 1) and image.dtype == np.uint8
    assert np.array_equal(image[:, :, 0], images[3]) and label == labels[3]
    split = load_arrays("mnist" if cls is MNIST else "fashion-mnist", tmp_path)
    assert split.x_test.shape == (5, 1, 28, 28) and split.x_test.dtype == np.float32
    np.testing.assert_allclose(split.x_test[3, 0], images[3] / 255.0, rtol=1e-6)


def test_missing_mnist_files_name_what_is_expected(tmp_path):
    with pytest.raises(PortableError) as info:
        MNIST(tmp_path / "empty")
    text = str(info.value)
    assert "train-images-idx3-ubyte" in text and "t10k-labels-idx1-ubyte" in text
    assert str(tmp_path / "empty") in text


def test_digits_dataset():
    train, test = Digits(train=True), Digits(train=False)
    assert len(train) + len(test) == 1797
    image, label = train[0]
    assert image.shape == (8, 8, 1) and 0 <= image.min() and image.max() <= 1
    assert 0 <= label < 10


def test_transforms():
    image = np.arange(2 * 3 * 2, dtype=np.uint8).reshape(2, 3, 2) * 20
    chw = T.ToTensor()(image)
    assert chw.shape == (2, 2, 3) and chw.dtype == np.float32
    np.testing.assert_allclose(chw, image.transpose(2, 0, 1) / 255.0)
    norm = T.Normalize(mean=[0.5, 0.25], std=[2.0, 4.0])(chw)
    np.testing.assert_allclose(norm[1], (chw[1] - 0.25) / 4.0)
    flip = T.RandomFlipLeftRight(p=1.0)(image)
    assert np.array_equal(flip, image[:, ::-1])
    assert np.array_equal(T.RandomFlipLeftRight(p=0.0)(image), image)


def test_random_crop_with_padding_is_a_window_of_the_padded_image():
    image = np.arange(16, dtype=np.uint8).reshape(4, 4, 1) + 1
    padded = np.pad(image, ((2, 2), (2, 2), (0, 0)))
    crop = T.RandomCrop(4, pad=2, seed=0)
    windows = {(top, left) for top in range(5) for left in range(5)}
    seen = set()
    for _ in range(60):
        out = crop(image)
        match = [(top, left) for top, left in windows
                 if np.array_equal(padded[top:top + 4, left:left + 4], out)]
        assert match
        seen.add(match[0])
    assert len(seen) > 5
    with pytest.raises(ShapeError, match="larger"):
        T.RandomCrop(9)(image)
