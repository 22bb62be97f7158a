"""Loaders check what they parse: damaged checkpoint manifests, training state, optimizer-state
files and parameter files raise SerializationError naming the file (and the key or parameter),
never a raw KeyError, TypeError, AttributeError or RecursionError; and ``latest()`` falls back
to the previous good checkpoint whatever the damage to the newest.

Damage is generated (hypothesis): keys removed, values of the wrong type, values out of range,
JSON nested far too deep, text truncated or not JSON at all. Every value a test expects is fixed
by the test itself (the epoch and array it saved), never read back from the code under test.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import portable as pt
from portable.checkpoint import Checkpoint, CheckpointManager
from portable.checkpoint_manifest import MAX_COUNT, MAX_FILE_BYTES, RUN_ID
from portable.errors import SerializationError
from portable.gluon import Parameter, Trainer, nn
from portable.io.tensors import tensors_from_bytes, tensors_to_bytes, write_tensor_file

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
OLD, NEW = "ckpt-e0001-s00000010", "ckpt-e0002-s00000020"
MISSING = object()

# -- values -----------------------------------------------------------------------------------

ANY_JSON = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=3))
NOT_A_COUNT = st.one_of(
    st.integers(max_value=-1), st.integers(min_value=MAX_COUNT + 1),
    st.floats(allow_nan=True, allow_infinity=True), st.none(), st.booleans(),
    st.text(max_size=10), st.lists(st.integers(0, 3), max_size=2))
NOT_A_NUMBER = st.one_of(st.none(), st.booleans(), st.text(max_size=10),
                         st.lists(st.integers(), max_size=2), st.integers(min_value=2 ** 54),
                         st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def _put(doc, path, value):
    """A copy of ``doc`` with the value at ``path`` replaced (MISSING: removed)."""
    doc = json.loads(json.dumps(doc))
    parent = _get(doc, path[:-1])
    if value is MISSING:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _nested(depth):
    return "[" * depth + "]" * depth


def _with_raw(doc, path, raw):
    """JSON text of ``doc`` with the value at ``path`` replaced by the raw text ``raw``."""
    marker = "\u2603MARKER\u2603"
    return json.dumps(_put(doc, path, marker)).replace(json.dumps(marker), raw)


# -- the checkpoint manifest ------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A folder with two good checkpoints of one run: epoch 1 holds w = [1, 1, 1]."""
    folder = tmp_path_factory.mktemp("pristine")
    manager = CheckpointManager(folder, keep=5)
    for epoch in (1, 2):
        manager.save({"w": np.full(3, float(epoch), np.float32)}, tensors_to_bytes({}, {}),
                     {"epoch": epoch, "step": 10 * epoch})
    return folder


def _damaged_copy(pristine, text_or_bytes):
    folder = Path(tempfile.mkdtemp())
    for path in pristine.iterdir():
        shutil.copy(path, folder / path.name)
    data = text_or_bytes.encode() if isinstance(text_or_bytes, str) else text_or_bytes
    (folder / f"{NEW}.json").write_bytes(data)
    return folder


def _assert_refused_and_previous_used(pristine, damaged):
    folder = _damaged_copy(pristine, damaged)
    try:
        manager = CheckpointManager(folder)
        with pytest.raises(SerializationError) as info:  # and nothing else
            manager.load(folder / f"{NEW}.json")
        assert NEW in str(info.value)
        latest = manager.latest()
        assert latest.epoch == 1 and latest.step == 10
        assert latest.params["w"].tolist() == [1.0, 1.0, 1.0]
        assert len(latest.refused) == 1 and NEW in latest.refused[0]
    finally:
        shutil.rmtree(folder)


def _manifest(pristine):
    return json.loads((pristine / f"{NEW}.json").read_text())


FIELDS = [("format",), ("version",), ("run_id",), ("epoch",), ("step",), ("files",)] + [
    ("files", role, *key) for role in ("params", "states")
    for key in [(), ("path",), ("bytes",), ("sha256",)]]
FIELDS = [path for path in FIELDS if path]  # ("files", role) itself included


