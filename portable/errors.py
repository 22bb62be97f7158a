"""One exception hierarchy for portable.

Every error a user can trigger with bad input derives from :class:`PortableError`, and its message
names what failed (file, node, op, shape, device) and, where it can, what to do about it.
"""
from __future__ import annotations


class PortableError(Exception):
    """Base class of every error portable raises on purpose."""


class GraphError(PortableError):
    """A graph is malformed: dangling input, cycle, duplicate output name, bad order."""


class OpError(PortableError):
    """An op is unknown, or used with wrong arity or attributes."""


class UnknownOpError(OpError):
    """No declaration exists for the requested op name and domain."""


class OpAttributeError(OpError):
    """An attribute is missing, unknown or of the wrong kind."""


class ShapeError(PortableError):
    """Shapes or dtypes are inconsistent with an op's rule (names node, op and shapes)."""


class NotDifferentiableError(OpError):
    """A gradient was requested through an op that declares no gradient rule."""


class BackendError(PortableError):
    """A device or backend is unavailable, or a kernel is missing on it."""


class MissingKernelError(BackendError, NotImplementedError):
    """The backend has no kernel for this op: no silent fallback to another device."""


class MissingDependencyError(BackendError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class SerializationError(PortableError):
    """A saved file (symbol JSON, parameters, checkpoint) is malformed, truncated or corrupted."""


class EngineError(PortableError):
    """An op pushed to the dependency engine failed; raised at the next wait that depends on it."""


class BindError(PortableError):
    """Arguments given to bind() do not match the symbol (missing, extra or wrongly shaped)."""


class MemoryBudgetError(PortableError):
    """A plan needs more memory than the budget it was given (refused before it runs)."""
