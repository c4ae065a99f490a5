"""Fuzz the front end: thousands of hostile inputs, each run in a bounded worker.

Usage::

    nice -n 10 python benchmarks/fuzz.py --count 10000 [--workers 2] [--seed 15]

Inputs, a fixed mix generated from ``--seed`` (so a run can be repeated):

``program``  a sample program with a few tokens inserted, deleted or replaced, or lines dropped
             or doubled, parsed into its task graph (default ``max_tasks``);
``compile``  the same, compiled end to end onto a small cluster (``max_tasks`` of
             :data:`COMPILE_MAX_TASKS`: mapping a mutant grown to 100,000 tasks is slow work, not
             a front-end failure);
``expr``     a random expression of the directive language (and outside it), evaluated;
``cluster``  a mutant of ``samples/clusters/tiny-gpus.yaml``, loaded;
``plan``     a mutant of a compiled plan, read and its source checked;
``json``     a mutant of a node-link or WfCommons workflow, imported.

Each input runs in a worker process (forked, ``RLIMIT_AS`` of 1 GiB, a 10 s ``SIGALRM``). An input
either succeeds, or raises a :class:`~streammap.errors.StreamMapError` (both clean), or raises
anything else (a *traceback*), or runs past 10 s, or needs more than 1 GiB (a ``MemoryError``, or
the worker killed). A worker that dies or hangs is replaced and the input it was on is counted, so
a crash is a number in the report, not the end of the run. Printed at the end: inputs, tracebacks,
runs over 10 s, runs over 1 GiB (targets: 0, 0, 0), the first few tracebacks, and the exit status
is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # a worker's address space stays small
os.environ.setdefault("OMP_NUM_THREADS", "1")

import streammap  # noqa: E402
from streammap.cluster.model import load_cluster  # noqa: E402
from streammap.directives import parse_program  # noqa: E402
from streammap.directives.safe_eval import Locator, safe_eval  # noqa: E402
from streammap.errors import StreamMapError  # noqa: E402
from streammap.io.importers import load_graph  # noqa: E402
from streammap.plan import read_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.py"))
CLUSTER_TEXT = (ROOT / "samples" / "clusters" / "tiny-gpus.yaml").read_text()
SMALL_CLUSTER = {"name": "fuzz", "nodes": [{"name": "n", "link": {"bandwidth": "10 GB/s"}, "devices": [
    {"name": "gpu0", "kind": "gpu", "memory": "16GiB"}, {"name": "cpu", "kind": "cpu", "memory": "64GiB"}]}]}
MEMORY_LIMIT = 1 << 30
COMPILE_MAX_TASKS = 2_000
TIME_LIMIT = 10
#: Kinds of input and their share of the mix.
MIX = {"program": 0.35, "compile": 0.05, "expr": 0.30, "cluster": 0.10, "plan": 0.10, "json": 0.10}

TOKENS = ["(", ")", "[", "]", "{", "}", ",", ":", "=", "*", "**", "-", "+", "<<", " if ", " else ",
          "not ", "0", "1", "-1", "10**400", "1<<4096", "10**10**10", "'x'", "None", "True", "1e308*10",
          "N", "range(", "range(10**9)", "len(", "min(", "k(", "(1,)*10000", "\n", "    ", "#", " ",
          "# @stream kernel(flops=", "# @stream param\n", "# @stream graph\n", "return ", "for i in ",
          "&x ", "*x", "- ", "? ", "!!python/object ", "\x00", "\xff", "9" * 401, '"', "'", "\\",
          "../../", "-1e999", "nan", ".inf", "split=1", "device=5", "index: -1", "[" * 50,
          "-" * 300, "+1" * 600, "a = a + a\n", "((1,)*10000,)*10000"]
ATOMS = ["0", "1", "-1", "2", "N", "M", "'s'", "None", "True", "1.5", "10**400", "(1,)", "()", "4096",
         "1e308", "x", "len"]
UNARY = ["-", "+", "~", "not "]
BINARY = ["+", "-", "*", "/", "//", "%", "**", "<<", ">>", "&", "|", "^", "==", "<", " in ", " and ",
          " or ", ","]
CALLS = ["min", "max", "abs", "int", "float", "round", "ceil", "floor", "log2", "sqrt", "len", "open",
         "x.y", "range"]


# -- generating inputs -------------------------------------------------------------------------------

def mutate(rng: random.Random, text: str) -> str:
    """``text`` with 1 to 4 edits: tokens inserted, deleted or replaced, lines dropped or doubled."""
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["insert", "insert", "delete", "replace", "drop-line", "double-line"])
        i = rng.randrange(len(text) + 1)
        token = rng.choice(TOKENS)
        if kind == "insert":
            text = text[:i] + token + text[i:]
        elif kind == "delete":
            text = text[:i] + text[i + rng.randint(1, 8):]
        elif kind == "replace":
            text = text[:i] + token + text[i + len(token):]
        else:
            lines = text.split("\n")
            n = rng.randrange(len(lines))
            lines[n:n + 1] = [] if kind == "drop-line" else [lines[n]] * 2
            text = "\n".join(lines)
    return text


def expression(rng: random.Random, depth: int = 0) -> str:
    """A random expression, mostly of the directive language, sometimes outside it."""
    if depth > 4 or rng.random() < 0.25:
        return rng.choice(ATOMS)
    form = rng.randrange(5)
    sub = lambda: expression(rng, depth + 1)  # noqa: E731
    if form == 0:
        return rng.choice(UNARY) + sub()
    if form == 1:
        return f"({sub()}{rng.choice(BINARY)}{sub()})"
    if form == 2:
        return f"{rng.choice(CALLS)}({', '.join(sub() for _ in range(rng.randint(0, 3)))})"
    if form == 3:
        return f"({sub()} if {sub()} else {sub()})"
    return f"(({sub()},)*{rng.choice(['0', '3', '10000', 'N'])})"


def workflow_texts() -> list[str]:
    node_link = {"directed": True, "graph": {"name": "g"}, "nodes": [
        {"id": "a", "kernel": "k", "runtime": 1.0, "out": 8, "device": "gpu"},
        {"id": "b", "kernel": "k", "runtime": 2.0, "times": {"gpu": 0.5}, "retries": 1},
        {"id": 3, "kernel": "m", "flops": 1e9, "share": 0.5}],
        "edges": [{"source": "a", "target": "b", "bytes": 8}, {"source": "b", "target": 3}]}
    wf = {"name": "w", "schemaVersion": "1.5", "workflow": {
        "specification": {"tasks": [{"id": "t1", "name": "a_ID01", "children": ["t2"], "parents": [],
                                     "inputFiles": [], "outputFiles": ["f"]},
                                    {"id": "t2", "name": "b", "parents": ["t1"], "inputFiles": ["f"]}],
                          "files": [{"id": "f", "sizeInBytes": 10}]},
        "execution": {"tasks": [{"id": "t1", "runtimeInSeconds": 1.0, "memoryInBytes": 5},
                                {"id": "t2", "runtimeInSeconds": 2.0}]}}}
    return [json.dumps(node_link, indent=1), json.dumps(wf, indent=1)]


def generate(count: int, seed: int, plan_text: str) -> list[tuple[str, str]]:
    """``count`` inputs ``(kind, text)`` in the proportions of :data:`MIX`."""
    rng = random.Random(seed)
    samples = [s.read_text() for s in SAMPLES]
    compilable = [(ROOT / "samples" / n).read_text() for n in ("fm_radio.py", "tiled_cholesky.py",
                                                               "small_kernels.py")]
    workflows = workflow_texts()
    kinds, weights = zip(*MIX.items())
    out = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        if kind == "program":
            text = mutate(rng, rng.choice(samples))
        elif kind == "compile":
            text = mutate(rng, rng.choice(compilable))
        elif kind == "expr":
            text = expression(rng)
        elif kind == "cluster":
            text = mutate(rng, CLUSTER_TEXT)
        elif kind == "plan":
            text = mutate(rng, plan_text)
        else:
            text = mutate(rng, rng.choice(workflows))
        out.append((kind, text))
    return out


# -- running one input -------------------------------------------------------------------------------

class _Alarm(BaseException):
    """Raised by SIGALRM; a BaseException so that no ``except Exception`` swallows it."""


def _on_alarm(signum, frame):
    raise _Alarm


def run_one(kind: str, text: str, folder: Path) -> None:
    """Feed one input to the front end (raises what the front end raises)."""
    if kind == "expr":
        safe_eval(text, {"N": 1 << 20, "M": 3}, Locator("<fuzz>", [text]), context="a fuzzed expression")
        return
    names = {"program": "prog.py", "compile": "prog.py", "cluster": "cluster.yaml", "plan": "mutant.plan.yaml",
             "json": "wf.json"}
    path = folder / names[kind]
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    if kind == "program":
        parse_program(path)
    elif kind == "compile":
        streammap.compile(path, cluster=SMALL_CLUSTER, history=False, max_tasks=COMPILE_MAX_TASKS)
    elif kind == "cluster":
        load_cluster(path)
    elif kind == "plan":
        read_plan(path).check_source()
    else:
        load_graph(path)


def worker(conn, items, folder: str) -> None:
    """Run ``items`` one by one, sending ``(index, outcome, seconds, detail)`` for each."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGALRM, _on_alarm)
    for index, kind, text in items:
        detail = ""
        t0 = time.perf_counter()
        signal.alarm(TIME_LIMIT)
        try:
            run_one(kind, text, Path(folder))
            outcome = "ok"
        except StreamMapError:
            outcome = "clean"
        except _Alarm:
            outcome = "timeout"
        except MemoryError:
            outcome = "memory"
        except Exception:  # noqa: BLE001 -- what the fuzzer is looking for
            outcome = "traceback"
            detail = traceback.format_exc(limit=-6)
        finally:
            signal.alarm(0)
        conn.send((index, outcome, time.perf_counter() - t0, detail))
    conn.send(None)


