"""The backend-neutral graph IR."""
from portable.ir.builder import GraphBuilder, toposort
from portable.ir.graph import PRIVATE_DOMAIN, Graph, Node, TensorType, fresh_name
from portable.ir.printer import format_graph
from portable.ir.verify import verify_structure

__all__ = ["Graph", "GraphBuilder", "Node", "PRIVATE_DOMAIN", "TensorType", "format_graph",
           "fresh_name", "toposort", "verify_structure"]
