"""String ops: StringConcat, StringSplit, RegexFullMatch, StringNormalizer and TfIdfVectorizer
(whose input may also be int32 / int64 token ids). Equal compares strings too (elementwise.py).

String tensors are NumPy object arrays of Python str (``portable.dtypes.STRING``). They live on
the host: the memory planner gives them their own arrays outside the byte arena, and a backend
without host arrays refuses them. StringSplit's and StringNormalizer's output shapes depend on
the strings themselves, so their input is a ``shape_inputs`` entry: planning needs its value
(a constant, or a graph input that the ONNX backend plans with its value).

The text algorithms are written once here, as plain functions over Python lists, and both the
type rules (for the data-dependent shapes) and the kernels (``backends/xp/kernels/strings.py``)
use them. None of these ops is differentiable.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from portable.dtypes import STRING
from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import broadcast_shapes, dtypes_of

TOKEN_DTYPES = (np.dtype(np.int32), np.dtype(np.int64), STRING)


def _require_strings(ctx, *indices: int) -> None:
    for i in indices:
        if ctx.dtype(i) != STRING:
            ctx.fail(f"input {ctx.op.input_name(i)!r} must be a string tensor, got "
                     f"{ctx.dtype(i).name}")


def _need_value(ctx, index: int, why: str) -> np.ndarray:
    if not ctx.known(index):
        ctx.fail(f"{why} depends on the strings of {ctx.op.input_name(index)!r}, which are only "
                 f"known at run time; give them as a constant (or through the ONNX backend, "
                 f"which plans with the values of such inputs)")
    return ctx.value(index)


# -- StringConcat and RegexFullMatch -------------------------------------------------------------


def _concat_infer(ctx):
    _require_strings(ctx, 0, 1)
    return [TensorType(broadcast_shapes(ctx, [ctx.shape(0), ctx.shape(1)]), STRING)]


declare("StringConcat", inputs=("X", "Y"), outputs=("Z",), infer=_concat_infer,
        onnx_since=20)


def compiled_pattern(pattern: str) -> re.Pattern:
    """RegexFullMatch's pattern, compiled with Python's ``re`` (onnx.reference does the same;
    ONNX names RE2 syntax, of which ``re`` accepts all but a few rarely used classes)."""
    return re.compile(pattern)


def _regex_infer(ctx):
    _require_strings(ctx, 0)
    try:
        compiled_pattern(ctx.attrs["pattern"])
    except re.error as exc:
        ctx.fail(f"pattern {ctx.attrs['pattern']!r} is not a valid regular expression: {exc}")
    return [TensorType(ctx.shape(0), np.bool_)]


declare("RegexFullMatch", inputs=("X",), outputs=("Y",), infer=_regex_infer, onnx_since=20,
        attrs={"pattern": Attr("string", "")}, dtype_rule=dtypes_of(np.bool_, inputs=()))

# -- StringSplit ---------------------------------------------------------------------------------


def split_strings(values: Sequence[str], delimiter: str, maxsplit: int | None
                  ) -> list[list[str]]:
    """Each string split as Python's ``str.split`` does: an empty delimiter splits on runs of
    whitespace (dropping leading and trailing whitespace), at most ``maxsplit`` times."""
    limit = -1 if maxsplit is None else int(maxsplit)
    return [str(v).split(delimiter or None, limit) for v in values]


def _split_infer(ctx):
    _require_strings(ctx, 0)
    maxsplit = ctx.attrs["maxsplit"]
    if maxsplit is not None and maxsplit < 0:
        ctx.fail(f"maxsplit must be >= 0, got {maxsplit}")
    x = _need_value(ctx, 0, "the length of the last axis of Y (the most substrings)")
    parts = split_strings(x.reshape(-1).tolist(), ctx.attrs["delimiter"], maxsplit)
    widest = max((len(p) for p in parts), default=0)
    return [TensorType(ctx.shape(0) + (widest,), STRING), TensorType(ctx.shape(0), np.int64)]


declare("StringSplit", inputs=("X",), outputs=("Y", "Z"), infer=_split_infer, onnx_since=20,
        attrs={"delimiter": Attr("string", ""), "maxsplit": Attr("int", None)},
        shape_inputs=(0,), dtype_rule=dtypes_of(STRING, np.int64, inputs=()))

# -- StringNormalizer ----------------------------------------------------------------------------

CASE_ACTIONS = ("NONE", "LOWER", "UPPER")


def normalize_strings(values: Sequence[str], attrs: dict) -> list[str]:
    """StringNormalizer on the strings of X in order: drop the elements that are stop words
    (compared ignoring case unless ``is_case_sensitive``), then change case. When every element
    is dropped the result is one empty string (the shape [1] or [1, 1] the spec asks for).

    As onnxruntime does, a stop word removes a whole element (onnx.reference also removes it
    from inside space-separated strings and drops empty elements; the two agree on elements of
    one word), and case changes are Unicode's, whatever ``locale`` names.
    """
    action = attrs["case_change_action"]
    stops = list(attrs["stopwords"] or ())
    if attrs["is_case_sensitive"]:
        kept = [v for v in values if v not in set(stops)]
    else:
        folded = {s.casefold() for s in stops}
        kept = [v for v in values if v.casefold() not in folded]
    if action == "LOWER":
        kept = [v.lower() for v in kept]
    elif action == "UPPER":
        kept = [v.upper() for v in kept]
    return kept or [""]


def _normalizer_infer(ctx):
    _require_strings(ctx, 0)
    if ctx.attrs["case_change_action"] not in CASE_ACTIONS:
        ctx.fail(f"case_change_action must be one of {CASE_ACTIONS}, got "
                 f"{ctx.attrs['case_change_action']!r}")
    shape = ctx.shape(0)
    if not (len(shape) == 1 or (len(shape) == 2 and shape[0] == 1)):
        ctx.fail(f"X must have shape [C] or [1, C], got {shape}")
    if not ctx.attrs["stopwords"]:
        return [ctx.type(0)]
    x = _need_value(ctx, 0, "the number of strings left after removing stop words")
    count = len(normalize_strings(x.reshape(-1).tolist(), ctx.attrs))
    return [TensorType(shape[:-1] + (count,), STRING)]


declare("StringNormalizer", inputs=("X",), outputs=("Y",), infer=_normalizer_infer,
        onnx_since=10, shape_inputs=(0,), dtype_rule=dtypes_of(STRING, inputs=()),
        attrs={"case_change_action": Attr("string", "NONE"), "is_case_sensitive": Attr("int", 0),
               "locale": Attr("string", ""), "stopwords": Attr("strings", ())})

# -- TfIdfVectorizer -----------------------------------------------------------------------------

MODES = ("TF", "IDF", "TFIDF")


def ngram_table(attrs: dict) -> dict[tuple, int]:
    """The n-grams of the pool whose length is in [min_gram_length, max_gram_length], each
    mapped to its output column (``ngram_indexes``, in pool order). ``ngram_counts[k]`` is where
    the (k + 1)-grams start in the pool."""
    pool = list(attrs["pool_strings"] or attrs["pool_int64s"] or ())
    starts = list(attrs["ngram_counts"])
    indexes = list(attrs["ngram_indexes"])
    table: dict[tuple, int] = {}
    ngram = 0  # the position of the next n-gram among all n-grams of the pool
    for k, start in enumerate(starts):
        size = k + 1
        end = starts[k + 1] if k + 1 < len(starts) else len(pool)
        for first in range(start, end - size + 1, size):
            if attrs["min_gram_length"] <= size <= attrs["max_gram_length"]:
                table[tuple(pool[first:first + size])] = indexes[ngram]  # (a repeat: the last)
            ngram += 1
    return table


def tfidf_counts(rows: Sequence[Sequence[Any]], attrs: dict, width: int) -> np.ndarray:
    """How often each pool n-gram occurs in each row, as int64 [rows, width]: n-grams of
    consecutive items and, for every skip ``s`` up to ``max_skip_count``, of items ``s + 1``
    apart; unigrams are counted once (skips do not change them)."""
    table = ngram_table(attrs)
    low, high = attrs["min_gram_length"], attrs["max_gram_length"]
    counts = np.zeros((len(rows), width), np.int64)
    for r, row in enumerate(rows):
        for step in range(1, attrs["max_skip_count"] + 2):
            for size in range(max(low, 1 if step == 1 else 2), high + 1):
                span = (size - 1) * step
                for first in range(len(row) - span):
                    column = table.get(tuple(row[first:first + span + 1:step]))
                    if column is not None:
                        counts[r, column] += 1
    return counts


def tfidf_weighted(counts: np.ndarray, attrs: dict) -> np.ndarray:
    """Counts as the mode asks: TF the counts, IDF the weight (1 without weights) where an
    n-gram occurs, TFIDF the weight times the count."""
    weights = np.asarray(attrs["weights"] if attrs["weights"] else
                         np.ones(counts.shape[-1]), np.float32)
    if attrs["mode"] == "TF":
        return counts.astype(np.float32)
    if attrs["mode"] == "IDF":
        return np.where(counts > 0, weights, np.float32(0)).astype(np.float32)
    return (counts * weights).astype(np.float32)


def _tfidf_infer(ctx):
    attrs = ctx.attrs
    if ctx.dtype(0) not in TOKEN_DTYPES:
        ctx.fail(f"X must be int32, int64 or string, got {ctx.dtype(0).name}")
    shape = ctx.shape(0)
    if len(shape) not in (1, 2):
        ctx.fail(f"X must have shape [C] or [N, C], got {shape}")
    if attrs["mode"] not in MODES:
        ctx.fail(f"mode must be one of {MODES}, got {attrs['mode']!r}")
    if not 1 <= attrs["min_gram_length"] <= attrs["max_gram_length"] or \
            attrs["max_skip_count"] < 0:
        ctx.fail(f"need 1 <= min_gram_length ({attrs['min_gram_length']}) <= max_gram_length "
                 f"({attrs['max_gram_length']}) and max_skip_count >= 0 "
                 f"({attrs['max_skip_count']})")
    strings, ints = attrs["pool_strings"], attrs["pool_int64s"]
    if bool(strings) == bool(ints):
        ctx.fail("exactly one of pool_strings and pool_int64s must be given")
    if bool(strings) != (ctx.dtype(0) == STRING):
        ctx.fail(f"X is {ctx.dtype(0).name} but the pool is "
                 f"{'pool_strings' if strings else 'pool_int64s'}")
    indexes, starts = list(attrs["ngram_indexes"]), list(attrs["ngram_counts"])
    pool = len(strings or ints)
    total = sum(((starts[k + 1] if k + 1 < len(starts) else pool) - s) // (k + 1)
                for k, s in enumerate(starts))
    if not indexes or min(indexes) < 0 or len(indexes) != total or \
            any(b < a for a, b in zip(starts, starts[1:] + [pool])):
        ctx.fail(f"ngram_counts {starts} must be ascending starts in the pool of {pool} and "
                 f"ngram_indexes ({len(indexes)}) non-negative, one per n-gram ({total})")
    width = max(indexes) + 1
    if attrs["weights"] and len(attrs["weights"]) != width:
        ctx.fail(f"weights has {len(attrs['weights'])} values, one per output column "
                 f"({width}) expected")
    return [TensorType(shape[:-1] + (width,), np.float32)]


declare("TfIdfVectorizer", inputs=("X",), outputs=("Y",), infer=_tfidf_infer, onnx_since=9,
        dtype_rule=dtypes_of(np.float32, inputs=()),
        attrs={"max_gram_length": Attr("int"), "min_gram_length": Attr("int"),
               "max_skip_count": Attr("int"), "mode": Attr("string"),
               "ngram_counts": Attr("ints"), "ngram_indexes": Attr("ints"),
               "pool_int64s": Attr("ints", ()), "pool_strings": Attr("strings", ()),
               "weights": Attr("floats", ())})