@SETTINGS
@given(path=st.sampled_from(FIELDS))
def test_a_missing_key_is_refused(pristine, path):
    _assert_refused_and_previous_used(pristine, json.dumps(_put(_manifest(pristine), path,
                                                                MISSING)))


def _valid_replacement(path, old, new):
    if type(new) is type(old) and new == old:
        return True
    # another well-formed run id names another run: not detectable damage
    return path == ("run_id",) and isinstance(new, str) and bool(RUN_ID.match(new))


@SETTINGS
@given(path=st.sampled_from(FIELDS), value=ANY_JSON)
def test_a_value_of_any_other_type_or_value_is_refused(pristine, path, value):
    manifest = _manifest(pristine)
    assume(not _valid_replacement(path, _get(manifest, path), value))
    _assert_refused_and_previous_used(pristine, json.dumps(_put(manifest, path, value)))


OUT_OF_RANGE = {
    ("epoch",): st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_COUNT + 1)),
    ("step",): st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_COUNT + 1)),
    ("version",): st.integers().filter(lambda v: v not in (1, 2)),
    ("run_id",): st.one_of(st.just(""), st.text(min_size=65, max_size=80,
                                                alphabet="abcdef0123456789"),
                           st.text(min_size=1, max_size=20).filter(
                               lambda s: not RUN_ID.match(s))),
    ("files", "params", "bytes"): st.one_of(st.integers(max_value=-1),
                                            st.integers(min_value=MAX_FILE_BYTES + 1)),
    ("files", "states", "bytes"): st.integers(min_value=0, max_value=MAX_FILE_BYTES),
    ("files", "params", "sha256"): st.one_of(
        st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
        st.text(alphabet="0123456789ABCDEF", min_size=64, max_size=64),
        st.text(alphabet="0123456789abcdef", min_size=0, max_size=70)),
    ("files", "states", "path"): st.sampled_from(
        ["", "../x.safetensors", "/etc/passwd", f"{OLD}.states.safetensors",
         f"{NEW}.params.safetensors", "sub/../" + f"{NEW}.states.safetensors",
         f"{NEW}.states.safetensors\x00"]),
}


@SETTINGS
@given(data=st.data())
def test_a_value_out_of_range_is_refused(pristine, data):
    path = data.draw(st.sampled_from(sorted(OUT_OF_RANGE)))
    manifest = _manifest(pristine)
    value = data.draw(OUT_OF_RANGE[path])
    assume(not _valid_replacement(path, _get(manifest, path), value))
    _assert_refused_and_previous_used(pristine, json.dumps(_put(manifest, path, value)))


@SETTINGS
@given(path=st.sampled_from([()] + FIELDS), depth=st.one_of(st.integers(1, 3000),
                                                            st.just(100_000)))
def test_deep_nesting_is_refused(pristine, path, depth):
    text = _nested(depth) if not path else _with_raw(_manifest(pristine), path,
                                                     _nested(depth))
    _assert_refused_and_previous_used(pristine, text)


@SETTINGS
@given(cut=st.integers(0, 10_000), junk=st.binary(max_size=20))
def test_truncated_or_garbled_text_is_refused(pristine, cut, junk):
    text = (pristine / f"{NEW}.json").read_bytes()
    damaged = text[:cut % len(text)] + junk
    try:  # junk that completes the cut text into the same manifest is no damage
        assume(json.loads(damaged) != json.loads(text))
    except ValueError:
        pass
    _assert_refused_and_previous_used(pristine, damaged)


def test_invalid_utf8_and_a_key_given_twice_are_refused(pristine):
    text = (pristine / f"{NEW}.json").read_text()
    _assert_refused_and_previous_used(pristine, b"\xff\xfe" + text.encode())
    twice = text.rstrip().rstrip("}") + ', "epoch": 2}'
    _assert_refused_and_previous_used(pristine, twice)


@SETTINGS
@given(manifest=st.one_of(ANY_JSON, st.fixed_dictionaries({"epoch": ANY_JSON,
                                                           "step": ANY_JSON})))
