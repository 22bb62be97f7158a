"""The compute profile and the cost model of ``benchmarks/scaling_sim.py`` (no MPI here).

Profile: ResNet-50 v1.5's 161 parameter tensors (torchvision order, 25,557,032 floats), each
with the backward milliseconds of the layer that produces its gradient on one V100, derived
from a published step time:

* Source: NVIDIA DeepLearningExamples, ``MxNet/Classification/RN50v1.5/README.md``, "Training
  performance: NVIDIA DGX-1 (8x V100 16GB)", mxnet-20.12-py3 container: 1 GPU, FP32, batch 96:
  384 img/s (mixed precision, batch 192: 1376 img/s).
* Assumed: the FP32 throughput holds at batch 64, so one step takes 64 / 384 s = 166.7 ms; of it
  one third is forward and two thirds backward (a layer's backward computes the input and the
  weight gradients: twice the forward's multiply-adds); data loading and the optimizer update
  are left out.
* Backward split over layers: 80 % among the convolutions and the classifier in proportion to
  their backward multiply-adds (twice the forward's, once for the first convolution, whose
  input needs no gradient), 20 % among the batch-norm layers (with the ReLU/add around them:
  memory bound) in proportion to the activations they touch. A layer's time goes on its first
  tensor (weight, gamma); the others (bias, beta) carry 0 ms and become ready with it.

``--profile FILE`` replaces it: a JSON list ``[{"name", "numel", "backward_ms"}, ...]`` in
parameter (forward) order, or ``{"forward_ms": x, "tensors": [...]}``; without
``forward_ms`` the forward takes half the backward.

Cost model (:func:`pipeline`): ring allreduce of ``n`` bytes over ``p`` ranks takes
``2 (p-1)/p * n * beta + 2 (p-1) * alpha``; buckets are reduced one after another, each from
the moment backward produced its last gradient; the step ends when backward and the last
bucket are done.

Example:
    >>> tensors = resnet50_profile()
    >>> len(tensors), sum(t["numel"] for t in tensors)
    (161, 25557032)
    >>> round(sum(t["backward_ms"] for t in tensors), 1)
    111.1
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

V100_FP32_IMG_PER_S = 384.0  # DGX-1 V100 16GB, 1 GPU, MXNet, FP32 (README cited above)
BATCH = 64
STEP_MS = 1000.0 * BATCH / V100_FP32_IMG_PER_S
BACKWARD_SHARE = 2.0 / 3.0
CONV_SHARE = 0.8  # of backward; the rest goes to batch norm (+ ReLU/add)
PROFILE_SOURCE = ("NVIDIA DeepLearningExamples MxNet/Classification/RN50v1.5/README.md, DGX-1 "
                  "V100 16GB, 1 GPU, FP32 batch 96: 384 img/s (mxnet-20.12-py3)")


def resnet50_layers() -> list[dict]:
    """ResNet-50 v1.5's layers in forward order: name, kind, parameter shapes, multiply-adds
    per image and output activation elements per image (224x224 input)."""
    layers: list[dict] = []

    def conv(name: str, cin: int, cout: int, k: int, out_hw: int, first: bool = False) -> None:
        macs = out_hw * out_hw * cout * cin * k * k
        layers.append({"name": name, "kind": "conv", "shapes": [(cout, cin, k, k)],
                       "macs": macs, "backward_factor": 1 if first else 2})
        layers.append({"name": name.replace("conv", "bn").replace("downsample.0",
                                                                  "downsample.1"),
                       "kind": "bn", "shapes": [(cout,), (cout,)],
                       "activations": out_hw * out_hw * cout})

    conv("conv1", 3, 64, 7, 112, first=True)
    cin, hw = 64, 56
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), 1):
        for block in range(blocks):
            stride = 2 if stage > 1 and block == 0 else 1
            out_hw = hw // stride
            prefix = f"layer{stage}.{block}"
            conv(f"{prefix}.conv1", cin, width, 1, hw)
            conv(f"{prefix}.conv2", width, width, 3, out_hw)  # v1.5: the stride is here
            conv(f"{prefix}.conv3", width, 4 * width, 1, out_hw)
            if block == 0:
                conv(f"{prefix}.downsample.0", cin, 4 * width, 1, out_hw)
            cin, hw = 4 * width, out_hw
    layers.append({"name": "fc", "kind": "conv", "shapes": [(1000, 2048), (1000,)],
                   "macs": 2048 * 1000, "backward_factor": 2})
    return layers


def resnet50_profile(step_ms: float = STEP_MS) -> list[dict]:
    """The 161 tensors ``{"name", "numel", "backward_ms"}`` in forward order (see module doc)."""
    layers = resnet50_layers()
    backward_ms = step_ms * BACKWARD_SHARE
    work = sum(layer["macs"] * layer["backward_factor"] for layer in layers
               if layer["kind"] == "conv")
    touched = sum(layer["activations"] for layer in layers if layer["kind"] == "bn")
    tensors = []
    for layer in layers:
        if layer["kind"] == "conv":
            ms = backward_ms * CONV_SHARE * layer["macs"] * layer["backward_factor"] / work
        else:
            ms = backward_ms * (1 - CONV_SHARE) * layer["activations"] / touched
        suffixes = ("weight", "bias")
        for i, shape in enumerate(layer["shapes"]):
            tensors.append({"name": f"{layer['name']}.{suffixes[i]}",
                            "numel": math.prod(shape), "backward_ms": ms if i == 0 else 0.0})
    return tensors


@dataclass
class Profile:
    """Tensors in forward order and the forward time (milliseconds)."""

    tensors: list[dict]
    forward_ms: float
    source: str

    @property
    def backward_ms(self) -> float:
        return sum(t["backward_ms"] for t in self.tensors)

    @property
    def compute_ms(self) -> float:
        """One rank's step: forward plus backward (what one rank alone takes)."""
        return self.forward_ms + self.backward_ms

    def scaled(self, time_scale: float, size_scale: float) -> "Profile":
        tensors = [{"name": t["name"], "numel": max(1, round(t["numel"] * size_scale)),
                    "backward_ms": t["backward_ms"] * time_scale} for t in self.tensors]
        return Profile(tensors, self.forward_ms * time_scale, self.source)


