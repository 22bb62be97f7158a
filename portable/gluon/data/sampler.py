"""``gluon.data.sampler``: the samplers of ``portable.data.sampler`` under MXNet's path."""
from portable.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["BatchSampler", "RandomSampler", "Sampler", "SequentialSampler"]