def test_checkpoint_epoch_and_step_raise_only_serialization_errors(manifest):
    checkpoint = Checkpoint(manifest, {}, b"", Path("ckpt-e0001-s00000001.json"))
    for key in ("epoch", "step"):
        value = manifest.get(key, MISSING) if isinstance(manifest, dict) else MISSING
        valid = type(value) is int and 0 <= value <= MAX_COUNT
        if valid:
            assert getattr(checkpoint, key) == value
        else:
            with pytest.raises(SerializationError, match=key):
                getattr(checkpoint, key)


# -- fit's training state ---------------------------------------------------------------------


def _fit_setup():
    from portable.data import ArrayDataset, DataLoader
    from portable.models.zoo import get_model

    pt.random.seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 1, 4, 4)).astype(np.float32)
    y = (x.reshape(32, -1).sum(1) > 0).astype(np.int64)
    train = DataLoader(ArrayDataset(x, y), batch_size=16, shuffle=True)
    net = get_model("mlp", num_classes=2, hidden=(8,))
    net.initialize(pt.init.Xavier())
    return net, Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}), train


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A fit run's folder with checkpoints after epochs 1 and 2 (2 steps each)."""
    from portable.fit import fit

    folder = tmp_path_factory.mktemp("fitted")
    net, trainer, train = _fit_setup()
    fit(net, train, trainer=trainer, epochs=2, progress=False, checkpoint_dir=folder)
    names = sorted(p.name for p in folder.glob("*.json"))
    assert names == ["ckpt-e0001-s00000002.json", "ckpt-e0002-s00000004.json"]
    return folder


STATE_DAMAGE = {
    ("rng",): st.one_of(st.just(MISSING), NOT_A_NUMBER, st.dictionaries(
        st.sampled_from(["bit_generator", "state", "has_uint32"]), ANY_JSON, max_size=3)),
    ("data",): st.one_of(st.just(MISSING), st.integers(), st.text(max_size=5),
                         st.lists(st.integers(), max_size=2)),
    ("data", "batches_done"): st.one_of(st.just(MISSING), NOT_A_COUNT, st.integers(3, 99)),
    ("data", "batch_sampler"): st.one_of(st.just(MISSING), NOT_A_NUMBER),
    ("data", "batch_sampler", "sampler", "rng"): st.one_of(st.just(MISSING), NOT_A_NUMBER),
    ("history",): st.one_of(st.just(MISSING), NOT_A_NUMBER.filter(
        lambda v: not isinstance(v, list)), st.lists(st.just({}), max_size=1),
        st.lists(st.just({"epoch": 1}), min_size=3, max_size=4)),
    ("history", 0): st.one_of(NOT_A_NUMBER, st.dictionaries(st.text(max_size=3),
                                                            NOT_A_NUMBER, min_size=1)),
    ("partial",): st.one_of(st.just(MISSING), NOT_A_NUMBER),
    ("partial", "loss_sum"): st.one_of(st.just(MISSING), NOT_A_NUMBER),
    ("partial", "loss_count"): st.one_of(st.just(MISSING), NOT_A_COUNT),
    ("partial", "metric_sums"): st.one_of(st.just(MISSING), NOT_A_NUMBER.filter(
        lambda v: not isinstance(v, list)), st.lists(st.lists(NOT_A_NUMBER, max_size=3),
                                                     min_size=1, max_size=2)),
    ("early_stopping",): st.one_of(st.integers(), st.text(max_size=5),
                                   st.lists(st.integers(), max_size=2),
                                   st.fixed_dictionaries({"best": NOT_A_NUMBER.filter(
                                       lambda v: v is not None), "wait": st.just(0)}),
                                   st.fixed_dictionaries({"best": st.just(0.5),
                                                          "wait": NOT_A_COUNT})),
}


