"""Host kernels of the string ops (StringConcat, StringSplit, RegexFullMatch, StringNormalizer,
TfIdfVectorizer): the text algorithms of ``portable.ops.strings`` applied to object arrays of
str, written into the preallocated outputs.

String tensors are always host NumPy object arrays (no device array type holds Python str), so
these kernels loop over Python lists; only TfIdfVectorizer's integer tokens may come from a
device array (CuPy), and it reads them through the backend's host copy.
"""
from __future__ import annotations

import numpy as np

from portable.backend import kernel_table
from portable.ops.strings import (compiled_pattern, normalize_strings, split_strings,
                                  tfidf_counts, tfidf_weighted)

kernels, kernel = kernel_table()


def _fill(out: np.ndarray, items: list) -> None:
    """Write a list of Python objects into ``out`` in C order (a flat object array first, so
    that NumPy never reads a str as a sequence)."""
    flat = np.empty(len(items), dtype=out.dtype)
    flat[:] = items
    out[...] = flat.reshape(out.shape)


@kernel("StringConcat")
def string_concat(ctx, inputs, outputs, attrs):
    x, y = np.broadcast_arrays(*inputs)
    _fill(outputs[0], [a + b for a, b in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist())])


@kernel("RegexFullMatch")
def regex_full_match(ctx, inputs, outputs, attrs):
    pattern = compiled_pattern(attrs["pattern"])
    matched = [pattern.fullmatch(v) is not None for v in inputs[0].reshape(-1).tolist()]
    outputs[0][...] = np.asarray(matched, dtype=bool).reshape(outputs[0].shape)


@kernel("StringSplit")
def string_split(ctx, inputs, outputs, attrs):
    y, z = outputs
    parts = split_strings(inputs[0].reshape(-1).tolist(), attrs["delimiter"], attrs["maxsplit"])
    width = y.shape[-1]
    _fill(y, [piece for pieces in parts  # padded with empty strings to the widest
              for piece in pieces + [""] * (width - len(pieces))])
    z[...] = np.asarray([len(p) for p in parts], np.int64).reshape(z.shape)


@kernel("StringNormalizer")
def string_normalizer(ctx, inputs, outputs, attrs):
    # (the type rule sized the output from the same strings)
    _fill(outputs[0], normalize_strings(inputs[0].reshape(-1).tolist(), attrs))


@kernel("TfIdfVectorizer")
def tfidf_vectorizer(ctx, inputs, outputs, attrs):
    x = inputs[0]
    if x.dtype != object:
        x = np.asarray(ctx.backend.to_numpy(x))
    rows = x.reshape(-1, x.shape[-1]).tolist() if x.ndim == 2 else [x.tolist()]
    y = outputs[0]
    weighted = tfidf_weighted(tfidf_counts(rows, attrs, y.shape[-1]), attrs)
    y[...] = ctx.xp.asarray(weighted.reshape(y.shape))
