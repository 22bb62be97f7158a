"""Memory: what a graph's plan holds, predicted before running and measured while running.

Example:
    >>> from portable.memory import prediction_profile
    >>> report = prediction_profile(graph, level="all")   # doctest: +SKIP
    >>> report.to_json()["planned_over_bound"]            # doctest: +SKIP
    1.0
"""
from portable.memory.measure import measure
from portable.memory.profile import (builtin_prediction_graph, builtin_training_graph,
                                     prediction_profile, random_feeds, training_profile)
from portable.memory.report import CATEGORIES, MemoryReport, memory_report
from portable.memory.training import TrainingGraph, training_graph

__all__ = ["CATEGORIES", "MemoryReport", "TrainingGraph", "builtin_prediction_graph",
           "builtin_training_graph", "measure", "memory_report", "prediction_profile",
           "random_feeds", "training_graph", "training_profile"]