def load_profile(path: str | None, step_ms: float = STEP_MS) -> Profile:
    """The built-in ResNet-50 profile, or one read from a JSON file (see module doc)."""
    if path is None:
        tensors = resnet50_profile(step_ms)
        return Profile(tensors, step_ms * (1 - BACKWARD_SHARE),
                       f"{PROFILE_SOURCE}; step at batch {BATCH}: {step_ms:.1f} ms, "
                       f"backward {BACKWARD_SHARE:.3f} of it")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    tensors = data["tensors"] if isinstance(data, dict) else data
    clean = []
    for i, t in enumerate(tensors):
        numel, ms = int(t["numel"]), float(t["backward_ms"])
        if numel < 1 or ms < 0 or not math.isfinite(ms):
            raise ValueError(f"{path}: tensor #{i} ({t.get('name')}): numel must be >= 1 and "
                             f"backward_ms finite and >= 0, got {numel}, {ms}")
        clean.append({"name": str(t.get("name", f"t{i}")), "numel": numel, "backward_ms": ms})
    if not clean:
        raise ValueError(f"{path}: no tensors")
    backward = sum(t["backward_ms"] for t in clean)
    forward = float(data.get("forward_ms", backward / 2)) if isinstance(data, dict) \
        else backward / 2
    return Profile(clean, forward, f"file {path}")


def backward_ops(tensors: list[dict]) -> list[tuple[list[int], float]]:
    """The backward as ops in backward order: ``(tensor indices, cumulative ms at its end)``.
    Tensors of 0 ms join the next op (a bias becomes ready with its layer's weight)."""
    ops: list[tuple[list[int], float]] = []
    waiting: list[int] = []
    elapsed = 0.0
    for index in reversed(range(len(tensors))):
        waiting.append(index)
        ms = tensors[index]["backward_ms"]
        if ms > 0 or index == 0:
            elapsed += ms
            ops.append((waiting, elapsed))
            waiting = []
    return ops