def run_all(inputs: list[tuple[str, str]], workers: int, folder: Path, batch: int = 200) -> dict:
    """Run every input in bounded workers; return ``{index: (outcome, seconds, detail)}``."""
    ctx = mp.get_context("fork")
    results: dict[int, tuple] = {}
    pending = [(i, k, t) for i, (k, t) in enumerate(inputs)]
    queue = [pending[j:j + batch] for j in range(0, len(pending), batch)]
    running = []                                   # (process, connection, items, subfolder)
    slot = 0
    while queue or running:
        while queue and len(running) < workers:
            items = queue.pop(0)
            sub = folder / f"w{slot}"
            slot += 1
            sub.mkdir()
            for seed_file in folder.glob("*.py"):     # the plan mutants' program, beside them
                shutil.copy(seed_file, sub / seed_file.name)
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=worker, args=(child, items, str(sub)), daemon=True)
            proc.start()
            child.close()
            running.append([proc, parent, items, sub, time.monotonic()])
        for entry in list(running):
            proc, conn, items, sub, since = entry
            finished = ended = False           # ended: the worker's pipe closed, done or not
            while conn.poll(0.05):
                try:
                    msg = conn.recv()
                except EOFError:
                    ended = True
                    break
                if msg is None:
                    finished = ended = True
                    break
                index, outcome, seconds, detail = msg
                results[index] = (outcome, seconds, detail)
                entry[4] = time.monotonic()
            left = [it for it in items if it[0] not in results]
            stuck = time.monotonic() - entry[4] > TIME_LIMIT + 5
            if ended or not proc.is_alive() or stuck:
                if left and (stuck or not finished):
                    # The worker died (killed for memory, a crash) or hung past its alarm: the input
                    # it was on is counted, and the rest of its batch goes to a new worker.
                    if not stuck:
                        proc.join(timeout=5)
                    proc.kill()
                    code = proc.exitcode
                    results[left[0][0]] = ("timeout" if stuck else "memory" if code in (-9, 137) else "traceback",
                                           time.monotonic() - entry[4], f"worker ended (exit {code})")
                    if left[1:]:
                        queue.insert(0, left[1:])
                proc.join(timeout=5)
                conn.close()
                shutil.rmtree(sub, ignore_errors=True)
                running.remove(entry)
    return results


