"""Kernels written once over the array namespace ``ctx.xp``, shared by the backends whose arrays
follow NumPy's API: the NumPy backend registers this table as it is, and a CuPy backend reuses
it with ``xp = cupy``, overriding only the entries where it has something faster or where NumPy
features have no CuPy counterpart.

This package is not a backend (it has no device); backends may import it, it imports no
backend.
"""
