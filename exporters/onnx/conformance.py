"""The ONNX node conformance cases, run through ``exporters.onnx.backend`` in isolated workers.

Stages: list the modules of ``onnx.backend.test.case.node`` (each defines the cases of one op);
start worker processes; hand each an unfinished module (the costly ones first). A worker imports
the module, which generates its cases in memory, and runs each selected case (prepare the model,
run it, compare with onnx's own ``assert_similar_outputs``), reporting one JSON line per event.
The parent enforces a time limit per case and per module import: a worker past it, or one that
dies, is killed and replaced, the case is recorded as ``timeout`` (or ``died``), and the module
is handed out again without the cases already reported. No case can hang the run.

Selections: ``all`` runs every case; ``core`` runs the cases of the ops portable declares whose
graphs use only such ops. A case is labelled with the op it tests: an expanded function case
(``*_expanded``) with the function's op, so the expansion of a core op that uses other ops
(LayerNormalization's uses Size and CastLike) is not a core case. ``EXCLUDED`` lists cases left
out on purpose, each with the reason.

Example:
    >>> report = run_conformance(ops="core", device="cpu", jobs=2)   # doctest: +SKIP
    >>> report["pass_rate"]                                           # doctest: +SKIP
"""
from __future__ import annotations

import argparse
import fnmatch
import importlib
import json
import os
import pkgutil
import queue
import subprocess
import sys
import threading
import time
from typing import Any, Iterable

import numpy as np

CASE_TIMEOUT = 60.0      # seconds for one case
# Test hook: "<case name>=hang" or "<case name>=die" makes a worker hang in, or die at, that case
# (tests of the watchdog set it; nothing else should).
FAULT_ENV = "PORTABLE_CONFORMANCE_FAULT"
IMPORT_TIMEOUT = 300.0   # seconds for a worker to import one module (generating its cases)
MAX_RESTARTS = 50        # workers replaced (hung or died) before the run gives up
# Modules whose import (generating reference outputs) takes seconds: handed out first.
COSTLY_MODULES = ("maxpool", "averagepool", "lppool", "attention")
PACKAGE = "onnx.backend.test.case.node"

# Cases left out on purpose: fnmatch pattern -> reason. A case here is neither run nor counted
# in the pass rate; the report lists how many each pattern removed.
EXCLUDED: dict[str, str] = {
    # (No element type is left out: bfloat16, float8, float4 and the 4- and 2-bit integers
    # are ml_dtypes' types, portable.dtypes.LOW_PRECISION. OpenCL refuses them, naming the
    # tensor: those cases count as errors on that device.)
    # Training-mode Dropout draws a random mask: the expected one comes from NumPy's global
    # generator, which no runtime reproduces (onnxruntime 1.32 fails these four as well; the
    # deterministic zero-ratio cases are run).
    "test_training_dropout": "random mask drawn by NumPy's global generator in the test",
    "test_training_dropout_default": "random mask drawn by NumPy's global generator",
    "test_training_dropout_default_mask": "random mask drawn by NumPy's global generator",
    "test_training_dropout_mask": "random mask drawn by NumPy's global generator",
}


# -- selection --------------------------------------------------------------------------------


def core_ops() -> set[str]:
    """The ONNX ops portable declares (the foundation op set), and the deprecated ones it reads
    as another op (Upsample as Resize)."""
    from portable.io.onnx.versions import REPLACED
    from portable.ops import registry

    return {op.short_name for op in registry.ops.values() if not op.domain} | set(REPLACED)


def onnx_ops() -> set[str]:
    """The ops portable declares of every ONNX domain (ai.onnx, ai.onnx.ml,
    ai.onnx.preview.training), by their op_type."""
    from portable.ops import registry

    return {op.short_name for op in registry.ops.values() if not op.private}


def draws_at_random(case: Any) -> bool:
    """Whether the case's graph holds a random op (declared ``random``): its expected
    outputs come from NumPy's generator in the test, which no runtime reproduces, so only
    their shapes and dtypes are compared."""
    from portable.ops import registry

    for node in case.model.graph.node:
        name = node.op_type if node.domain in ("", "ai.onnx") else \
            f"{node.domain}.{node.op_type}"
        if name in registry.ops and registry.ops[name].random:
            return True
    return False


def _normalised(name: str) -> str:
    return name.lower().replace("_", "")


def case_modules(selection: str) -> list[str]:
    """Names of the node-case modules to import for ``selection``, costly ones first. In
    ``core`` mode a module named after an op portable does not declare is skipped."""
    import onnx.backend.test.case.node as package
    from onnx import defs

    names = [m.name[len(PACKAGE) + 1:] for m in
             pkgutil.walk_packages(package.__path__, PACKAGE + ".") if not m.ispkg]
    if selection == "core":
        core = {_normalised(op) for op in core_ops()}
        others = {_normalised(s.name) for s in defs.get_all_schemas_with_history()} - core
        names = [n for n in names if _module_op(n) not in others]
    costly = [n for n in COSTLY_MODULES if n in names]
    return costly + sorted(n for n in names if n not in costly)


