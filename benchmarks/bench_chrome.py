"""How fast the Chrome JSON and Perfetto writers draw every rank.

    python benchmarks/bench_chrome.py                       # SimAI sample, all 1024 ranks, both writers
    python benchmarks/bench_chrome.py --synthetic 1024 5000 # synthetic job: ranks x nodes per rank
    python benchmarks/bench_chrome.py --to chrome           # one writer only
    python benchmarks/bench_chrome.py --input /tmp/b7       # any input, e.g. the Megatron set of benchmarks/megatron_set.py
    python benchmarks/bench_chrome.py --input /tmp/b7 --runs 3  # best of 3 (CPU time of each step)

SimAI: `samples/simai_tp8_pp16_1024gpu.txt` read and scheduled as `et-convert` does (not
timed), then drawn with `--ranks all`. Synthetic: TP 8 x PP 16 x DP, one node list per stage
shared by its ranks (as the builders do), fixed times handed over as a Timeline.

Prints slices per second of CPU time for planning (tracks, slices, flows) and for writing
(JSON encoding or protobuf), the wall time and the peak RSS; CPU time is steadier than wall
time on a shared machine.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from converters.api import read, schedule  # noqa: E402
from converters.diagnostics import Diagnostics  # noqa: E402
from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank  # noqa: E402
from converters.options import Options  # noqa: E402
from converters.timeline import Timeline  # noqa: E402
from converters.writers import chrome, perfetto  # noqa: E402
from converters.writers.atomic import atomic_file  # noqa: E402
from converters.writers.layout_chrome import plan_trace  # noqa: E402

SIMAI = ROOT / "samples" / "simai_tp8_pp16_1024gpu.txt"


def synthetic(world: int, per_rank: int, tp: int = 8, pp: int = 16) -> tuple[ExecutionTrace, Timeline]:
    """Compute, TP all-gathers and DP all-reduces in a 5-node pattern; one node list per stage."""
    trace = ExecutionTrace()
    trace.timing = "scheduled"
    dp = max(1, world // (tp * pp))
    stages: dict[int, tuple] = {}
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for r in range(tp * pp * dp):
        t, d, p = r % tp, (r // tp) % dp, r // (tp * dp)
        tp_group = trace.add_group("tp", [r - t + i for i in range(tp)])
        dp_group = trace.add_group("dp", [t + tp * (i + dp * p) for i in range(dp)])
        if p not in stages:
            nodes = []
            for i in range(per_rank):
                k = i % 5
                if k == 0:
                    nodes.append(Node(i, f"layer{i % 40} fwd", NodeKind.COMPUTE, duration_ns=700, microbatch=i // 40))
                elif k in (1, 3):
                    nodes.append(Node(i, "attention_column fwd", NodeKind.COLLECTIVE, duration_ns=200,
                                      coll=CollType.ALL_GATHER, size=64 << 20, group=tp_group.id))
                elif k == 2:
                    nodes.append(Node(i, f"layer{i % 40} bwd", NodeKind.COMPUTE, duration_ns=1400))
                else:
                    nodes.append(Node(i, "grads", NodeKind.COLLECTIVE, duration_ns=300,
                                      coll=CollType.ALL_REDUCE, size=1 << 20, group=dp_group.id))
            s, e, now = [], [], 0
            for node in nodes:
                s.append(now)
                e.append(now + node.duration_ns)
                now += node.duration_ns + 10
            stages[p] = (nodes, tp_group.id, dp_group.id, s, e, r)
        nodes, tp0, dp0, s, e, rep = stages[p]
        group_map = None if r == rep else {tp0: tp_group.id, dp0: dp_group.id}
        trace.ranks[r] = Rank(r, nodes=nodes, coords={"tp": t, "dp": d, "pp": p}, group_map=group_map)
        starts[r], ends[r] = s, e
    return trace, Timeline(starts, ends, "scheduled")


def measure(trace: ExecutionTrace, timeline: Timeline, writer, suffix: str, runs: int = 1) -> str:
    """Plan and write `runs` times; the best CPU time of each step (steadier on a shared machine)."""
    best = None
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / f"bench{suffix}"
            wall0, cpu0 = time.perf_counter(), time.process_time()
            plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
            cpu1 = time.process_time()
            with atomic_file(out) as f:
                writer.write_plan(plan, f)
            cpu2, wall2 = time.process_time(), time.perf_counter()
            size = out.stat().st_size
        times = (cpu1 - cpu0, cpu2 - cpu1, wall2 - wall0)
        best = times if best is None else tuple(map(min, best, times))
    plan_cpu, write_cpu, wall = best
    n = plan.slice_count
    return (
        f"{writer.__name__.rsplit('.', 1)[-1]:8s} {n:>9,} slices {plan.flow_count:>8,} flows  "
        f"plan {n / plan_cpu / 1e6:.2f} M/s  write {n / write_cpu / 1e6:.2f} M/s ({write_cpu:.2f} s)  "
        f"total {n / (plan_cpu + write_cpu) / 1e6:.2f} M/s cpu, {wall:.1f} s wall, {size / 1e6:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", nargs=2, type=int, metavar=("RANKS", "NODES"))
    parser.add_argument("--to", choices=("chrome", "perfetto", "both"), default="both")
    parser.add_argument("--input", type=Path, help="read this input (files or a folder) instead")
    parser.add_argument("--runs", type=int, default=1, help="plan and write this many times, print the best CPU times")
    args = parser.parse_args()
    if args.input:
        trace = read(args.input, diagnostics=Diagnostics())
        timeline = schedule(trace)
        label = f"{args.input.name}, {len(trace.ranks)} ranks ({timeline.kind} times)"
    elif args.synthetic:
        trace, timeline = synthetic(*args.synthetic)
        label = f"synthetic {len(trace.ranks)} ranks x {args.synthetic[1]} nodes"
    else:
        trace = read(SIMAI, diagnostics=Diagnostics())
        timeline = schedule(trace)
        label = f"{SIMAI.name}, {len(trace.ranks)} ranks"
    print(label)
    writers = {"chrome": [(chrome, ".json")], "perfetto": [(perfetto, ".pftrace")]}
    chosen = writers["chrome"] + writers["perfetto"] if args.to == "both" else writers[args.to]
    for writer, suffix in chosen:
        print(measure(trace, timeline, writer, suffix, args.runs))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (whole run; "
          "run one writer with --to for its own peak)")


if __name__ == "__main__":
    main()