@SETTINGS
@given(data=st.data())
def test_damaged_training_state_falls_back_to_the_previous_checkpoint(fitted, data):
    from portable.fit_state import check_training_state
    from portable.metric import create

    path = data.draw(st.sampled_from(sorted(STATE_DAMAGE, key=str)))
    value = data.draw(STATE_DAMAGE[path])
    folder = Path(tempfile.mkdtemp())
    try:
        for item in fitted.iterdir():
            shutil.copy(item, folder / item.name)
        newest = folder / "ckpt-e0002-s00000004.json"
        newest.write_text(json.dumps(_put(json.loads(newest.read_text()), path, value)))
        net, trainer, train = _fit_setup()
        before = (pt.random.get_state(), train.state_dict())
        metric = create("acc")
        found = CheckpointManager(folder).latest(
            check=lambda c: check_training_state(c, train, metric, trainer))
        assert found.epoch == 1 and found.step == 2 and len(found.refused) == 1
        assert "ckpt-e0002-s00000004" in found.refused[0]
        assert (pt.random.get_state(), train.state_dict()) == before  # checks change nothing
    finally:
        shutil.rmtree(folder)


def test_fit_resume_skips_a_damaged_training_state(fitted, tmp_path):
    from portable.fit import fit

    for item in fitted.iterdir():
        shutil.copy(item, tmp_path / item.name)
    newest = tmp_path / "ckpt-e0002-s00000004.json"
    newest.write_text(json.dumps(_put(json.loads(newest.read_text()), ("rng",), {"x": 1})))
    net, trainer, train = _fit_setup()
    result = fit(net, train, trainer=trainer, epochs=3, progress=False, checkpoint_dir=tmp_path,
                 resume=True)
    assert result["resumed_from"].endswith("ckpt-e0001-s00000002.json")
    assert "key 'rng'" in result["refused_checkpoints"][0]
    assert result["epochs"] == 3 and result["steps"] == 6


# -- optimizer-state files --------------------------------------------------------------------


def _trainer(step=True):
    params = []
    for index, shape in enumerate([(2, 3), (3,)]):
        param = Parameter(f"p{index}", shape=shape)
        param.initialize(pt.init.One())
        params.append(param)
    trainer = Trainer(params, "adam", {"learning_rate": 0.1})
    if step:
        with pt.autograd.record():
            loss = (params[0].data() * params[0].data()).sum() + params[1].data().sum()
        loss.backward()
        trainer.step(1)
    return trainer


@pytest.fixture(scope="module")
def states():
    """(tensors, metadata) of a trainer's states after one Adam step."""
    return tensors_from_bytes(_trainer().get_states())


STATES_META_DAMAGE = {
    ("format",): st.one_of(st.just(MISSING), ANY_JSON),
    ("counts",): st.one_of(st.just(MISSING), NOT_A_NUMBER.filter(
        lambda v: not isinstance(v, dict))),
    ("counts", "num_update"): st.one_of(st.just(MISSING), NOT_A_COUNT),
    ("counts", "index_update_count"): st.one_of(st.just(MISSING), st.integers(),
                                                st.lists(st.integers(), min_size=1)),
    ("counts", "index_update_count", 0, 0): st.one_of(NOT_A_COUNT, st.integers(2, 99),
                                                      st.just(1)),  # 1: given twice
    ("counts", "index_update_count", 0, 1): NOT_A_COUNT,
    ("entries",): st.one_of(st.just(MISSING), NOT_A_NUMBER.filter(
        lambda v: not isinstance(v, list)), st.lists(st.integers(), min_size=1)),
    ("entries", 0): st.one_of(NOT_A_NUMBER, st.lists(st.integers(), max_size=3)),
    ("entries", 0, 0): st.one_of(NOT_A_COUNT, st.integers(2, 99), st.just(1)),
    ("entries", 0, 1): st.one_of(NOT_A_NUMBER, st.lists(st.booleans(), max_size=4).filter(
        lambda v: v != [True, True]), st.lists(st.integers(0, 1), min_size=2, max_size=2)),
    ("optimizer",): NOT_A_NUMBER.filter(lambda v: not isinstance(v, dict)),
    ("optimizer", "name"): st.one_of(st.just(MISSING), st.integers(), st.text(max_size=8)
                                     .filter(lambda s: s.lower() not in pt.optim.optimizers)),
    ("optimizer", "learning_rate"): st.one_of(
        st.sampled_from([float("nan"), float("inf"), float("-inf")]), st.text(max_size=5),
        st.lists(st.integers(), max_size=2)),
    ("optimizer", "beta1"): st.one_of(st.just(None), st.text(max_size=5),
                                      st.sampled_from([float("nan"), float("inf")])),
    ("optimizer", "surprise"): st.integers(),  # not an argument of Adam
}