def _module_op(module: str) -> str:
    leaf = _normalised(module.rsplit(".", 1)[-1])
    return leaf[:-2] if leaf.endswith("op") and leaf != "op" else leaf


def excluded_reason(name: str) -> str | None:
    for pattern, reason in EXCLUDED.items():
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


# -- the worker -------------------------------------------------------------------------------


def _case_op(case: Any, ops_by_name: dict[str, str]) -> str:
    nodes = case.model.graph.node
    if "_expanded" in case.name:
        return ops_by_name.get(case.name.split("_expanded")[0], nodes[0].op_type)
    return nodes[0].op_type if len(nodes) == 1 else "+".join(sorted({n.op_type for n in nodes}))


def run_case(case: Any, device: str) -> tuple[str, str]:
    """Run one TestCase through the backend: ``(status, detail)``."""
    from onnx import numpy_helper, TensorProto

    from exporters.onnx import backend
    from portable.errors import PortableError

    def host(value: Any) -> Any:
        return numpy_helper.to_array(value) if isinstance(value, TensorProto) else value

    try:
        rep = backend.prepare(case.model, device)
        for inputs, expected in case.data_sets:
            outputs = rep.run([host(x) for x in inputs])
            if draws_at_random(case):
                for j, (want, got) in enumerate(zip([host(y) for y in expected], outputs)):
                    assert (got.shape, got.dtype) == (want.shape, want.dtype), \
                        f"output {j}: {got.dtype}{list(got.shape)}, expected " \
                        f"{want.dtype}{list(want.shape)}"
                continue
            _assert_similar([host(y) for y in expected], list(outputs), case.rtol, case.atol)
    except AssertionError as exc:
        return "fail", _first_lines(str(exc))
    except PortableError as exc:
        return "error", f"{type(exc).__name__}: {_first_lines(str(exc))}"
    except Exception as exc:  # a bug: keep going, but say what broke
        return "crash", f"{type(exc).__name__}: {_first_lines(str(exc))}"
    return "pass", ""


def _assert_similar(expected: list, outputs: list, rtol: float, atol: float) -> None:
    """onnx's ``Runner.assert_similar_outputs``, output by output; a sequence output (a list)
    element by element and an empty optional (None) by identity: onnx's own recursion into a
    sequence takes each element for a list of outputs, which fails on 0-d elements."""
    from onnx.backend.test.runner import Runner

    assert len(outputs) == len(expected), f"{len(outputs)} outputs, expected {len(expected)}"
    for i, (want, got) in enumerate(zip(expected, outputs)):
        if want is None or got is None:
            assert want is None and got is None, f"output {i}: {got!r:.80}, expected {want!r:.80}"
        elif isinstance(want, (list, tuple)):
            assert isinstance(got, (list, tuple)) and len(got) == len(want), \
                f"output {i}: {type(got).__name__} {got!r:.80}, expected a sequence of {len(want)}"
            _assert_similar(list(want), list(got), rtol, atol)
        else:
            Runner.assert_similar_outputs([want], [got], rtol=rtol, atol=atol)


def _first_lines(text: str, lines: int = 6, width: int = 600) -> str:
    return "\n".join(text.strip().splitlines()[:lines])[:width]


def _injected_fault(name: str) -> None:
    target, _, kind = os.environ.get(FAULT_ENV, "").partition("=")
    if target == name:
        if kind == "die":
            os._exit(3)
        time.sleep(3600)


