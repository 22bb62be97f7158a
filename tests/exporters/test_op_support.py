"""The README's op table says what the code does: every standard op is either declared or has a
reason, no reason outlives its op's declaration, and the README holds the generated table."""
import pathlib

import pytest

pytest.importorskip("onnx", reason="the standard op list comes from onnx.defs")

from exporters.onnx import op_support  # noqa: E402
from portable.ops import registry  # noqa: E402

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_every_op_that_is_not_run_has_a_reason():
    rows = op_support.support_rows()
    assert len(rows) > 200
    for row in rows:
        assert row.declared or row.reason, row.qualified


def test_no_reason_outlives_a_declaration():
    stale = sorted(name for name in op_support.REASONS if name in registry.ops)
    assert not stale, f"declared ops that REASONS still says are not run: {stale}"


def test_declared_ops_have_a_cpu_kernel():
    missing = [r.qualified for r in op_support.support_rows() if r.declared and not r.cpu]
    assert not missing, f"declared standard ops without a NumPy kernel: {missing}"


def test_readme_holds_the_generated_table():
    pytest.importorskip("pyopencl", reason="the table's OpenCL column reads that kernel table")
    text = README.read_text(encoding="utf-8")
    table = op_support.markdown_table(op_support.support_rows())
    assert op_support.replace_table(text, table) == text, (
        "README.md's op table is stale: run python -m exporters.onnx.op_support --readme README.md")


def test_replace_table_needs_its_markers():
    with pytest.raises(ValueError, match="markers"):
        op_support.replace_table("no table here", "| x |")
