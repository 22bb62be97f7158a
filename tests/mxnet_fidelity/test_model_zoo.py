"""gluon.model_zoo.vision against the real MXNet 1.9.1 (fixtures by record_model_zoo.py).

- every model of MXNet's zoo has MXNet's structural parameter names and shapes, in MXNet's
  order, after deferred initialisation on the same input (run on the null device, which infers
  shapes without computing, so the 224x224 passes of the big models cost nothing);
- small models load MXNet's ``save_parameters`` files by name and give MXNet's outputs;
- ``get_model`` knows MXNet's names; ``pretrained=True`` finds ``<root>/<name>-<hash>.params``
  and, without it, raises an error naming that path.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import portable as mx
from portable.device import null
from portable.errors import PortableError, SerializationError
from portable.gluon.model_zoo import model_store, vision

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "model_zoo")

with open(os.path.join(FIXTURES, "architectures.json")) as _handle:
    RECORDED = json.load(_handle)
ARCHITECTURES = RECORDED["architectures"]
SMALL_MODELS = RECORDED["small_models"]
VARIANTS = RECORDED["variants"]


def test_public_names():
    assert mx.gluon.model_zoo.vision is vision
    assert mx.gluon.model_zoo.model_store is model_store
    missing = [name for name in RECORDED["public_names"] if not hasattr(vision, name)]
    assert missing == []


def test_get_model_knows_mxnets_names():
    assert sorted(vision.MODELS) == sorted(ARCHITECTURES)
    with pytest.raises(ValueError, match="Model no-such-model is not supported") as info:
        vision.get_model("no-such-model")
    assert "resnet18_v1" in str(info.value) and "mobilenetv2_0.25" in str(info.value)
    assert isinstance(vision.get_model("ResNet18_V1"), vision.ResNetV1)  # case-insensitive


def _check_structure(net, recorded):
    for param in net.collect_params().values():
        # zeros, not the layers' own random initializers: VGG's 100M-weight Dense layers
        # would spend seconds drawing numbers the null device then drops
        param.initialize(mx.init.Zero(), ctx=null())
    out = net(mx.nd.zeros(tuple(recorded["input_shape"]), ctx=null()))
    params = net._collect_params_with_prefix()
    assert [[key, list(p.shape)] for key, p in params.items()] == recorded["params"]
    assert list(out.shape) == recorded["output_shape"]


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_parameter_names_and_shapes(name):
    _check_structure(vision.get_model(name), ARCHITECTURES[name])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_keyword_variants(name):
    recorded = VARIANTS[name]
    net = eval(recorded["builder"], {"vision": vision})  # noqa: S307 - the recorded builder
    _check_structure(net, recorded)
    assert list(net.collect_params().keys()) == recorded["prefixed_names"]


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_short_hash(name):
    assert model_store.short_hash(name) == ARCHITECTURES[name]["short_hash"]


def _small_model(name):
    info = SMALL_MODELS[name]
    net = eval(info["builder"], {"vision": vision})  # noqa: S307 - the recorded builder
    x = np.load(os.path.join(FIXTURES, f"{name}-input.npy"), allow_pickle=False)
    expected = np.load(os.path.join(FIXTURES, f"{name}-output.npy"), allow_pickle=False)
    return net, x, expected


def _assert_close(got, expected):
    assert got.shape == expected.shape
    # outputs are O(1..10): 1e-4 absolute is float32 accumulation-order noise
    assert np.max(np.abs(got - expected)) <= 1e-4 * max(1.0, np.max(np.abs(expected)))


@pytest.mark.parametrize("name", sorted(SMALL_MODELS))
def test_loads_mxnet_parameters_and_matches_outputs(name):
    net, x, expected = _small_model(name)
    net.load_parameters(os.path.join(FIXTURES, f"{name}.params"))
    _assert_close(net(mx.nd.array(x)).asnumpy(), expected)


@pytest.mark.parametrize("name", sorted(SMALL_MODELS))
def test_hybridized_matches_mxnet(name):
    net, x, expected = _small_model(name)
    net.load_parameters(os.path.join(FIXTURES, f"{name}.params"))
    net.hybridize()
    _assert_close(net(mx.nd.array(x)).asnumpy(), expected)


def test_pretrained_without_file_names_the_expected_path(tmp_path):
    expected = os.path.join(str(tmp_path), "resnet18_v1-a0666292.params")
    with pytest.raises(PortableError) as info:
        vision.get_model("resnet18_v1", pretrained=True, root=str(tmp_path))
    message = str(info.value)
    assert expected in message
    assert "gluon/models/resnet18_v1-a0666292.zip" in message
    with pytest.raises(PortableError, match="mobilenetv2_0.5-aabd26cd.params"):
        vision.mobilenet_v2_0_5(pretrained=True, root=str(tmp_path))
    with pytest.raises(PortableError, match="vgg11_bn-ee79a809.params"):
        vision.vgg11(batch_norm=True, pretrained=True, root=str(tmp_path))


def test_pretrained_default_root_is_mxnet_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MXNET_HOME", str(tmp_path))
    with pytest.raises(PortableError, match=str(tmp_path / "models" / "alexnet-44335d1f")):
        vision.alexnet(pretrained=True)


def test_pretrained_loads_the_file_when_present(tmp_path, monkeypatch):
    # a recorded MXNet file stands in for the published one (its SHA-1 registered for the run)
    source = os.path.join(FIXTURES, "mobilenet0.25.params")
    with open(source, "rb") as handle:
        digest = hashlib.sha1(handle.read()).hexdigest()
    monkeypatch.setitem(model_store._MODEL_SHA1, "mobilenet0.25", digest)
    shutil.copy(source, tmp_path / f"mobilenet0.25-{digest[:8]}.params")
    net = vision.get_model("mobilenet0.25", pretrained=True, root=str(tmp_path), classes=10)
    _, x, expected = _small_model("mobilenet0.25")
    _assert_close(net(mx.nd.array(x)).asnumpy(), expected)


def test_pretrained_file_with_wrong_hash_is_refused(tmp_path):
    (tmp_path / "squeezenet1.0-264ba497.params").write_bytes(b"not the published file")
    with pytest.raises(SerializationError, match="squeezenet1.0-264ba497.params"):
        vision.squeezenet1_0(pretrained=True, root=str(tmp_path))


def test_unknown_pretrained_name():
    with pytest.raises(ValueError, match="Pretrained model for resnet20_v1 is not available"):
        model_store.get_model_file("resnet20_v1")