def _states_file(folder, tensors, meta):
    path = Path(folder) / "opt.states"
    path.write_bytes(tensors_to_bytes(tensors, meta))
    return path


def _assert_states_refused(tensors, meta, parameter=None):
    for stepped in (True, False):  # after the first step, and before (states kept pending)
        trainer = _trainer(step=stepped)
        before = trainer.get_states()
        with tempfile.TemporaryDirectory() as folder:
            path = _states_file(folder, tensors, meta)
            with pytest.raises(SerializationError) as info:
                trainer.load_states(path)
            assert "opt.states" in str(info.value)
            if parameter is not None:
                assert repr(parameter) in str(info.value)
        assert trainer.get_states() == before  # nothing applied


@SETTINGS
@given(data=st.data())
def test_damaged_optimizer_state_metadata_is_refused(states, data):
    tensors, meta = states
    path = data.draw(st.sampled_from(sorted(STATES_META_DAMAGE, key=str)))
    value = data.draw(STATES_META_DAMAGE[path])
    _assert_states_refused(tensors, _put(meta, path, value))


@SETTINGS
@given(which=st.sampled_from(["0/0", "0/1", "1/0", "1/1"]), data=st.data())
def test_optimizer_state_arrays_of_the_wrong_shape_or_dtype_are_refused(states, which, data):
    tensors, meta = states
    original = tensors[which]
    kind = data.draw(st.sampled_from(["shape", "dtype", "missing"]))
    damaged = dict(tensors)
    if kind == "shape":
        shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
        assume(shape != original.shape)
        damaged[which] = np.zeros(shape, original.dtype)
    elif kind == "dtype":
        dtype = data.draw(st.sampled_from([np.int32, np.int64, np.bool_, np.uint8,
                                           np.complex64]))
        damaged[which] = original.astype(dtype)
    else:
        del damaged[which]
    _assert_states_refused(damaged, meta, parameter=f"p{which[0]}")


def test_extra_optimizer_state_arrays_and_foreign_files_are_refused(states, tmp_path):
    tensors, meta = states
    _assert_states_refused({**tensors, "7/0": np.zeros(3, np.float32)}, meta)
    _assert_states_refused(tensors, ["not", "an", "object"])
    (tmp_path / "opt.states").write_bytes(b"")
    with pytest.raises(SerializationError, match="opt.states"):
        _trainer().load_states(tmp_path / "opt.states")
    (tmp_path / "folder.states").mkdir()
    with pytest.raises(SerializationError, match="folder.states: it is a folder"):
        _trainer().load_states(tmp_path / "folder.states")


def test_good_states_still_load_exactly(states):
    tensors, meta = states
    trainer = _trainer(step=False)
    trainer.set_states(tensors_to_bytes(tensors, meta), "opt.states")
    loaded, _ = tensors_from_bytes(trainer.get_states())
    assert sorted(loaded) == ["0/0", "0/1", "1/0", "1/1"]
    # after one Adam step from w = 1 with gradient 2w (p0) and 1 (p1): m = 0.1 g, v = 0.001 g^2
    np.testing.assert_allclose(loaded["0/0"], np.full((2, 3), 0.2), rtol=1e-6)
    np.testing.assert_allclose(loaded["0/1"], np.full((2, 3), 0.004), rtol=1e-6)
    np.testing.assert_allclose(loaded["1/0"], np.full(3, 0.1), rtol=1e-6)
    np.testing.assert_allclose(loaded["1/1"], np.full(3, 0.001), rtol=1e-6)


# -- parameter files --------------------------------------------------------------------------


def _net(value=None):
    net = nn.HybridSequential()
    net.add(nn.Dense(3, in_units=2), nn.Dense(2, in_units=3))
    net.initialize(pt.init.Constant(0.5) if value is None else pt.init.Constant(value))
    return net


NAMES = ["0.weight", "0.bias", "1.weight", "1.bias"]
SHAPES = {"0.weight": (3, 2), "0.bias": (3,), "1.weight": (2, 3), "1.bias": (2,)}


