"""How the scheduler's cost grows with ranks and nodes.

    python benchmarks/bench_scheduler.py                 # SimAI sample at 8..1024 ranks + synthetic + stats
    python benchmarks/bench_scheduler.py --every-rank    # also time scheduling every rank (slow)
    python benchmarks/bench_scheduler.py --stats-only    # only `et-convert stats` on the measured Chakra set
    python benchmarks/bench_scheduler.py --phases --distinct-sizes 1024   # where the synthetic job's time goes
    python benchmarks/bench_scheduler.py --python-loop   # also each schedule with the Python loop, and the ratio
    python benchmarks/bench_scheduler.py --stats-nodes   # also stats reading Nodes (as without converters/_stats.c)

SimAI: `samples/simai_tp8_pp16_1024gpu.txt` with its header rewritten to 8 ranks (TP 8, PP 1),
64 (TP 8, PP 8), 512 and 1024 (TP 8, PP 16). Ranks of one pipeline stage share one node list,
so the scheduler runs one representative per stage (see converters/scheduler/quotient.py);
`--every-rank` forces the plain event loop over all ranks for comparison.
Synthetic: a pipeline x data-parallel job in which every rank's compute times differ a little,
so no two ranks behave alike and every rank is simulated (the plain event loop's speed), at
8 to 4096 ranks (`--distinct-sizes`); issue 13 asks for at least 1 M node events/s, flat.

Prints node events per second: nodes of all ranks given a start and end, per second of
scheduling (reading the input is not counted), by the wall clock and by the CPU time of this
process (the second is steadier on a shared machine); best of `--runs`.

Stats: `et-convert stats` on the Chakra set of the issue's 16 per-rank Megatron logs
(`benchmarks/megatron_set.py`, converted with `--to chakra`; made under `--work` when missing):
the whole command as a user runs it (start-up, reading every file, its times, printing), in
nodes per second of the command's CPU time (user + system), best of `--runs`; issue 13 asks
for at least 1 M nodes/s. The set keeps the logs' measured times, which `stats` shows without
scheduling (a set written before 2026-11-28 read back untimed and was scheduled: delete such
sets under `--work`); so the scheduler is also timed on the same graph, as above. Also on the
same set with jitter (`megatron_set.py --jitter 5`): there no two ranks log equal times, as in
a measured run, so no rank stands for another. `stats` reads such a set as node columns and sums
them in C (converters/_stats.c, stats.measured_set_stats); `--stats-nodes` also times it reading
Nodes, as without that module.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from converters.api import read  # noqa: E402
from converters.diagnostics import Diagnostics  # noqa: E402
from converters.model import CollType, ExecutionTrace, Rank  # noqa: E402
from converters.scheduler import network_for, schedule  # noqa: E402
from converters.scheduler import engine as engine_module  # noqa: E402
from converters.scheduler import summary as summary_module  # noqa: E402
from converters.scheduler.engine import Engine  # noqa: E402

SIMAI = ROOT / "samples" / "simai_tp8_pp16_1024gpu.txt"
BIN = Path(sys.executable).parent
SIMAI_SHAPES = {8: (8, 1), 64: (8, 8), 512: (8, 16), 1024: (8, 16)}  # ranks -> (tp, pp)


def simai_at(ranks: int, folder: Path) -> Path:
    tp, pp = SIMAI_SHAPES[ranks]
    text = SIMAI.read_text()
    head, _, rest = text.partition("\n")
    head = re.sub(r"model_parallel_NPU_group: \d+", f"model_parallel_NPU_group: {tp}", head)
    head = re.sub(r"\bpp: \d+", f"pp: {pp}", head)
    head = re.sub(r"all_gpus: \d+", f"all_gpus: {ranks}", head)
    path = folder / f"simai_{ranks}.txt"
    path.write_text(head + "\n" + rest)
    return path


def synthetic(ranks: int, layers: int = 40, microbatches: int = 8, stages: int = 4) -> ExecutionTrace:
    """GPipe-like stages; every rank has its own node list with its own compute times."""
    from helpers.scheduler_synth import coll, compute, recv, send

    stages = min(stages, ranks)
    dp = ranks // stages
    trace = ExecutionTrace()
    for s in range(stages):
        group = trace.add_group("dp", [d + dp * s for d in range(dp)])
        for d in range(dp):
            r = d + dp * s
            nodes, nid, prev = [], 0, None
            for m in range(microbatches):
                if s > 0:
                    nodes.append(recv(nid, src=r - dp, size=1 << 20, tag=m, deps=[prev] if prev is not None else []))
                    prev, nid = nid, nid + 1
                for layer in range(layers):
                    jitter = r if layer == 0 else 0  # differs per rank: defeats the representatives
                    nodes.append(compute(nid, 1000 + jitter, deps=[prev] if prev is not None else []))
                    prev, nid = nid, nid + 1
                if s < stages - 1:
                    nodes.append(send(nid, dst=r + dp, size=1 << 20, tag=m, deps=[prev]))
                    nid += 1
            for _ in range(layers // 4):
                nodes.append(coll(nid, CollType.ALL_REDUCE, 1 << 24, deps=[prev], group=group.id))
                nid += 1
            trace.ranks[r] = Rank(r, nodes)
    return trace


@contextmanager
def python_loop():
    """Schedule with the Python loop (engine.Engine._python_run) and the critical path's Python
    walk (summary._credit_path), as without the C module."""
    saved, engine_module._loop = engine_module._loop, None
    summary_module._loop = None
    try:
        yield
    finally:
        engine_module._loop = summary_module._loop = saved


def timed(label: str, trace: ExecutionTrace, every_rank: bool, runs: int, python_too: bool = False) -> None:
    nodes = trace.node_count()
    took = cpu = float("inf")
    for _ in range(runs):
        timeline = None  # (freeing the last run's timeline is not this run's work)
        start, began = time.perf_counter(), time.process_time()
        timeline = schedule(trace)
        took, cpu = min(took, time.perf_counter() - start), min(cpu, time.process_time() - began)
    reps = timeline.parameters.get("representatives")
    print(f"{label:<22}{len(trace.ranks):>6} ranks {nodes:>10,} nodes  {took:7.2f} s  "
          f"{nodes / took:>12,.0f} node events/s  (CPU {nodes / max(cpu, 1e-9):>10,.0f}/s; {reps} simulated ranks)")
    if python_too and engine_module._loop is not None:
        slow = float("inf")
        with python_loop():
            for _ in range(runs):
                began = time.process_time()
                schedule(trace)
                slow = min(slow, time.process_time() - began)
        print(f"{'  Python loop':<22}{'':>6}       {'':>10}         {'':>7}    {'':>12}                "
              f"(CPU {nodes / max(slow, 1e-9):>10,.0f}/s: the C loop's schedule {slow / max(cpu, 1e-9):.1f}x faster)")
    if every_rank and reps != len(trace.ranks):
        start = time.perf_counter()
        Engine(trace, network_for(None)).run()
        took = time.perf_counter() - start
        print(f"{'  every rank':<22}{len(trace.ranks):>6} ranks {nodes:>10,} nodes  {took:7.2f} s  "
              f"{nodes / took:>12,.0f} node events/s")


def phases(trace: ExecutionTrace, runs: int) -> None:
    """CPU time of each step of `schedule` on a trace (best of `runs`): the search for
    representatives, the per-rank tables (`Program`), the event loop, the summary."""
    from converters.gc_pause import paused_gc
    from converters.scheduler.quotient import find_quotient
    from converters.scheduler.summary import summarize

    network = network_for(None)
    best = [float("inf")] * 4
    for _ in range(runs):
        with paused_gc():
            clock = [time.process_time()]
            quotient = find_quotient(trace)
            clock.append(time.process_time())
            engine = Engine(trace, network, quotient)
            clock.append(time.process_time())
            result = engine.run()
            clock.append(time.process_time())
            summarize(engine, *result)
            clock.append(time.process_time())
            del engine, result
        best = [min(b, later - earlier) for b, earlier, later in zip(best, clock, clock[1:])]
    nodes = trace.node_count()
    print("  " + "  ".join(f"{label} {s * 1e3:6.1f} ms ({s * 1e9 / nodes:4.0f} ns/node)"
                           for label, s in zip(("quotient", "tables", "loop", "summary"), best)))


def measured_chakra_set(work: Path, jitter: int = 0) -> Path:
    """The Chakra set of the 16 per-rank Megatron logs, made once under `work`."""
    name = "set46" if not jitter else f"set46_jitter{jitter}"
    folder = work / f"{name}_chakra"
    if len(list(folder.glob("w.*.et"))) != 16:
        from megatron_set import write_set

        write_set(work / name, jitter)
        subprocess.run([str(BIN / "et-convert"), str(work / name), "--to", "chakra", "-q", "-o", str(folder / "w")],
                       check=True)
    return folder


def child_cpu(argv: list[str]) -> tuple[float, float]:
    """(CPU seconds, user + system, and peak RSS in MB) of one run of a command."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{proc.stderr.read().decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def bench_stats(work: Path, runs: int, python_too: bool = False, nodes_too: bool = False) -> None:
    # Children first: a child's peak RSS starts from its parent's (Linux), so nothing big is read before.
    folders = {label: measured_chakra_set(work, jitter) for label, jitter in (("", 0), (", jitter 5", 5))}
    commands = {"": [str(BIN / "et-convert"), "stats"]}
    if nodes_too:  # the same command without the columns' C numbers (stats reads Nodes then)
        commands[", Nodes"] = [sys.executable, "-c", "import converters.stats as s, converters.cli as c; "
                               "s._numbers = None; c.main()", "stats"]
    measured = {(label, how): min(child_cpu([*command, str(folder)]) for _ in range(runs))
                for label, folder in folders.items() for how, command in commands.items()}
    for label, folder in folders.items():
        trace = read(folder, "chakra", diagnostics=Diagnostics())
        nodes = trace.node_count()
        for how in commands:
            cpu, rss = measured[label, how]
            print(f"{'stats (Chakra set' + label + how + ')':<31}{16:>4} ranks {nodes:>10,} nodes  CPU {cpu:5.2f} s  "
                  f"{nodes / cpu / 1e6:5.2f} M nodes/s (reading, {trace.timing} times, printing; target 1 M)  "
                  f"{rss:4.0f} MB RSS")
        # The set keeps the logs' measured times, which `stats` shows as they are: the scheduler
        # on the same graph (what `validate`'s dry run, `report`'s sweeps and `simulate` run)
        timed(f"  scheduled{label}", trace, False, runs, python_too)
        del trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,512,1024")
    parser.add_argument("--distinct-sizes", default="8,64,512,1024,4096", help="ranks of the synthetic job")
    parser.add_argument("--every-rank", action="store_true", help="also time the plain loop over every rank")
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work", help="where the stats set is kept")
    parser.add_argument("--stats-only", action="store_true", help="only time stats on the measured Chakra set")
    parser.add_argument("--stats-nodes", action="store_true", help="also time stats reading the set as Nodes")
    parser.add_argument("--phases", action="store_true", help="only the synthetic job, each step of the scheduler timed")
    parser.add_argument("--python-loop", action="store_true",
                        help="also time each schedule with the Python loop (the C loop's ratio)")
    args = parser.parse_args()
    print("event loop:", "C (converters/scheduler/_loop.c)" if engine_module._loop is not None
          else "Python (the C module was not built)")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.phases:
        for ranks in (int(s) for s in args.distinct_sizes.split(",")):
            trace = synthetic(ranks)
            gc.collect()
            timed("synthetic (distinct)", trace, False, args.runs)
            phases(trace, args.runs)
            del trace
        return
    bench_stats(args.work, args.runs, args.python_loop, args.stats_nodes)
    if not args.stats_only:
        sizes = [int(s) for s in args.sizes.split(",")]
        with tempfile.TemporaryDirectory() as folder:
            for ranks in sizes:
                if ranks in SIMAI_SHAPES:
                    trace = read(simai_at(ranks, Path(folder)), "simai", diagnostics=Diagnostics())
                    timed("simai sample", trace, args.every_rank, args.runs, args.python_loop)
        for ranks in (int(s) for s in args.distinct_sizes.split(",")):
            trace = synthetic(ranks)
            gc.collect()
            timed("synthetic (distinct)", trace, False, args.runs, args.python_loop)
            del trace


if __name__ == "__main__":
    main()
