"""Coverage-guided fuzzing of portable's file readers for a bounded time; prints one JSON line.

    python benchmarks/fuzz_readers.py --seconds 60 [--target onnx|deployment|tensors|all]
                                      [--engine atheris|hypothesis] [--out FINDINGS_DIR]
                                      [--plan] [--timeout 10] [--rss-limit-mb 2048]
    python benchmarks/fuzz_readers.py --replay FINDINGS_DIR/onnx-crash-... --target onnx

Targets (each gets ``--seconds`` of fuzzing):

* ``onnx``: bytes -> ``portable.io.onnx.importer.import_graph`` (with ``--plan``, a graph that
  imports is also optimised and memory-planned);
* ``deployment``: bytes written to a file -> ``portable.predict.deployment.load`` (with and
  without crc checks) and ``describe``;
* ``tensors``: safetensors bytes -> ``portable.io.tensors.parse_tensor_bytes`` (copied and
  viewed) and ``tensors_from_bytes``.

Seeds are valid files (ONNX models made with the ``onnx`` helpers, deployment files written
by ``deployment.save``, tensor files by ``tensor_file_bytes``). Mutations are both byte-level
and structure-aware (protobuf fields of an ONNX model; the JSON header of a safetensors file,
and the graph JSON inside a deployment file, whose crc32 is then fixed so that mutants get past
the checksum to the graph reader). Both are built in ``fuzz_inputs.py``, beside this script.

A finding is an exception that is not a ``portable.errors.PortableError`` (MemoryError and
RecursionError included), an input that runs longer than ``--timeout`` seconds, or one that
takes the process past ``--rss-limit-mb``. Each finding's input is kept in ``--out`` (with a
JSON report beside it) for ``--replay``.

Engines: ``atheris`` (libFuzzer, coverage-guided; ``pip install 'portable[fuzz]'``) runs each
target in a subprocess. libFuzzer stops at the first crash, so the driver restarts it with
the corpus it has grown, telling it the findings already known (by exception type and the
innermost portable frame), until the time is spent. Without atheris, ``hypothesis`` draws
mutation programs over the seeds (not coverage-guided) for the same time, in this process.
Exit status: 0 when nothing was found, 1 otherwise.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import numpy as np

# Run as a script (directly, as the atheris child, from the tests): its folder is sys.path[0].
from fuzz_inputs import MAX_LEN, all_seeds, mutate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ("onnx", "deployment", "tensors")


class Hang(BaseException):
    """An input ran past the time limit (raised by a CPU-time alarm between bytecodes)."""


# -- targets ----------------------------------------------------------------------------------


class Targets:
    """The readers under test, imported on construction (inside atheris' instrumentation)."""

    def __init__(self, plan: bool = False, scratch: str | None = None) -> None:
        from portable.errors import PortableError
        from portable.io import tensors
        from portable.io.onnx import importer
        from portable.passes import pipeline, plan_memory
        from portable.predict import deployment

        self.refusal = PortableError
        self.plan = plan
        self._tensors, self._importer, self._deployment = tensors, importer, deployment
        self._pipeline, self._plan_memory = pipeline, plan_memory
        self._scratch = scratch or tempfile.mkdtemp(
            prefix="fuzz-readers-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self._path = os.path.join(self._scratch, "input.portable")
        self._count = 0

    def run(self, target: str, data: bytes) -> None:
        getattr(self, target)(data)

    def onnx(self, data: bytes) -> None:
        graph, _ = self._importer.import_graph(data)
        if self.plan:
            graph = self._pipeline.optimize(graph, "all")
            self._plan_memory.plan_memory(graph)

    def deployment(self, data: bytes) -> None:
        # A fresh file each time, renamed over the last: arrays still mapping the previous
        # file keep its (unlinked) pages, so rewriting cannot pull pages from under them.
        self._count += 1
        staged = f"{self._path}.{self._count % 2}"
        with open(staged, "wb") as handle:
            handle.write(data)
        os.replace(staged, self._path)
        self._all((lambda: self._deployment.load(self._path),
                   lambda: self._deployment.load(self._path, verify=False),
                   lambda: self._deployment.describe(self._path)))

    def tensors(self, data: bytes) -> None:
        self._all((lambda: self._tensors.parse_tensor_bytes(data),
                   lambda: self._tensors.parse_tensor_bytes(data, writable=False),
                   lambda: self._tensors.tensors_from_bytes(data)))

    def _all(self, steps: tuple[Callable[[], Any], ...]) -> None:
        """Run every reader; a finding propagates at once, a refusal after the others ran."""
        refused = None
        for step in steps:
            try:
                step()
            except self.refusal as exc:
                refused = refused or exc
        if refused is not None:
            raise refused

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)


def describe_exception(exc: BaseException, target: str, data: bytes) -> dict[str, Any]:
    """The finding's record: type, first message line, innermost frames, and a signature
    (type and innermost portable frame) that tells repeats of one bug apart from new ones."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}portable{os.sep}" in f.filename] or frames[-1:]
    top = ours[-1] if ours else None
    where = f"{_short(top.filename)}:{top.lineno}" if top else "?"
    message = str(exc).splitlines()[0][:300] if str(exc) else ""
    return {"target": target, "kind": "exception", "exception": type(exc).__name__,
            "message": message, "where": where, "signature": f"{type(exc).__name__}@{where}",
            "input_bytes": len(data), "sha1": hashlib.sha1(data).hexdigest(),
            "frames": [f"{_short(f.filename)}:{f.lineno} in {f.name}: "
                       f"{(f.line or '').strip()}" for f in frames[-6:]]}


def _short(filename: str) -> str:
    """A path relative to the repository, or from its ``lib/pythonX.Y`` for the stdlib."""
    if filename.startswith(REPO + os.sep):
        return os.path.relpath(filename, REPO)
    return re.sub(r"^.*/lib/(python[\d.]+/)", r"\1", filename)


def guarded(targets: Targets, target: str, data: bytes, timeout: float
            ) -> tuple[str, BaseException | None]:
    """Run one input: ``("ok" | "refused" | "finding", exception)``. A CPU-time alarm turns a
    loop in Python code into a Hang exception (with a traceback saying where it spun)."""
    def alarm(signum, frame):
        raise Hang(f"input ran longer than {timeout:g} s of CPU time")

    previous = signal.signal(signal.SIGPROF, alarm)
    signal.setitimer(signal.ITIMER_PROF, timeout)
    try:
        targets.run(target, data)
        return "ok", None
    except targets.refusal as exc:
        return "refused", exc
    except (Exception, Hang, RecursionError, MemoryError) as exc:  # noqa: B014: said aloud
        return "finding", exc
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


# -- atheris: the child process ---------------------------------------------------------------


def atheris_child(args: argparse.Namespace, libfuzzer_args: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["portable"]):
        targets = Targets(plan=args.plan)
    np.seterr(all="ignore")
    known = set()
    if args.known and os.path.exists(args.known):
        with open(args.known) as handle:
            known = set(json.load(handle))
    target, report, timeout = args.child, args.report, max(1.0, args.timeout * 0.8)

    def test_one_input(data: bytes) -> None:
        outcome, exc = guarded(targets, target, data, timeout)
        if outcome != "finding":
            return
        record = describe_exception(exc, target, data)
        if isinstance(exc, Hang):
            record["kind"] = "hang"
        if record["signature"] in known:
            return  # a bug already reported: keep fuzzing for others
        with open(report, "w") as handle:
            json.dump(record, handle)
        raise exc

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return atheris.Mutate(data, max_size)
        return mutate(target, data, rng)[:max_size]

    atheris.Setup([sys.argv[0]] + libfuzzer_args, test_one_input,
                  custom_mutator=custom_mutator)
    atheris.Fuzz()


# -- atheris: the driver ----------------------------------------------------------------------


def _stats(stderr: str) -> dict[str, int]:
    found = {}
    units = re.findall(r"stat::number_of_executed_units:\s*(\d+)", stderr)
    done = re.findall(r"Done (\d+) runs in", stderr)
    progress = re.findall(r"^#(\d+)\s", stderr, re.M)
    found["executions"] = int((units or done or progress or [0])[-1])
    cov = re.findall(r"cov: (\d+) ft: (\d+)(?: corp: (\d+))?", stderr)
    if cov:
        found.update(cov=int(cov[-1][0]), ft=int(cov[-1][1]),
                     corpus=int(cov[-1][2]) if cov[-1][2] else 0)
    return found


def _artifact(stderr: str) -> str | None:
    paths = re.findall(r"Test unit written to (\S+)", stderr)
    return paths[-1] if paths else None


def fuzz_atheris(target: str, args: argparse.Namespace, out: str, work: str) -> dict:
    seeds_dir = os.path.join(work, f"{target}-seeds")
    corpus = os.path.join(work, f"{target}-corpus")
    os.makedirs(seeds_dir, exist_ok=True)
    os.makedirs(corpus, exist_ok=True)
    for index, seed in enumerate(all_seeds(target)):
        with open(os.path.join(seeds_dir, f"seed{index}"), "wb") as handle:
            handle.write(seed)
    known_path = os.path.join(work, f"{target}-known.json")
    report = os.path.join(work, f"{target}-report.json")
    known: list[str] = []
    findings: list[dict] = []
    result = {"executions": 0, "coverage": {}, "findings": findings, "runs": 0}
    deadline = time.monotonic() + args.seconds
    repeats = 0
    while time.monotonic() < deadline - 2 and result["runs"] < args.max_restarts:
        with open(known_path, "w") as handle:
            json.dump(known, handle)
        if os.path.exists(report):
            os.remove(report)
        remaining = max(1, int(deadline - time.monotonic()))
        command = [sys.executable, os.path.abspath(__file__), "--child", target,
                   "--known", known_path, "--report", report, "--timeout", str(args.timeout)]
        command += ["--plan"] if args.plan else []
        command += ["--", corpus, seeds_dir, f"-max_total_time={remaining}",
                    f"-timeout={int(args.timeout)}", f"-rss_limit_mb={args.rss_limit_mb}",
                    f"-artifact_prefix={os.path.join(out, target)}-", "-print_final_stats=1",
                    f"-max_len={MAX_LEN}", "-len_control=0", f"-seed={args.seed + repeats}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, errors="replace",
                                  timeout=remaining + 120, cwd=REPO,
                                  env={**os.environ, "OMP_NUM_THREADS": "1",
                                       "OPENBLAS_NUM_THREADS": "1"})
            stderr, rc = done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            stderr, rc = (exc.stderr or b"").decode("utf-8", "replace") \
                if isinstance(exc.stderr, bytes) else (exc.stderr or ""), -1
        result["runs"] += 1
        stats = _stats(stderr)
        result["executions"] += stats.pop("executions")
        result["coverage"] = stats or result["coverage"]
        if rc == 0:
            break
        finding = _classify(stderr, rc, report, target)
        finding["input"] = _artifact(stderr)
        if finding["signature"] in known:
            repeats += 1  # a hang or OOM found again: the child cannot skip those itself
            if repeats >= 3:
                break
            continue
        known.append(finding["signature"])
        findings.append(finding)
        _write_report(out, finding)
    return result


def _classify(stderr: str, rc: int, report: str, target: str) -> dict:
    if os.path.exists(report):
        with open(report) as handle:
            return json.load(handle)
    tail = stderr[-2000:]
    for kind, pattern in (("timeout", r"libFuzzer: timeout"), ("oom", r"out-of-memory"),
                          ("crash", r"deadly signal"), ("leak", r"LeakSanitizer")):
        if re.search(pattern, stderr):
            break
    else:
        kind = "exit"
    line = next((l for l in reversed(tail.splitlines()) if "ERROR" in l or "==" in l), "")
    return {"target": target, "kind": kind, "exception": None, "message": line.strip()[:300],
            "where": None, "signature": f"{kind}@{target}", "rc": rc, "frames": [],
            "stderr_tail": tail[-800:]}


def _write_report(out: str, finding: dict) -> None:
    name = finding.get("input") or finding["signature"]
    path = os.path.join(out, os.path.basename(name) + ".json")
    with open(path, "w") as handle:
        json.dump(finding, handle, indent=1)


# -- hypothesis -------------------------------------------------------------------------------


def fuzz_hypothesis(target: str, args: argparse.Namespace, out: str) -> dict:
    from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st

    seeds = all_seeds(target)
    targets = Targets(plan=args.plan)
    np.seterr(all="ignore")
    findings: list[dict] = []
    known: set[str] = set()
    counts = {"ok": 0, "refused": 0}
    outcomes: set[str] = set()
    deadline = time.monotonic() + args.seconds

    program = st.tuples(st.integers(0, len(seeds) - 1),
                        st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=6))

    @settings(max_examples=500, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(program)
    def run(case: tuple[int, list[int]]) -> None:
        if time.monotonic() >= deadline:
            return
        index, steps = case
        data = seeds[index]
        for step in steps:
            data = mutate(target, data, random.Random(step))
        outcome, exc = guarded(targets, target, data, args.timeout)
        if outcome != "finding":
            counts[outcome] += 1
            if exc is not None:
                outcomes.add(re.sub(r"\d+", "N", str(exc))[:80])
            return
        record = describe_exception(exc, target, data)
        record["kind"] = "hang" if isinstance(exc, Hang) else "exception"
        if record["signature"] not in known:
            known.add(record["signature"])
            path = os.path.join(out, f"{target}-finding-{record['sha1']}")
            with open(path, "wb") as handle:
                handle.write(data)
            record["input"] = path
            findings.append(record)
            _write_report(out, record)

    limit = _memory_limit(args.rss_limit_mb)
    try:
        batch = 0
        while time.monotonic() < deadline:
            seed(args.seed * 100_003 + batch)(run)()  # reproducible batches, each a new one
            batch += 1
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limit)
        targets.close()
    return {"executions": counts["ok"] + counts["refused"] + len(findings), **counts,
            "coverage": {"distinct_refusals": len(outcomes)}, "findings": findings}


def _memory_limit(extra_mb: int) -> tuple[int, int]:
    """Cap the address space at what the process maps now plus ``extra_mb`` (a runaway
    allocation then fails with MemoryError, a finding); returns the previous limit."""
    previous = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as handle:
        mapped = int(handle.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + extra_mb * 2 ** 20, previous[1]))
    return previous


# -- replay and main --------------------------------------------------------------------------


def replay(path: str, target: str, args: argparse.Namespace) -> int:
    with open(path, "rb") as handle:
        data = handle.read()
    targets = Targets(plan=args.plan)
    started = time.perf_counter()
    try:
        outcome, exc = guarded(targets, target, data, args.timeout)
    finally:
        targets.close()
    result: dict[str, Any] = {"replay": path, "target": target, "outcome": outcome,
                              "seconds": round(time.perf_counter() - started, 3)}
    if exc is not None:
        result["exception"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if outcome == "finding":
        result["finding"] = describe_exception(exc, target, data)
        traceback.print_exception(exc)
    print(json.dumps(result))
    return int(outcome == "finding")


def engine_available() -> str:
    """atheris where it is installed (it builds for some Pythons only), else hypothesis."""
    return "atheris" if importlib.util.find_spec("atheris") is not None else "hypothesis"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    libfuzzer_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, libfuzzer_args = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="per target")
    parser.add_argument("--target", choices=TARGETS + ("all",), default="all")
    parser.add_argument("--engine", choices=("atheris", "hypothesis"), default=None)
    parser.add_argument("--out", default=None, help="folder for crashing inputs and reports")
    parser.add_argument("--replay", default=None, help="run one input file and report")
    parser.add_argument("--plan", action="store_true", help="optimise and plan imported graphs")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per input")
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    parser.add_argument("--max-restarts", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", choices=TARGETS, help=argparse.SUPPRESS)
    parser.add_argument("--known", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        atheris_child(args, libfuzzer_args)
        return 0
    if args.replay:
        if args.target == "all":
            parser.error("--replay needs --target onnx|deployment|tensors")
        return replay(args.replay, args.target, args)
    engine = args.engine or engine_available()
    out = args.out or tempfile.mkdtemp(prefix="fuzz-findings-")
    os.makedirs(out, exist_ok=True)
    chosen = TARGETS if args.target == "all" else (args.target,)
    started = time.monotonic()
    results = {}
    with tempfile.TemporaryDirectory(prefix="fuzz-work-") as work:
        for target in chosen:
            if engine == "atheris":
                results[target] = fuzz_atheris(target, args, out, work)
            else:
                results[target] = fuzz_hypothesis(target, args, out)
    count = sum(len(r["findings"]) for r in results.values())
    print(json.dumps({"engine": engine, "targets": results, "plan": args.plan,
                      "seconds": round(time.monotonic() - started, 1), "out": out,
                      "findings_count": count}))
    return int(count > 0)


if __name__ == "__main__":
    raise SystemExit(main())
