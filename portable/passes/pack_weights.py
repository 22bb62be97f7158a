"""Keep packed weights packed: a 4- or 2-bit weight (int4, uint4, float4e2m1, int2, uint2) is held
as the bytes a file packs it in, and unpacked where it is used.

In memory NumPy (ml_dtypes) gives every such element a whole byte, twice (four times) what the
file stores. This pass replaces each such initializer by its packed bytes (ONNX's layout,
``portable.dtypes.pack_bits``) and a ``portable.UnpackBits`` node that produces the original
value under its original name, so the readers do not change. UnpackBits widens a weight, so
constant folding leaves it to run per use (``fold_constants``), into planned workspace that the
memory planner shares between layers: an int4 weight-only model holds its file's weight bytes.

Example:
    >>> packed = pack_sub_byte_weights(graph)   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from portable.dtypes import PACKED_BITS, is_low_precision, pack_bits, to_onnx
from portable.ir.graph import Graph, Node, fresh_name

PASS_NAME = "pack-sub-byte-weights"


def pack_sub_byte_weights(graph: Graph,
                          holds: Callable[[np.dtype], bool] = lambda dtype: True) -> Graph:
    """``graph`` with each packed-type initializer that the device ``holds`` kept packed.

    Args:
        graph: the graph.
        holds: whether the device holds a dtype (a weight it cannot hold is left for folding
            to widen once).

    Returns:
        The rewritten graph (``graph`` itself when no initializer is of a packed type).
    """
    packed = {name: value for name, value in graph.initializers.items()
              if is_low_precision(value.dtype) and to_onnx(value.dtype) in PACKED_BITS
              and holds(value.dtype)}
    if not packed:
        return graph
    initializers = {name: value for name, value in graph.initializers.items()
                    if name not in packed}
    unpack = []
    for name, value in packed.items():
        code = to_onnx(value.dtype)
        source = fresh_name(f"{name}.packed")
        initializers[source] = pack_bits(np.ascontiguousarray(value).view(np.uint8),
                                         PACKED_BITS[code])
        unpack.append(Node("portable.UnpackBits", (source,), (name,),
                           {"to": code, "shape": list(value.shape)}, f"unpack:{name}"))
    return graph.replace(nodes=tuple(unpack) + graph.nodes, initializers=initializers)