def _values(net):
    return {name: p.data().asnumpy().copy()
            for name, p in net._collect_params_with_prefix().items()}


def _assert_params_refused(tmp_path, tensors, metadata=None, parameter=None, **kwargs):
    path = tmp_path / "net.params"
    write_tensor_file(path, tensors, metadata)
    net = _net(0.25)
    before = _values(net)
    with pytest.raises(SerializationError) as info:
        net.load_parameters(str(path), **kwargs)
    assert "net.params" in str(info.value)
    if parameter is not None:
        assert repr(parameter) in str(info.value)
    after = _values(net)  # nothing loaded: every value still the one it had
    assert all(np.array_equal(before[name], after[name]) for name in NAMES)


GOOD = {name: np.full(shape, 1.0, np.float32) for name, shape in SHAPES.items()}


@SETTINGS
@given(name=st.sampled_from(NAMES), data=st.data())
def test_damaged_parameter_files_are_refused_naming_file_and_parameter(tmp_path, name, data):
    kind = data.draw(st.sampled_from(["missing", "extra", "shape", "dtype", "cast"]))
    tensors = dict(GOOD)
    kwargs, parameter = {}, name
    if kind == "missing":
        del tensors[name]
    elif kind == "extra":
        tensors[name.replace(".", ".x")] = np.zeros(2, np.float32)
        parameter = None
    elif kind == "shape":
        shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        assume(shape != SHAPES[name])
        tensors[name] = np.zeros(shape, np.float32)
    elif kind == "dtype":
        dtype = data.draw(st.sampled_from([np.float64, np.float16, np.int32, np.bool_]))
        tensors[name] = tensors[name].astype(dtype)
    else:  # cast_dtype=True converts precision, not the kind of number
        tensors[name] = tensors[name].astype(np.complex64)
        kwargs["cast_dtype"] = True
    _assert_params_refused(tmp_path, tensors, parameter=parameter, **kwargs)


def test_parameter_files_of_other_kinds_and_ambiguous_names_are_refused(tmp_path):
    _assert_params_refused(tmp_path, GOOD, {"format": "portable.deployment"})
    _assert_params_refused(tmp_path, GOOD, {"format": "portable.optimizer-states"})
    # a verified tensor file (a checkpoint's parameters) whose digest does not match
    _assert_params_refused(tmp_path, GOOD, {"format": "portable.tensors", "sha256": "0" * 64,
                                            "json": "{}"})
    path = tmp_path / "dict.params"  # "arg:" and "aux:" give the same name: which is meant?
    write_tensor_file(path, {"arg:dense0_weight": np.ones((3, 2), np.float32),
                             "aux:dense0_weight": np.zeros((3, 2), np.float32)})
    params = pt.gluon.ParameterDict("")
    params.get("dense0_weight", shape=(3, 2))
    with pytest.raises(SerializationError, match="twice"):
        params.load(str(path))


def test_a_checkpoint_parameters_file_loads_through_load_parameters(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(GOOD, tensors_to_bytes({}, {}), {"epoch": 1, "step": 1})
    net = _net(0.25)
    net.load_parameters(str(tmp_path / "ckpt-e0001-s00000001.params.safetensors"))
    for name, value in _values(net).items():
        assert value.shape == SHAPES[name] and np.all(value == 1.0)


def test_shared_parameter_saved_twice_with_different_values_is_refused(tmp_path):
    net = nn.HybridSequential()
    first = nn.Dense(2, in_units=2)
    net.add(first, nn.Dense(2, in_units=2, params=first.collect_params()))
    net.initialize(pt.init.Constant(0.25))
    tensors = {"0.weight": np.ones((2, 2), np.float32), "0.bias": np.ones(2, np.float32),
               "1.weight": np.zeros((2, 2), np.float32), "1.bias": np.ones(2, np.float32)}
    write_tensor_file(tmp_path / "shared.params", tensors)
    with pytest.raises(SerializationError, match="'0.weight' and '1.weight'"):
        net.load_parameters(str(tmp_path / "shared.params"))
