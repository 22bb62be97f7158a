"""The local/device KVStore: aggregation across devices, update on the store, state files."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.errors import PortableError, SerializationError


def _arr(values):
    return pt.nd.array(np.asarray(values, np.float32))


def test_push_sums_the_values_of_every_device_then_pull_copies_out():
    kv = pt.kv.create("local")
    kv.init("w", _arr([0, 0]))
    kv.push("w", [_arr([1, 2]), _arr([10, 20]), _arr([100, 200])])
    outs = [pt.nd.zeros((2,)), pt.nd.zeros((2,))]
    kv.pull("w", out=outs)
    for out in outs:
        assert out.asnumpy().tolist() == [111, 222]


def test_lists_of_keys_and_pushpull_in_place():
    kv = pt.kv.create("device")
    kv.init([0, 1], [_arr([1]), _arr([2])])
    a, b = [_arr([1]), _arr([2])], [_arr([3]), _arr([4])]
    kv.pushpull([0, 1], [a, b])
    assert [x.asnumpy().tolist() for x in a + b] == [[3], [3], [7], [7]]
    out = pt.nd.zeros((1,))
    kv.pull(1, out=out)
    assert out.asnumpy().tolist() == [7]


def test_a_push_after_pushpull_in_place_leaves_the_callers_array_alone():
    """pushpull keeps the caller's (already summed) array as the stored value; a later push
    must store a copy instead of writing into it (MXNet's store owns its values)."""
    kv = pt.kv.create("local")
    kv.init("g", _arr([0, 0]))
    grad = _arr([1, 2])
    kv.pushpull("g", grad)
    kv.push("g", _arr([5, 6]))
    out = pt.nd.zeros((2,))
    kv.pull("g", out=out)
    assert grad.asnumpy().tolist() == [1, 2] and out.asnumpy().tolist() == [5, 6]


def test_optimizer_on_the_store_updates_the_stored_weight():
    kv = pt.kv.create("local")
    kv.init(0, _arr([1.0, 1.0]))
    kv.set_optimizer(pt.optim.create("sgd", learning_rate=0.1))
    kv.push(0, [_arr([1.0, 2.0]), _arr([1.0, 2.0])])  # summed gradient [2, 4]
    out = pt.nd.zeros((2,))
    kv.pull(0, out=out)
    np.testing.assert_allclose(out.asnumpy(), [0.8, 0.6], rtol=1e-6)


def test_optimizer_states_save_and_load(tmp_path):
    def make():
        kv = pt.kv.create("local")
        kv.init(0, _arr([1.0, -1.0]))
        kv.set_optimizer(pt.optim.create("adam", learning_rate=0.1))
        return kv

    kv = make()
    for _ in range(3):
        kv.push(0, _arr([0.5, -0.5]))
    path = tmp_path / "kv.states"
    kv.save_optimizer_states(str(path), dump_optimizer=True)
    kv.push(0, _arr([0.5, -0.5]))
    expected = pt.nd.zeros((2,))
    kv.pull(0, out=expected)

    other = make()
    for _ in range(3):
        other.push(0, _arr([0.5, -0.5]))
    other.load_optimizer_states(str(path))
    other.push(0, _arr([0.5, -0.5]))
    got = pt.nd.zeros((2,))
    other.pull(0, out=got)
    np.testing.assert_array_equal(got.asnumpy(), expected.asnumpy())
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(SerializationError, match="kv.states"):
        other.load_optimizer_states(str(path))


def test_broadcast_and_single_process_identity():
    kv = pt.kv.create("local")
    assert (kv.type, kv.rank, kv.num_workers) == ("local", 0, 1)
    kv.barrier()
    out = pt.nd.zeros((3,))
    kv.broadcast("b", _arr([1, 2, 3]), out=out)
    assert out.asnumpy().tolist() == [1, 2, 3]


def test_errors_name_the_problem():
    kv = pt.kv.create("local")
    with pytest.raises(PortableError, match="before init"):
        kv.push(5, _arr([1]))
    kv.init(5, _arr([1]))
    with pytest.raises(PortableError, match="already initialised"):
        kv.init(5, _arr([1]))
    with pytest.raises(PortableError, match="set_optimizer"):
        kv.save_optimizer_states("/tmp/never")
    with pytest.raises(PortableError, match="unknown kvstore 'dist_nonsense'"):
        pt.kv.create("dist_nonsense")


def test_registry_loads_stores_lazily():
    pt.kvstore.register("lazy_local", "portable.kvstore.local:LocalKVStore")
    try:
        assert pt.kv.create("lazy_local").type == "lazy_local"
    finally:
        del pt.kvstore.kvstores["lazy_local"]
