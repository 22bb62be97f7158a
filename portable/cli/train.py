"""Train a zoo model (mlp, lenet, resnet-small) on digits, MNIST or Fashion-MNIST.

Trains with a progress bar, writes checkpoints (safetensors + JSON manifests) every epoch, a
PNG plot of loss and accuracy per epoch, the final parameters and a summary; ``--resume``
continues exactly where the last good checkpoint left off. An output folder belongs to one run:
a new run into a folder holding another run's checkpoints is refused unless ``--fresh`` is
given (which deletes them), so ``--resume`` never continues a run other than the last one.

Example:
    $ portable train --model lenet --json
    $ portable train --model mlp --dataset mnist --data-dir ~/mnist --epochs 5 --out runs/m
    $ portable train --model lenet --out runs/l --resume --export runs/l/model.onnx
    $ portable train --model lenet --out runs/l --fresh      # start over in runs/l
    $ portable train --model mlp --export runs/m/model.portable   # the deployment format
    $ portable launch -n 4 --servers 1 -- portable train --kvstore dist_async \
          --algorithm easgd --tau 4 --easgd-alpha 0.45     # MPI Elastic SGD, centre exported
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from portable.cli.arguments import (nonnegative_float, nonnegative_int, positive_float,
                                    positive_int, unit_fraction)
from portable.io.atomic import remove_stale_temporaries

# Default epochs per model and learning rate per optimizer. With Adam and a cosine schedule
# these reach 98-99% test accuracy on digits (seeds 0-3) in seconds to a minute on 2 cores.
DEFAULT_EPOCHS = {"mlp": 10, "lenet": 12, "resnet-small": 10}
DEFAULT_LR = {"adam": 4e-3, "adamw": 4e-3, "sgd": 0.05, "nag": 0.05, "rmsprop": 1e-3,
              "adagrad": 0.05}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=("mlp", "lenet", "resnet-small"), default="lenet")
    parser.add_argument("--dataset", choices=("digits", "mnist", "fashion-mnist"),
                        default="digits", help="digits is bundled with scikit-learn; MNIST and "
                        "Fashion-MNIST are read from IDX files in --data-dir")
    parser.add_argument("--data-dir", default=None, help="folder of the MNIST/Fashion-MNIST "
                        "IDX files (default ~/.portable/datasets/<dataset>)")
    parser.add_argument("--epochs", type=positive_int, default=None,
                        help="total epochs (default: mlp 10, lenet 12, resnet-small 10)")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--optimizer", default="adam",
                        choices=("sgd", "nag", "adam", "adamw", "rmsprop", "adagrad"))
    parser.add_argument("--lr", type=positive_float, default=None,
                        help="base learning rate (default: adam 0.004, sgd 0.05, ...)")
    parser.add_argument("--momentum", type=nonnegative_float, default=0.9, help="for sgd and nag")
    parser.add_argument("--wd", type=nonnegative_float, default=0.0, help="weight decay")
    parser.add_argument("--lr-schedule", choices=("constant", "cosine", "step"),
                        default="cosine")
    parser.add_argument("--warmup-steps", type=nonnegative_int, default=0)
    parser.add_argument("--device", default="cpu",
                        help="cpu, opencl or cuda (optionally with an index: cuda:1)")
    parser.add_argument("--kvstore", default="local",
                        help="local, or dist_sync / dist_sync_hierarchical / dist_async under "
                        "'portable launch -n N -- portable train ...'")
    parser.add_argument("--algorithm", choices=("sgd", "easgd", "local_sgd"), default=None,
                        help="with --kvstore dist_async: sgd (default: the servers apply the "
                        "optimizer), easgd (allreduce groups train replicas, the servers hold "
                        "the elastic centre, which is evaluated and saved) or local_sgd "
                        "(replicas averaged every --tau steps)")
    parser.add_argument("--tau", type=positive_int, default=None,
                        help="easgd / local_sgd: steps between elastic exchanges / averages "
                        "(default 1)")
    parser.add_argument("--easgd-alpha", type=unit_fraction, default=None,
                        help="easgd: the elastic coefficient in (0, 1] (default 0.9 / groups)")
    parser.add_argument("--easgd-sync", action="store_true",
                        help="easgd: synchronous rounds (every group waits for the others at "
                        "each exchange; deterministic)")
    parser.add_argument("--out", default=None, help="output folder (default runs/MODEL-DATASET)")
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--resume", action="store_true",
                          help="continue the run in OUT/checkpoints from its newest good "
                          "checkpoint (same run id)")
    run_mode.add_argument("--fresh", action="store_true",
                          help="start a new run even if OUT/checkpoints holds another run's "
                          "checkpoints: they are deleted first (without --resume or --fresh "
                          "such a folder is refused)")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--checkpoint-every", type=positive_int, default=1, help="epochs between "
                        "checkpoints")
    parser.add_argument("--checkpoint-steps", type=nonnegative_int, default=0,
                        help="also checkpoint every N steps, mid-epoch (0: never)")
    parser.add_argument("--keep", type=positive_int, default=3, help="checkpoints to keep")
    parser.add_argument("--patience", type=nonnegative_int, default=0,
                        help="early stopping on validation loss after N epochs (0: off)")
    parser.add_argument("--no-hybridize", action="store_true",
                        help="run the model imperatively instead of as a compiled graph")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--export", metavar="PATH", default=None,
                        help="export the trained model: a PATH ending in .onnx is written as "
                        "ONNX, any other (PATH.portable) in portable's deployment format, "
                        "which a device reads with NumPy alone")
    parser.add_argument("--json", action="store_true",
                        help="end with one JSON object on the last line of stdout")


def _device(spec: str) -> Any:
    from portable.device import as_device
    from portable.errors import PortableError

    device = as_device(spec)
    if device.device_type not in ("cpu", "opencl", "cuda"):
        raise PortableError(f"--device must be cpu, opencl or cuda, got {spec!r}")
    device.backend  # load it now: a missing extra is reported before any work
    return device


def _store_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``kv.create`` that the algorithm flags ask for (checked
    together: a flag the chosen algorithm does not use is refused, never ignored)."""
    from portable.errors import PortableError

    algorithm = args.algorithm or "sgd"
    given = [flag for flag, value in (("--tau", args.tau), ("--easgd-alpha", args.easgd_alpha),
                                      ("--easgd-sync", args.easgd_sync or None))
             if value is not None]
    if args.algorithm is not None and args.kvstore not in ("dist_async", "dist_device_async"):
        raise PortableError(f"--algorithm {algorithm} runs on --kvstore dist_async (under "
                            f"'portable launch --servers K'), not {args.kvstore}")
    allowed = {"sgd": [], "local_sgd": ["--tau"],
               "easgd": ["--tau", "--easgd-alpha", "--easgd-sync"]}[algorithm]
    refused = [flag for flag in given if flag not in allowed]
    if refused:
        raise PortableError(f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not "
                            f"apply to --algorithm {algorithm}; use --algorithm "
                            f"{'easgd' if 'easgd' in refused[0] else 'easgd or local_sgd'}")
    if args.algorithm is None:
        return {}
    settings: dict[str, Any] = {"algorithm": algorithm}
    if args.tau is not None:
        settings["tau"] = args.tau
    if args.easgd_alpha is not None:
        settings["alpha"] = args.easgd_alpha
    if args.easgd_sync:
        settings["sync"] = True
    return settings


