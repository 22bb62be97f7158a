"""Train a Symbol-API MLP or LeNet on scikit-learn's bundled digits with plain SGD.

Example:
    $ portable digits --model lenet --epochs 20 --json
"""
from __future__ import annotations

import argparse
import json

from portable.cli.arguments import nonnegative_int, positive_float, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=("mlp", "lenet"), default="lenet")
    parser.add_argument("--epochs", type=positive_int, default=30)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--lr", type=positive_float, default=0.1)
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--json", action="store_true",
                        help="end with one JSON object on the last line of stdout")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from portable.data.digits import load_digits_split
    from portable.models.symbolic import SYMBOLIC_MODELS
    from portable.models.symbolic_training import train_classifier

    split = load_digits_split(seed=args.seed)
    bar = tqdm(total=args.epochs, desc=f"{args.model} on digits", unit="epoch")

    def on_epoch(record: dict) -> None:
        bar.set_postfix(loss=f"{record['loss']:.3f}", acc=f"{record['test_accuracy']:.3f}")
        bar.update(1)

    result = train_classifier(SYMBOLIC_MODELS[args.model](), split, epochs=args.epochs,
                              batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                              on_epoch=on_epoch)
    bar.close()
    summary = {"model": args.model, "dataset": "digits", "test_accuracy": result["test_accuracy"],
               "epochs": result["epochs"], "seconds": round(result["seconds"], 2),
               "train_loss": result["train_loss"]}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{args.model}: test accuracy {summary['test_accuracy']:.4f} after "
              f"{summary['epochs']} epochs in {summary['seconds']:.1f} s")
    return 0