def worker_main(device: str, selection: str) -> int:
    """Read module requests on stdin, write JSON events on stdout (one per line)."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    import onnx.backend.test.case.node as package

    core = core_ops()
    implemented = onnx_ops() | core  # (core adds the deprecated ops read as another)

    def send(**event: Any) -> None:
        out.write(json.dumps(event) + "\n")

    for line in sys.stdin:
        request = json.loads(line)
        if request.get("exit"):
            break
        module, skip = request["module"], set(request.get("skip", ()))
        start = len(package._NodeTestCases)
        importlib.import_module(f"{PACKAGE}.{module}")
        cases = package._NodeTestCases[start:]
        ops_by_name = {c.name: c.model.graph.node[0].op_type for c in cases}
        send(event="collected", module=module, count=len(cases))
        for case in cases:
            if case.name in skip:
                continue
            op = _case_op(case, ops_by_name)
            base = {"name": case.name, "op": op, "module": module}
            if selection == "core" and not (op in core and all(
                    n.op_type in core and n.domain in ("", "ai.onnx")
                    for n in case.model.graph.node)):
                continue
            reason = excluded_reason(case.name)
            if reason is not None:
                send(event="result", status="excluded", detail=reason, seconds=0.0, **base)
                continue
            send(event="start", **base)
            _injected_fault(case.name)
            began = time.perf_counter()
            if "_expanded" not in case.name and op not in implemented:
                # The importer would fold this node with onnx's reference evaluator when its
                # inputs are constants: that would test onnx, not portable.
                status, detail = "error", f"op {op} is not implemented by portable"
            else:
                status, detail = run_case(case, device)
            send(event="result", status=status, detail=detail,
                 seconds=round(time.perf_counter() - began, 4), **base)
        send(event="done", module=module)
    return 0


# -- the parent -------------------------------------------------------------------------------


class _Worker:
    """One worker process, its reader thread and what it is doing."""

    def __init__(self, index: int, device: str, selection: str, events: queue.Queue,
                 verbose: bool) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        # Workers share the cores: one BLAS thread each.
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.index = index
        self.process = subprocess.Popen(
            [sys.executable, "-m", "exporters.onnx.conformance", "--worker", "--device", device,
             "--ops", selection], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=None if verbose else subprocess.DEVNULL, text=True, env=env, cwd=root)
        self.module: str | None = None
        self.case: dict | None = None
        self.deadline = float("inf")
        thread = threading.Thread(target=self._read, args=(events,), daemon=True)
        thread.start()

    def _read(self, events: queue.Queue) -> None:
        for line in self.process.stdout:
            try:
                events.put((self, json.loads(line)))
            except json.JSONDecodeError:
                continue
        events.put((self, {"event": "exit"}))

    def assign(self, module: str, skip: Iterable[str]) -> None:
        """Send a module; raises OSError when the process is gone."""
        self.process.stdin.write(json.dumps({"module": module, "skip": sorted(skip)}) + "\n")
        self.process.stdin.flush()
        self.module, self.case = module, None
        self.deadline = time.monotonic() + IMPORT_TIMEOUT

    def stop(self, kill: bool = False) -> None:
        try:
            if kill:
                self.process.kill()
            else:
                self.process.stdin.write(json.dumps({"exit": True}) + "\n")
                self.process.stdin.flush()
                self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.process.kill()


def run_conformance(ops: str = "core", device: str = "cpu", jobs: int | None = None,
                    case_timeout: float = CASE_TIMEOUT, modules: list[str] | None = None,
                    verbose: bool = False, progress: Any = None) -> dict:
    """Run the ONNX node cases; returns the report (totals, per op, per case).

    Args:
        ops: ``"core"`` (portable's declared ops) or ``"all"``.
        device: ``cpu``, ``opencl`` or ``cuda``.
        jobs: worker processes (default: the CPU count, at most 4).
        case_timeout: seconds one case may take before its worker is killed.
        modules: only these case modules (default: all that ``ops`` selects).
        verbose: let workers write their stderr through.
        progress: called with each finished case's record.
    """
    if ops not in ("core", "all"):
        raise ValueError(f"ops must be 'core' or 'all', got {ops!r}")
    pending = list(modules if modules is not None else case_modules(ops))
    jobs = max(1, min(jobs or min(os.cpu_count() or 1, 4), len(pending) or 1))
    events: queue.Queue = queue.Queue()
    results: dict[str, dict] = {}
    reported: dict[str, set[str]] = {}
    started = time.perf_counter()
    workers = [_Worker(i, device, ops, events, verbose) for i in range(jobs)]
    idle = list(workers)
    busy: set[_Worker] = set()

    def hand_out() -> None:
        while idle and pending:
            worker = idle.pop()
            module = pending.pop(0)
            try:
                worker.assign(module, reported.get(module, set()))
            except OSError:  # it died while idle: start another and try again
                pending.insert(0, module)
                replace(worker, "died", "")
                continue
            busy.add(worker)

    def record(entry: dict) -> None:
        results[entry["name"]] = entry
        reported.setdefault(entry["module"], set()).add(entry["name"])
        if progress is not None:
            progress(entry)

    restarts = [0]

    def replace(worker: _Worker, status: str, detail: str) -> None:
        restarts[0] += 1
        if restarts[0] > MAX_RESTARTS:
            from portable.errors import BackendError

            raise BackendError(f"conformance workers died or hung {restarts[0]} times; last: "
                               f"{status} {detail} in module {worker.module!r}")
        worker.stop(kill=True)
        busy.discard(worker)
        if worker.case is not None:
            record({**worker.case, "status": status, "detail": detail,
                    "seconds": round(time.monotonic() - worker.deadline + case_timeout, 2)})
        if worker.module is not None:
            if worker.case is None:  # the import itself failed: do not try it again
                record({"name": f"{worker.module} (import)", "op": "?", "module": worker.module,
                        "status": status, "detail": detail, "seconds": 0.0})
            else:
                pending.insert(0, worker.module)
        fresh = _Worker(worker.index, device, ops, events, verbose)
        workers[workers.index(worker)] = fresh
        idle.append(fresh)

    hand_out()
    try:
        while busy:
            now = time.monotonic()
            wait = max(0.05, min(w.deadline for w in busy) - now)
            try:
                worker, event = events.get(timeout=min(wait, 5.0))
            except queue.Empty:
                for worker in [w for w in busy if time.monotonic() > w.deadline]:
                    limit = case_timeout if worker.case else IMPORT_TIMEOUT
                    replace(worker, "timeout", f"no result within {limit:.0f} s")
                hand_out()
                continue
            if worker not in busy:
                continue  # a late line from a worker already replaced
            kind = event.get("event")
            if kind == "start":
                worker.case = {k: event[k] for k in ("name", "op", "module")}
                worker.deadline = time.monotonic() + case_timeout
            elif kind == "result":
                worker.case = None
                worker.deadline = time.monotonic() + case_timeout
                record({k: event[k] for k in ("name", "op", "module", "status", "detail",
                                               "seconds")})
            elif kind == "collected":
                worker.deadline = time.monotonic() + case_timeout
            elif kind == "done":
                worker.module, worker.case = None, None
                busy.discard(worker)
                idle.append(worker)
            elif kind == "exit":
                replace(worker, "died", f"worker exited with code {worker.process.poll()}")
            hand_out()
    finally:
        for worker in workers:
            worker.stop(kill=worker in busy)
    return summarise(results, ops, device, time.perf_counter() - started)


def summarise(results: dict[str, dict], ops: str, device: str, seconds: float) -> dict:
    """Totals, per-op counts and the pass rate (excluded cases do not count)."""
    statuses = ("pass", "fail", "error", "crash", "timeout", "died", "excluded")
    totals = {s: 0 for s in statuses}
    by_op: dict[str, dict[str, int]] = {}
    for entry in results.values():
        totals[entry["status"]] = totals.get(entry["status"], 0) + 1
        op = by_op.setdefault(entry["op"], {s: 0 for s in statuses})
        op[entry["status"]] = op.get(entry["status"], 0) + 1
    counted = sum(totals.values()) - totals["excluded"]
    excluded_by = {}
    for entry in results.values():
        if entry["status"] == "excluded":
            excluded_by[entry["detail"]] = excluded_by.get(entry["detail"], 0) + 1
    return {
        "ops": ops, "device": device, "seconds": round(seconds, 1),
        "cases": sum(totals.values()), "counted": counted, **totals,
        "pass_rate": round(totals["pass"] / counted, 4) if counted else 0.0,
        "pass_rate_with_excluded": round(totals["pass"] / max(sum(totals.values()), 1), 4),
        "excluded_reasons": excluded_by,
        "by_op": dict(sorted(by_op.items())),
        "results": sorted(results.values(), key=lambda e: e["name"]),
    }


def format_report(report: dict, show: Iterable[str] = ("fail", "error", "crash", "timeout",
                                                        "died")) -> str:
    """A human-readable report: per-op table, failing cases, totals."""
    lines = [f"{'op':32} {'pass':>5} {'fail':>5} {'error':>5} {'other':>5} {'excl':>5}"]
    for op, counts in report["by_op"].items():
        other = counts["crash"] + counts["timeout"] + counts["died"]
        lines.append(f"{op[:32]:32} {counts['pass']:5} {counts['fail']:5} {counts['error']:5} "
                     f"{other:5} {counts['excluded']:5}")
    failing = [e for e in report["results"] if e["status"] in show]
    if failing:
        lines.append("")
        lines.extend(f"{e['status']:8} {e['name']}: {e['detail'].splitlines()[0][:160]}"
                     if e["detail"] else f"{e['status']:8} {e['name']}" for e in failing)
    lines.append("")
    lines.append(f"{report['ops']} cases on {report['device']}: {report['pass']} of "
                 f"{report['counted']} pass ({100 * report['pass_rate']:.1f}%); "
                 f"{report['fail']} fail, {report['error']} unsupported, "
                 f"{report['crash'] + report['timeout'] + report['died']} crashed or timed out, "
                 f"{report['excluded']} excluded; {report['seconds']} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ops", default="core", choices=("core", "all"))
    args, _ = parser.parse_known_args(argv)
    if args.worker:
        np.seterr(all="ignore")
        return worker_main(args.device, args.ops)
    parser.error("run `portable conformance` instead")
    return 2


if __name__ == "__main__":
    sys.exit(main())
