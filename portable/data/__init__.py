"""Datasets and data loading (MXNet ``gluon.data``): Dataset, ArrayDataset, samplers, a
prefetching DataLoader, built-in image datasets and transforms.

Example:
    >>> import numpy as np
    >>> from portable.data import ArrayDataset, DataLoader
    >>> loader = DataLoader(ArrayDataset(np.ones((8, 2)), np.arange(8)), batch_size=4,
    ...                     shuffle=True)
    >>> len(loader)
    2
"""
from portable.data import transforms, vision
from portable.data.dataloader import DataLoader, default_batchify_fn
from portable.data.dataset import ArrayDataset, Dataset, SimpleDataset
from portable.data.sampler import (BatchSampler, RandomSampler, Sampler,
                                   SequentialSampler)

__all__ = ["ArrayDataset", "BatchSampler", "DataLoader", "Dataset", "RandomSampler", "Sampler",
           "SequentialSampler", "SimpleDataset", "default_batchify_fn", "transforms", "vision"]
