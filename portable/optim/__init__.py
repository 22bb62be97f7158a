"""Optimizers, learning-rate schedules and updaters (MXNet 1.x ``mx.optimizer`` names).

Every update is one op pushed to the dependency engine that writes the weight and its state in
place; states are saved as safetensors plus JSON, never pickle.

Example:
    >>> import portable as pt
    >>> opt = pt.optim.create("sgd", learning_rate=0.1, momentum=0.9)
    >>> sched = pt.optim.lr_scheduler.CosineScheduler(max_update=100, base_lr=0.1)
    >>> opt = pt.optim.Adam(learning_rate=1e-3, lr_scheduler=sched)
"""
from portable.optim import lr_scheduler
from portable.optim.adaptive import AdaGrad, Adam, AdamW, RMSProp
from portable.optim.optimizer import Optimizer, create, from_config, optimizers, register
from portable.optim.sgd import NAG, SGD
from portable.optim.updater import Updater, get_updater

Optimizer.create_optimizer = staticmethod(create)  # MXNet's Optimizer.create_optimizer
Optimizer.register = staticmethod(register)
Optimizer.opt_registry = optimizers

__all__ = ["AdaGrad", "Adam", "AdamW", "NAG", "Optimizer", "RMSProp", "SGD", "Updater", "create",
           "from_config", "get_updater", "lr_scheduler", "optimizers", "register"]