def _scheduler(args: argparse.Namespace, steps_per_epoch: int, epochs: int) -> Any:
    from portable.optim import lr_scheduler as ls

    total = max(steps_per_epoch * epochs, args.warmup_steps + 1)
    warm = {"warmup_steps": args.warmup_steps}
    if args.lr_schedule == "cosine":
        return ls.CosineScheduler(max_update=total, final_lr=0.0, **warm)
    if args.lr_schedule == "step":
        return ls.MultiFactorScheduler(step=[int(total * 0.5), int(total * 0.75)], factor=0.1,
                                       **warm)
    return ls.LRScheduler(**warm) if args.warmup_steps else None


def run(args: argparse.Namespace) -> int:
    import portable
    from portable.data import ArrayDataset, DataLoader
    from portable.data.vision import load_arrays
    from portable.distributed import shard
    from portable.fit import EarlyStopping, evaluate, fit
    from portable.gluon import Trainer
    from portable.models.zoo import get_model

    started = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    epochs = args.epochs if args.epochs is not None else DEFAULT_EPOCHS[args.model]
    optimizer = args.optimizer
    lr = args.lr if args.lr is not None else DEFAULT_LR.get(optimizer, 0.01)
    out = Path(args.out or f"runs/{args.model}-{args.dataset}")
    store_settings = _store_settings(args)
    remove_stale_temporaries(out)  # left by a run killed while it wrote here
    device = _device(args.device)

    portable.random.seed(args.seed)
    split = load_arrays(args.dataset, args.data_dir)
    kv = portable.kv.create(args.kvstore, **store_settings)
    mine = shard(len(split.x_train), kv)  # this worker's samples
    train = DataLoader(ArrayDataset(split.x_train[mine], split.y_train[mine]), args.batch_size,
                       shuffle=True, last_batch="discard")
    test = DataLoader(ArrayDataset(split.x_test, split.y_test), 256)
    classes = int(split.y_train.max()) + 1
    net = get_model(args.model, num_classes=classes)
    net.initialize(portable.init.Xavier(magnitude=2.0), device=device)
    if not args.no_hybridize:
        net.hybridize()
    # Stores sum the workers' gradients; average them so N workers match one process (a
    # replica store sums over the worker's group only: its replica trains on the group's mean).
    summed = getattr(kv, "gradient_workers", kv.num_workers)
    opt_params = {"learning_rate": lr, "wd": args.wd, "rescale_grad": 1.0 / summed}
    if optimizer in ("sgd", "nag"):
        opt_params["momentum"] = args.momentum
    sched = _scheduler(args, len(train), epochs)
    if sched is not None:
        opt_params["lr_scheduler"] = sched
    trainer = Trainer(net.collect_params(), optimizer, opt_params, kvstore=kv)
    architecture = {"model": args.model, "dataset": args.dataset, "optimizer": optimizer,
                    "lr": lr, "batch_size": args.batch_size, "seed": args.seed,
                    "input_shape": list(split.x_train.shape[1:])}
    result = fit(net, train, val_data=test, trainer=trainer, epochs=epochs, metrics="acc",
                 device=device, checkpoint_dir=out / "checkpoints",
                 checkpoint_every=args.checkpoint_every, checkpoint_steps=args.checkpoint_steps,
                 keep_checkpoints=args.keep, resume=args.resume, fresh=args.fresh,
                 early_stopping=EarlyStopping("val_loss", args.patience) if args.patience
                 else None, progress=not args.no_progress, architecture=architecture)

    if hasattr(kv, "pull_center"):  # EASGD's centre (local SGD's average) is the model
        trainer.pull_center()
    scores = evaluate(net, test, "acc", device=device)
    if kv.rank != 0:
        return 0  # every worker holds the same model; rank 0 writes the files and summary
    paths = {"out": str(out), "checkpoint": result["checkpoint"]}
    params_path = out / "model.params.safetensors"
    net.save_parameters(str(params_path))
    paths["params"] = str(params_path)
    history_path = out / "history.json"
    from portable.io.atomic import atomic_write_text

    atomic_write_text(history_path, json.dumps(result["history"], indent=1))
    paths["history"] = str(history_path)
    if result["history"]:
        paths["plot"] = str(plot_history(result["history"], out / "training.png",
                                         f"{args.model} on {args.dataset}"))
    if args.export:
        example = portable.nd.array(split.x_test[:1], device=device)
        about = {"model": args.model, "dataset": args.dataset, "source": "portable train",
                 "producer": f"portable {portable.__version__} train",
                 "test_accuracy": float(scores["accuracy"]), "classes": classes,
                 "input_shape": architecture["input_shape"]}
        written = export_model(net, example, args.export, about)
        paths["onnx" if written == "onnx" else "deployment"] = str(args.export)
    summary = {"model": args.model, "dataset": args.dataset,
               "test_accuracy": float(scores["accuracy"]), "epochs": result["epochs"],
               "steps": result["steps"], "seconds": round(time.perf_counter() - started, 2),
               "train_seconds": round(result["seconds"], 2), "device": str(device),
               "seed": args.seed, "run_id": result["run_id"],
               "resumed_from": result["resumed_from"],
               "refused_checkpoints": result["refused_checkpoints"],
               "final_train_loss": result["history"][-1]["train_loss"]
               if result["history"] else None, "paths": paths}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{args.model} on {args.dataset}: test accuracy {summary['test_accuracy']:.4f} "
              f"after {summary['epochs']} epochs ({summary['seconds']:.1f} s); wrote {out}")
    return 0


