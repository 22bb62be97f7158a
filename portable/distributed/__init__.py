"""Helpers for data-parallel training scripts on the distributed kvstores.

* :func:`shard` gives each worker its share of the samples;
* :func:`join` ends an epoch in which workers had different numbers of batches, then makes
  every replica equal to the most advanced one;
* :func:`save_on_root` and :func:`resume` make rank 0 write checkpoints and every rank resume
  from the same one (rank 0 chooses it and sends the parameters and optimizer states, so no
  shared disk is needed).

Nothing here imports MPI: the store does, when it is created.

Example (under ``portable launch -n 2 -- python train.py``):
    >>> kv = pt.kv.create("dist_sync")                                   # doctest: +SKIP
    >>> x_mine, y_mine = x[shard(len(x), kv)], y[shard(len(x), kv)]      # doctest: +SKIP
    >>> for batch in batches: ...; trainer.step(batch_size * kv.num_workers)  # doctest: +SKIP
    >>> join(trainer)                                                    # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["join", "resume", "save_on_root", "shard"]


def shard(length: int, kv: Any, even: bool = True) -> np.ndarray:
    """The indices of the samples of worker ``kv.rank``: ``rank, rank + n, rank + 2n ...``.

    Args:
        length: number of samples.
        kv: the store (None or a single-process store: every index).
        even: drop the last ``length % n`` samples so that every worker gets as many (and,
            with the same batch size, as many batches: no ``join`` needed).

    Example:
        >>> shard(7, None).tolist()
        [0, 1, 2, 3, 4, 5, 6]
    """
    rank, workers = (0, 1) if kv is None else (kv.rank, kv.num_workers)
    if even:
        length -= length % workers
    return np.arange(rank, length, workers)


def join(trainer: Any) -> int:
    """End an epoch with uneven batches: wait for every worker, then copy the replica of the
    worker that took the most steps (parameters and optimizer states) to all.

    Args:
        trainer: a ``gluon.Trainer`` on a distributed store (after at least one step).

    Returns:
        The rank whose replica was copied.
    """
    kv = trainer.kvstore
    if kv is None or kv.num_workers == 1:
        return 0
    root = kv.join()
    params = trainer._params
    if hasattr(kv, "broadcast_arrays"):  # replicas: copy the most advanced one
        kv.broadcast_arrays([p.list_data()[0] for p in params], root)
        if trainer.update_on_kvstore:
            kv.broadcast_arrays([kv._store[i] for i in range(len(params))], root)
        states = kv.broadcast_bytes(trainer.get_states() if kv.rank == root else None, root)
        trainer.set_states(states, f"<optimizer states of rank {root}>",
                           restore_optimizer=False)
        for param in params:
            first, *others = param.list_data()
            for copy in others:
                first.copyto(copy)
    else:  # parameter servers hold the weights: pull them
        for index, param in enumerate(params):
            kv.pull(index, out=param.list_data())
    return root


def save_on_root(kv: Any, write: Callable[[], Any]) -> Any:
    """Run ``write()`` on rank 0 only, then wait until it is done on every worker.

    Returns:
        ``write()``'s result on rank 0, None elsewhere.
    """
    result = write() if kv is None or kv.rank == 0 else None
    if kv is not None:
        kv.barrier()
    return result


def resume(kv: Any, manager: Any) -> Any:
    """The newest good checkpoint of ``manager`` (a ``CheckpointManager``) on every worker:
    rank 0 loads and verifies it, every worker receives the same parameters and states.

    Returns:
        A ``Checkpoint`` (None on every worker when there is none).
    """
    import json

    from portable.checkpoint import Checkpoint
    from portable.io.tensors import tensors_from_bytes, tensors_to_bytes

    if kv is None or kv.num_workers == 1:
        return manager.latest()
    found = manager.latest() if kv.rank == 0 else None
    head = json.dumps(None if found is None else
                      {"manifest": found.manifest, "path": str(found.path)}).encode()
    meta = json.loads(kv.broadcast_bytes(head if kv.rank == 0 else None).decode())
    if meta is None:
        return None
    params = kv.broadcast_bytes(tensors_to_bytes(found.params) if kv.rank == 0 else None)
    states = kv.broadcast_bytes(found.states if kv.rank == 0 else None)
    if kv.rank == 0:
        return found
    from pathlib import Path

    tensors, _ = tensors_from_bytes(params, f"<checkpoint {meta['path']} from rank 0>")
    return Checkpoint(meta["manifest"], tensors, states, Path(meta["path"]))
