"""MXNet scripts' import forms for Gluon data work with ``mxnet`` -> ``portable``, and the item
types, dtypes and shapes are MXNet 1.9.1's (those are recorded in ``fixtures/gluon_data.json``,
run by test_recorded_answers.py; this file checks the module paths and the loader's thread)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import portable as mx


@pytest.mark.parametrize("statement", [
    "from portable.gluon.data import DataLoader, ArrayDataset, Dataset, SimpleDataset, sampler",
    "from portable.gluon.data.vision import transforms, datasets",
    "from portable.gluon.data.vision.transforms import ToTensor, Normalize, Compose, Resize, "
    "CenterCrop, RandomResizedCrop, RandomFlipLeftRight, Cast",
    "from portable.gluon.data.vision.datasets import MNIST, FashionMNIST, CIFAR10",
    "from portable.gluon.data.vision import MNIST, FashionMNIST, CIFAR10",
    "from portable.gluon.data.sampler import Sampler, SequentialSampler, RandomSampler, "
    "BatchSampler",
    "import portable.gluon.data as gdata",
    "import portable.gluon.data.vision.transforms",
    "from portable.gluon.contrib.nn import Identity, HybridConcurrent, Concurrent, "
    "SyncBatchNorm, PixelShuffle1D, PixelShuffle2D, PixelShuffle3D",
])
def test_import_forms(statement):
    exec(statement, {})  # noqa: S102 - the statements above


def test_attribute_paths_are_the_same_modules():
    gdata = importlib.import_module("portable.gluon.data")
    assert mx.gluon.data is gdata
    assert mx.gluon.data.vision.transforms.ToTensor is gdata.vision.transforms.ToTensor
    assert mx.gluon.data.DataLoader is importlib.import_module("portable.data").DataLoader


def test_loader_reads_ndarray_samples_on_its_thread():
    # NDArray samples are read (asnumpy) while batching: that must work with prefetching
    t = mx.gluon.data.vision.transforms
    images = mx.nd.array(np.arange(6 * 4 * 4 * 3).reshape(6, 4, 4, 3) % 256, dtype="uint8")
    ds = mx.gluon.data.ArrayDataset(images, np.arange(6, dtype="int32"))
    loader = mx.gluon.data.DataLoader(ds.transform_first(t.Compose([t.ToTensor(),
                                                                    t.Normalize(0.5, 0.5)])),
                                      batch_size=4, prefetch=2)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(4, 3, 4, 4), (2, 3, 4, 4)]
    assert batches[0][0].dtype == np.float32 and batches[0][1].dtype == np.int32
    expected = (images.asnumpy()[:4].transpose(0, 3, 1, 2) / 255.0 - 0.5) / 0.5
    np.testing.assert_allclose(batches[0][0].asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_cifar10_reads_local_binary_batches(tmp_path):
    rng = np.random.default_rng(0)
    records = np.concatenate([rng.integers(0, 10, (3, 1)), rng.integers(0, 256, (3, 3072))],
                             axis=1).astype(np.uint8)
    records.tofile(tmp_path / "test_batch.bin")
    ds = mx.gluon.data.vision.CIFAR10(root=str(tmp_path), train=False)
    image, label = ds[1]
    assert isinstance(image, mx.nd.NDArray) and image.shape == (32, 32, 3)
    assert image.dtype == np.uint8 and label == records[1, 0]
    np.testing.assert_array_equal(image.asnumpy(),
                                  records[1, 1:].reshape(3, 32, 32).transpose(1, 2, 0))
    (tmp_path / "test_batch.bin").write_bytes(b"\0" * 100)
    with pytest.raises(mx.errors.ShapeError, match="test_batch.bin"):
        mx.gluon.data.vision.CIFAR10(root=str(tmp_path), train=False)
