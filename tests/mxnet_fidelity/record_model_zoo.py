"""Record what the real MXNet 1.9.1 model zoo builds, for ``test_model_zoo.py``.

Run it with MXNet's own interpreter (MXNet 1.9.1 needs NumPy < 1.24):

    /tmp/mxvenv/bin/python tests/mxnet_fidelity/record_model_zoo.py \
        tests/mxnet_fidelity/fixtures/model_zoo

It writes into that folder:

- ``architectures.json``: the public names of ``vision``; for every name
  ``vision.get_model`` knows, the ordered list of (structural parameter name, shape) after a
  forward pass on a (1, 3, 224, 224) input (299 for ``inceptionv3``), the output shape and the
  short hash of the pretrained file; under ``variants`` the same for other keyword arguments
  (thumbnail, multipliers, custom layer lists), with the prefixed ``collect_params`` names
  under an explicit prefix.
- for a few small models (see ``SMALL_MODELS``): ``<name>.params`` (MXNet's
  ``save_parameters``), ``<name>-input.npy`` and ``<name>-output.npy`` (the inference-mode
  output on that input, after a few training-mode passes so BatchNorm's running statistics are
  not their initial values). No weights of the big models are stored.
"""
from __future__ import annotations

import json
import os
import platform
import sys

import numpy as np

# name -> (how the test builds it, the input shape); the builders are Python expressions on
# ``vision`` that test_model_zoo.py evaluates the same way on portable's model zoo.
SMALL_MODELS = {
    "resnet18_v1_small": ("vision.ResNetV1(vision.BasicBlockV1, [2, 2, 2, 2], "
                          "[8, 8, 16, 32, 64], classes=10)", (2, 3, 32, 32)),
    "resnet18_v2_small": ("vision.ResNetV2(vision.BasicBlockV2, [2, 2, 2, 2], "
                          "[8, 8, 16, 32, 64], classes=10)", (2, 3, 32, 32)),
    "mobilenet0.25": ("vision.get_model('mobilenet0.25', classes=10)", (2, 3, 64, 64)),
    "squeezenet1.1": ("vision.get_model('squeezenet1.1', classes=10)", (1, 3, 224, 224)),
}

# keyword arguments and constructors beyond the zoo's defaults: name -> (builder, input shape);
# these also record the prefixed names (collect_params) under an explicit prefix
VARIANTS = {
    "resnet18_v1_thumbnail": ("vision.resnet18_v1(thumbnail=True, classes=10, prefix='net_')",
                              (1, 3, 32, 32)),
    "resnet50_v2_thumbnail": ("vision.resnet50_v2(thumbnail=True, classes=10, prefix='net_')",
                              (1, 3, 32, 32)),
    "resnet_bottleneck_v1": ("vision.ResNetV1(vision.BottleneckV1, [1, 1], [8, 16, 32], "
                             "classes=3, prefix='net_')", (1, 3, 32, 32)),
    "mobilenetv2_1.5": ("vision.MobileNetV2(1.5, classes=7, prefix='net_')", (1, 3, 64, 64)),
    "mobilenet0.6": ("vision.get_mobilenet(0.6, classes=7, prefix='net_')", (1, 3, 64, 64)),
    "vgg_custom": ("vision.VGG([1, 2], [8, 16], classes=5, batch_norm=True, prefix='net_')",
                   (1, 3, 32, 32)),
    "densenet_custom": ("vision.DenseNet(16, 8, [2, 2], bn_size=2, dropout=0.1, classes=3, "
                        "prefix='net_')", (1, 3, 64, 64)),
    "squeezenet1.0": ("vision.squeezenet1_0(classes=4, prefix='net_')", (1, 3, 224, 224)),
    "inceptionv3": ("vision.inception_v3(classes=4, prefix='net_')", (1, 3, 299, 299)),
    "alexnet": ("vision.alexnet(classes=4, prefix='net_')", (1, 3, 224, 224)),
}


def _variants(mx, vision) -> dict:
    result = {}
    for name, (builder, shape) in VARIANTS.items():
        net = eval(builder, {"vision": vision})  # noqa: S307 - the builders above
        net.initialize()
        out = net(mx.nd.zeros(shape))
        params = net._collect_params_with_prefix()
        result[name] = {"builder": builder, "input_shape": list(shape),
                        "output_shape": list(out.shape),
                        "params": [[key, list(p.shape)] for key, p in params.items()],
                        "prefixed_names": list(net.collect_params().keys())}
    return result


def _architectures(mx, vision) -> dict:
    from mxnet.gluon.model_zoo import model_store

    # get_model's table is local to the function: ask it for an unknown name and read the
    # list of options from the error message (MXNet's own list, sorted).
    names: list[str] = []
    try:
        vision.get_model("no-such-model")
    except ValueError as exc:
        names = [line.strip() for line in str(exc).split("\n")[1:] if line.strip()]
    result = {}
    for name in names:
        size = 299 if name == "inceptionv3" else 224
        net = vision.get_model(name)
        net.initialize()
        out = net(mx.nd.zeros((1, 3, size, size)))
        params = net._collect_params_with_prefix()
        result[name] = {"input_shape": [1, 3, size, size], "output_shape": list(out.shape),
                        "params": [[key, list(p.shape)] for key, p in params.items()],
                        "short_hash": model_store.short_hash(name)}
        print(name, len(params), flush=True)
    return result


def _record_small(mx, vision, folder: str) -> dict:
    rng = np.random.RandomState(7)
    info = {}
    for name, (builder, shape) in SMALL_MODELS.items():
        mx.random.seed(1)
        net = eval(builder, {"vision": vision})  # noqa: S307 - the builders above
        # He initialisation keeps the activations O(1) through the ReLU stacks
        net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
        net(mx.nd.zeros(shape))  # finish deferred initialisation
        for param in net.collect_params().values():
            # learned gamma/beta away from 1/0 so a mix-up of the two shows
            if param.grad_req != "null" and param.name.endswith(("gamma", "beta")):
                param.set_data(mx.nd.array(rng.normal(0.5, 0.3, param.shape)))
        for _ in range(3):
            with mx.autograd.record(train_mode=True):
                net(mx.nd.array(rng.normal(0.2, 1.0, shape)))
        x = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        y = net(mx.nd.array(x)).asnumpy()
        net.save_parameters(os.path.join(folder, f"{name}.params"))
        np.save(os.path.join(folder, f"{name}-input.npy"), x, allow_pickle=False)
        np.save(os.path.join(folder, f"{name}-output.npy"), y, allow_pickle=False)
        info[name] = {"builder": builder, "input_shape": list(shape),
                      "output_shape": list(y.shape)}
        print(name, y.shape, os.path.getsize(os.path.join(folder, f"{name}.params")),
              flush=True)
    return info


def main() -> None:
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision

    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    small = _record_small(mx, vision, folder)
    fixture = {"recorded_with": {"mxnet": mx.__version__, "numpy": np.__version__,
                                 "python": platform.python_version()},
               "public_names": sorted(n for n in dir(vision) if not n.startswith("_")),
               "small_models": small, "variants": _variants(mx, vision),
               "architectures": _architectures(mx, vision)}
    with open(os.path.join(folder, "architectures.json"), "w") as handle:
        json.dump(fixture, handle, indent=0, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main()
