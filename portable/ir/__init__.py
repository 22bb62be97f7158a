"""The backend-neutral graph IR."""
from portable.ir.builder import GraphBuilder, toposort
from portable.ir.graph import PRIVATE_DOMAIN, Graph, Node, TensorType, fresh_name
from portable.ir.printer import format_graph
from portable.ir.types import OptionalType, SequenceType, ValueType, is_tensor
from portable.ir.verify import verify_structure

__all__ = ["Graph", "GraphBuilder", "Node", "OptionalType", "PRIVATE_DOMAIN", "SequenceType",
           "TensorType", "ValueType", "format_graph", "fresh_name", "is_tensor", "toposort",
           "verify_structure"]