def slice_buckets(tensors: list[dict], bucket_numel: int) -> list[tuple[int, int, int]]:
    """The gradients lie back to back in forward order; buckets are ``bucket_numel``-element
    slices cut from the end (the order backward fills them). Returns ``(start, stop, op)``
    per bucket in reduction order, ``op`` being the backward op after which it is ready."""
    ops = backward_ops(tensors)
    starts, at = [], 0
    for t in tensors:
        starts.append(at)
        at += t["numel"]
    op_of = {}
    for place, (indices, _) in enumerate(ops):
        for index in indices:
            op_of[index] = place
    buckets, stop = [], at
    while stop > 0:
        start = max(0, stop - max(1, bucket_numel))
        first = max(i for i in range(len(tensors)) if starts[i] <= start)  # lowest tensor in it
        buckets.append((start, stop, op_of[first]))
        stop = start
    return buckets


def ring_ms(nbytes: float, ranks: int, alpha_us: float, gbps: float) -> float:
    """Ring allreduce: 2 (p-1)/p * n * beta + 2 (p-1) * alpha (beta = 1 / bandwidth)."""
    if ranks <= 1:
        return 0.0
    beta_ms_per_byte = 1e3 / (gbps * 1e9 / 8)
    return 2 * (ranks - 1) / ranks * nbytes * beta_ms_per_byte + 2 * (ranks - 1) * alpha_us / 1e3


def pipeline(profile: Profile, ranks: int, bucket_bytes: float, alpha_us: float, gbps: float,
             rounds_per_step: float = 0.0, itemsize: int = 4) -> dict:
    """Step time, efficiency and hidden fraction of fused ring allreduces overlapping backward.

    ``rounds_per_step`` adds the store's negotiations: one small allreduce each, which MPI
    runs by recursive doubling (``ceil(log2 p) * alpha``), in the communication stream.
    """
    ops = backward_ops(profile.tensors)
    buckets = slice_buckets(profile.tensors, max(1, int(bucket_bytes // itemsize)))
    free = comm_ms = 0.0
    negotiation = rounds_per_step * math.ceil(math.log2(max(ranks, 2))) * alpha_us / 1e3
    for start, stop, op in buckets:
        ready = profile.forward_ms + ops[op][1]
        cost = ring_ms((stop - start) * itemsize, ranks, alpha_us, gbps)
        free = max(free, ready) + cost
        comm_ms += cost
    free += negotiation
    comm_ms += negotiation
    step = max(profile.compute_ms, free)
    exposed = step - profile.compute_ms
    return {"step_ms": round(step, 3), "efficiency": round(profile.compute_ms / step, 4),
            "comm_ms": round(comm_ms, 3),
            "hidden_fraction": round(1 - exposed / comm_ms, 4) if comm_ms > 0 else 1.0,
            "buckets": len(buckets)}


def estimate(full: Profile, ranks: int, bucket_mbs: list[float], gbps: float,
             latency_us: float, rounds_per_step: float | None = None,
             measured_at: int | None = None) -> dict:
    """The alpha-beta estimate at ``ranks`` of the unscaled profile ``full`` for each bucket
    size, with its assumptions stated (``store``: with the negotiation rounds per step
    measured in the flat run at ``measured_at`` ranks)."""
    out = {"ranks": ranks,
           "assumptions": {
               "allreduce": "ring: 2(p-1)/p*n*beta + 2(p-1)*alpha per bucket",
               "network": f"{gbps:g} Gb/s per link, {latency_us:g} us latency "
                          f"(replacing this machine's loopback); one rank per NIC",
               "overlap": "buckets reduced one at a time, each once backward produced its "
                          "last gradient; forward does not overlap communication",
               "profile": full.source + " (unscaled: full tensor sizes and times)",
               "compute_ms": round(full.compute_ms, 2),
               "gradients_mb": round(sum(t["numel"] for t in full.tensors) * 4 / 2**20, 1),
               "store": f"as the peer, plus one negotiation per round ({rounds_per_step} "
                        f"per step, as measured in the {measured_at}-rank flat run), by "
                        f"recursive doubling: ceil(log2 p)*alpha each",
               "left_out": "host CPU (Python) time of either side, and contention between "
                           "the ranks sharing a node's network link"},
           "estimates": {}}
    for mb in bucket_mbs:
        name = f"bucket_{mb:g}mb"
        out["estimates"][name] = {
            "peer": pipeline(full, ranks, mb * 2**20, latency_us, gbps)}
        if rounds_per_step is not None:
            out["estimates"][name]["store"] = pipeline(full, ranks, mb * 2**20, latency_us,
                                                       gbps, rounds_per_step)
    return out
