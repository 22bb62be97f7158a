"""Bitwise ops on integer tensors: BitwiseAnd/Or/Xor/Not and BitShift. Not differentiable.

BitShift follows its opset-28 form: signed integers too (a left shift wraps as the unsigned
bits do), and a shift count outside [0, bit width) gives 0, or -1 for a negative value shifted
right, instead of what C leaves undefined.
"""
from __future__ import annotations

from portable.ops.registry import Attr, declare
from portable.ops.rules import broadcast_elementwise, same_as_input


def _integers(rule):
    def infer(ctx):
        if ctx.dtype(0).kind not in "iu":
            ctx.fail(f"inputs must be integers, got {ctx.dtype(0).name}")
        return rule(ctx)
    return infer


def _shift_infer(ctx):
    if ctx.dtype(0).kind not in "iu":
        ctx.fail(f"BitShift takes integers, got {ctx.dtype(0).name}")
    if ctx.attrs["direction"] not in ("LEFT", "RIGHT"):
        ctx.fail(f"direction must be LEFT or RIGHT, got {ctx.attrs['direction']!r}")
    return broadcast_elementwise(ctx)


for _name in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
    declare(_name, inputs=("A", "B"), outputs=("C",), infer=_integers(broadcast_elementwise),
            onnx_since=18, fusion="elementwise")
declare("BitwiseNot", inputs=("X",), outputs=("Y",), infer=_integers(same_as_input),
        onnx_since=18, fusion="elementwise", inplace=((0, 0),))
# (not fusable: the direction is a string attribute, which fused kernels do not take)
declare("BitShift", inputs=("X", "Y"), outputs=("Z",), infer=_shift_infer, onnx_since=28,
        attrs={"direction": Attr("string")})