def export_model(net: Any, example: Any, path: str, metadata: dict[str, Any]) -> str:
    """Export ``net`` traced on ``example`` to ``path``; returns the format written.

    A ``.onnx`` path gets ONNX (``Block.export_onnx``) with a symbolic batch axis, so that
    onnxruntime runs it at any batch size. Any other path gets the deployment format, the
    traced inference graph and its weights written directly (``Block.inference_graph``, no
    ONNX needed; the Predictor rebatches it with ``batch_size``).
    """
    from portable.cli.export import output_format
    from portable.predict import deployment

    if output_format(path) == "onnx":
        net.export_onnx(path, example, dynamic_batch=True)
        return "onnx"
    graph, params = net.inference_graph(example)
    deployment.save(graph, path, params, metadata=metadata)
    return "portable"


def plot_history(history: list[dict], path: Path, title: str) -> Path:
    """Write a PNG with loss (left) and accuracy (right) per epoch, train and test.

    Uses matplotlib's object API with the Agg canvas (no pyplot, no display needed).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from portable.io.atomic import atomic_write_bytes

    epochs = [r["epoch"] for r in history]
    fig = Figure(figsize=(9, 3.6))
    FigureCanvasAgg(fig)
    ax_loss, ax_acc = fig.subplots(1, 2)
    for ax, key in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        for prefix, style, label in (("train", "-o", "train"), ("val", "-s", "test")):
            values = [r.get(f"{prefix}_{key}") for r in history]
            if any(v is not None for v in values):
                ax.plot(epochs, values, style, markersize=3, label=label)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    atomic_write_bytes(path, buffer.getvalue())
    return path
