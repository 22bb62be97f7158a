"""mx.profiler: the aggregate table lists the ops an imperative and a hybridized run executed
(counted once per kernel call), the dump is a Chrome trace JSON file, and user Domain objects
record into it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import portable as mx
from portable.errors import PortableError
from portable.gluon import HybridBlock


class _Net(HybridBlock):
    def hybrid_forward(self, F, x):
        return F.sigmoid(F.relu(x) * 3.0)


def _table_counts(text: str, category: str = "operator") -> dict[str, int]:
    """op name -> Total Count, read from the rows of one category of the table."""
    lines = text.splitlines()
    start = lines.index(category) + 4  # the title, '=====', the header and '----'
    counts = {}
    for line in lines[start:]:
        if not line.strip():
            break
        name, count = line[:30].strip(), int(line[30:41])
        counts[name] = count
    return counts


@pytest.fixture
def profiling(tmp_path):
    path = tmp_path / "profile.json"
    mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename=str(path))
    mx.profiler.dumps(reset=True)
    mx.profiler.dump(finished=True)  # forget events of earlier tests
    mx.profiler.set_state("run")
    yield path
    mx.profiler.set_state("stop")


def test_imperative_ops_are_counted_in_the_table(profiling):
    x = mx.nd.array(np.arange(6.0).reshape(2, 3))
    for _ in range(3):
        y = mx.nd.exp(x) + x
    y.asnumpy()
    mx.profiler.set_state("stop")
    z = mx.nd.exp(x)  # not recorded: the profiler is stopped
    z.asnumpy()
    counts = _table_counts(mx.profiler.dumps())
    assert counts["Exp"] == 3 and counts["Add"] == 3


def test_hybridized_run_lists_its_graph_ops(profiling):
    net = _Net()
    net.hybridize()
    x = mx.nd.array([[-1.0, 2.0]])
    out = net(x).asnumpy()
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-np.maximum([[-1.0, 2.0]], 0) * 3)),
                               rtol=1e-6)
    counts = _table_counts(mx.profiler.dumps(reset=True))
    assert {"Relu", "Mul", "Sigmoid"} <= set(counts)
    assert "Relu" not in mx.profiler.dumps()  # reset=True forgot the statistics


def test_dump_writes_a_chrome_trace_with_the_events(profiling):
    domain = mx.profiler.Domain("my_domain")
    task = domain.new_task("load")
    task.start()
    mx.nd.ones((2, 2)).asnumpy()
    task.stop()
    counter = domain.new_counter("batches", 1)
    counter += 2
    domain.new_marker("epoch_end").mark()
    mx.profiler.set_state("stop")
    mx.profiler.dump()
    trace = json.loads(profiling.read_text())
    events = trace["traceEvents"]
    names = {(e["name"], e["ph"]) for e in events}
    assert ("load", "X") in names and ("epoch_end", "i") in names
    assert [e["args"]["batches"] for e in events if e["ph"] == "C"] == [1, 3]
    for event in events:
        assert {"name", "ph", "ts", "pid", "tid"} <= set(event)
        assert event["ph"] != "X" or event["dur"] >= 0
    load = next(e for e in events if e["name"] == "load")
    assert load["cat"] == "my_domain"


def test_pause_resume_and_bad_options(profiling):
    mx.profiler.pause()
    mx.nd.exp(mx.nd.ones((1,))).asnumpy()
    mx.profiler.resume()
    mx.nd.exp(mx.nd.ones((1,))).asnumpy()
    assert _table_counts(mx.profiler.dumps())["Exp"] == 1
    with pytest.raises(PortableError, match="unknown option"):
        mx.profiler.set_config(profile_everything=True)
    with pytest.raises(PortableError, match="'run' or 'stop'"):
        mx.profiler.set_state("go")
