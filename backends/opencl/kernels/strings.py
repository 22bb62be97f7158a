"""OpenCL kernels of the string family: refusals by name.

String tensors never reach the device: ``CompiledGraph`` refuses a plan that would hold one on
OpenCL, naming the tensor. The string ops still have an entry here so that the refusal names
the string tensor rather than a missing kernel. TfIdfVectorizer also takes int32 / int64 token
ids, but counting n-grams is a dictionary lookup per window of a variable pool, with no OpenCL
kernel written: it runs on the CPU (or through the explicit fallback, with copies).
"""
from __future__ import annotations

from backends.opencl.fallback import host_only_kernel
from backends.opencl.kernels.table import kernel_table

kernels, kernel = kernel_table()

for _op in ("StringConcat", "StringSplit", "RegexFullMatch", "StringNormalizer"):
    kernel(_op, half="native")(host_only_kernel(
        _op, lambda attrs, op=_op: f"{op} computes on host strings (Python str objects)"))

kernel("TfIdfVectorizer", half="native")(host_only_kernel(
    "TfIdfVectorizer", lambda attrs: "TfIdfVectorizer counts pool n-grams with a dictionary "
                                     "lookup per window (no OpenCL kernel is written)"))
