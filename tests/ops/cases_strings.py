"""Op-table cases: the string ops (StringConcat, StringSplit, RegexFullMatch, StringNormalizer,
TfIdfVectorizer on strings and on int32 / int64 tokens) and Equal on strings.

String tensors are object arrays of str. StringSplit's and StringNormalizer's output shapes
depend on the strings, so those inputs are constants (known while planning).
"""
import numpy as np

from tests.ops.harness import Case


def strings(*values, shape=None) -> np.ndarray:
    """An object array of str (the form of ONNX string tensors)."""
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array.reshape(shape if shape is not None else (len(values),))


WORDS = strings("alpha", "beta", "gamma", "Delta", "beta", "épée", shape=(2, 3))
TOKENS = np.array([[1, 3, 5, 3, 5, 7, 1, 3], [5, 5, 7, 1, 2, 3, 5, 7]], np.int64)
_TFIDF = {"min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1,
          "ngram_counts": [0, 3], "ngram_indexes": [0, 1, 2, 3, 4]}

CASES = [
    Case("Equal", [WORDS, strings("beta", shape=(1, 1))], name="strings_broadcast"),
    Case("StringConcat", [WORDS, strings("-x", "", "✓")], name="broadcast_utf8"),
    Case("StringConcat", [strings("a", shape=()), strings("b", shape=())], name="scalars"),
    Case("RegexFullMatch", [strings("www.example.com", "example.org", "a.b.c.com", "",
                                    shape=(2, 2))],
         attrs={"pattern": r"(\w+\.)+com"}, name="domains"),
    Case("RegexFullMatch", [WORDS], attrs={"pattern": "[a-z]*a"}, name="class"),
    Case("StringSplit", [strings("a,b,,c", "x", "", ",y,")], attrs={"delimiter": ","},
         const=(0,), outputs=2, name="delimiter_padded"),
    Case("StringSplit", [strings("  one two  three ", "four", shape=(2, 1))], const=(0,),
         outputs=2, name="whitespace"),
    Case("StringSplit", [strings("a-b-c-d", "e-f")], attrs={"delimiter": "-", "maxsplit": 2},
         const=(0,), outputs=2, name="maxsplit"),
    Case("StringNormalizer", [strings("Monday", "tuesday", "MONDAY", "wed")],
         attrs={"stopwords": ["monday"], "case_change_action": "UPPER"}, const=(0,),
         name="insensitive_upper"),
    Case("StringNormalizer", [strings("Monday", "tuesday", "monday", shape=(1, 3))],
         attrs={"stopwords": ["monday"], "is_case_sensitive": 1, "case_change_action": "LOWER"},
         const=(0,), name="sensitive_lower_2d"),
    Case("StringNormalizer", [strings("Ab", "cD")], name="no_stopwords"),
    Case("TfIdfVectorizer", [TOKENS], attrs={**_TFIDF, "mode": "TF",
                                             "pool_int64s": [1, 3, 5, 3, 5, 5, 7]},
         name="int64_tf_skip1"),
    Case("TfIdfVectorizer", [TOKENS[0].astype(np.int32)],
         attrs={**_TFIDF, "mode": "TFIDF", "pool_int64s": [1, 3, 5, 3, 5, 5, 7],
                "weights": [0.5, 1.0, 2.0, 0.25, 4.0]}, name="int32_tfidf_weights"),
    Case("TfIdfVectorizer", [strings("a", "b", "a", "c", "b", "a", shape=(1, 6))],
         attrs={"min_gram_length": 2, "max_gram_length": 2, "max_skip_count": 0,
                "ngram_counts": [0, 2], "ngram_indexes": [3, 2, 0, 1], "mode": "IDF",
                "weights": [1.5, 2.0, 0.5, 3.0],
                "pool_strings": ["a", "b", "a", "b", "c", "b"]}, name="strings_idf_bigrams"),
]
