"""``gluon.data`` as MXNet 1.x scripts import it (``from mxnet.gluon.data import DataLoader``,
``from mxnet.gluon.data.vision import transforms, datasets``): the names of ``portable.data``
under MXNet's module paths. The implementations live in ``portable.data``.

Example:
    >>> import numpy as np
    >>> from portable.gluon.data import ArrayDataset, DataLoader
    >>> len(DataLoader(ArrayDataset(np.ones((6, 2))), batch_size=4))
    2
"""
from portable.gluon.data import sampler
from portable.data.dataloader import DataLoader, default_batchify_fn
from portable.data.dataset import ArrayDataset, Dataset, SimpleDataset
from portable.data.sampler import (BatchSampler, RandomSampler, Sampler,
                                   SequentialSampler)
from portable.gluon.data import vision

__all__ = ["ArrayDataset", "BatchSampler", "DataLoader", "Dataset", "RandomSampler", "Sampler",
           "SequentialSampler", "SimpleDataset", "default_batchify_fn", "sampler", "vision"]