def compiled_plan_text(folder: Path) -> str:
    """A plan of fm_radio.py compiled next to a copy of it, as the plan mutants' seed."""
    shutil.copy(ROOT / "samples" / "fm_radio.py", folder / "fm_radio.py")
    plan = streammap.compile(folder / "fm_radio.py", cluster=SMALL_CLUSTER, params={"N": 1024, "BANDS": 2},
                             history=False)
    streammap.write_plan(plan, folder / "plan.yaml")
    return (folder / "plan.yaml").read_text()


def replay(args) -> int:
    """Run chosen inputs in this process and show each outcome (a traceback in full)."""
    with tempfile.TemporaryDirectory(prefix="streammap-fuzz-") as tmp:
        folder = Path(tmp)
        inputs = generate(max(args.replay) + 1, args.seed, compiled_plan_text(folder))
        for i in args.replay:
            kind, text = inputs[i]
            t0 = time.perf_counter()
            try:
                run_one(kind, text, folder)
                outcome = "ok"
            except StreamMapError as exc:
                outcome = f"clean: {exc.message}"
            except Exception:  # noqa: BLE001
                outcome = traceback.format_exc()
            print(f"--- input {i} ({kind}, {time.perf_counter() - t0:.2f} s): {outcome}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=10_000, help="inputs to run (default 10000)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--seed", type=int, default=15, help="seed of the input mix (default 15)")
    p.add_argument("--show", type=int, default=5, help="failures to print in full, tracebacks first (default 5)")
    p.add_argument("--replay", type=int, nargs="+", metavar="INDEX",
                   help="run these inputs of the mix in this process, unbounded, and print what they raise")
    args = p.parse_args(argv)
    if args.replay:
        return replay(args)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="streammap-fuzz-") as tmp:
        folder = Path(tmp)
        inputs = generate(args.count, args.seed, compiled_plan_text(folder))
        results = run_all(inputs, args.workers, folder)
    elapsed = time.perf_counter() - t0
    outcomes = Counter(r[0] for r in results.values())
    by_kind = Counter((inputs[i][0], r[0]) for i, r in results.items())
    slowest = max(results.items(), key=lambda kv: kv[1][1])
    print(f"inputs: {len(results)} (seed {args.seed}, {args.workers} workers, {elapsed:.0f} s)")
    for kind in MIX:
        row = ", ".join(f"{o} {by_kind[(kind, o)]}" for o in ("ok", "clean", "traceback", "timeout", "memory")
                        if by_kind[(kind, o)])
        print(f"  {kind:8s} {row}")
    print(f"slowest input: {slowest[1][1]:.2f} s ({inputs[slowest[0]][0]})")
    print(f"tracebacks: {outcomes['traceback']}")
    print(f"runs over {TIME_LIMIT} s: {outcomes['timeout']}")
    print(f"runs over 1 GiB: {outcomes['memory']}")
    failures = sorted((["traceback", "memory", "timeout"].index(r[0]), i) for i, r in results.items()
                      if r[0] in ("traceback", "timeout", "memory"))
    for _, i in failures[:args.show]:
        outcome, _, detail = results[i]
        print(f"\n--- input {i} ({inputs[i][0]}): {outcome} (replay: --replay {i})\n{detail}")
    return 0 if outcomes["traceback"] == outcomes["timeout"] == outcomes["memory"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
