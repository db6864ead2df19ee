"""How the scheduler's cost grows with ranks and nodes.

    python benchmarks/bench_scheduler.py                 # SimAI sample at 8..1024 ranks + synthetic
    python benchmarks/bench_scheduler.py --every-rank    # also time scheduling every rank (slow)

SimAI: `samples/simai_tp8_pp16_1024gpu.txt` with its header rewritten to 8 ranks (TP 8, PP 1),
64 (TP 8, PP 8), 512 and 1024 (TP 8, PP 16). Ranks of one pipeline stage share one node list,
so the scheduler runs one representative per stage (see converters/scheduler/quotient.py);
`--every-rank` forces the plain event loop over all ranks for comparison.
Synthetic: a pipeline x data-parallel job in which every rank's compute times differ a little,
so no two ranks behave alike and every rank is simulated (the plain event loop's speed), at
8 to 4096 ranks (`--distinct-sizes`); issue 13 asks for at least 1 M node events/s, flat.

Prints node events per second: nodes of all ranks given a start and end, per second of
scheduling (reading the input is not counted), by the wall clock and by the CPU time of this
process (the second is steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from converters.api import read  # noqa: E402
from converters.diagnostics import Diagnostics  # noqa: E402
from converters.model import CollType, ExecutionTrace, Rank  # noqa: E402
from converters.scheduler import network_for, schedule  # noqa: E402
from converters.scheduler.engine import Engine  # noqa: E402

SIMAI = ROOT / "samples" / "simai_tp8_pp16_1024gpu.txt"
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


def timed(label: str, trace: ExecutionTrace, every_rank: bool) -> None:
    nodes = trace.node_count()
    start, cpu = time.perf_counter(), time.process_time()
    timeline = schedule(trace)
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    reps = timeline.parameters.get("representatives")
    print(f"{label:<22}{len(trace.ranks):>6} ranks {nodes:>10,} nodes  {took:7.2f} s  "
          f"{nodes / took:>12,.0f} node events/s  (CPU {nodes / max(cpu, 1e-9):>10,.0f}/s; {reps} simulated ranks)")
    if every_rank and reps != len(trace.ranks):
        start = time.perf_counter()
        Engine(trace, network_for(None)).run()
        took = time.perf_counter() - start
        print(f"{'  every rank':<22}{len(trace.ranks):>6} ranks {nodes:>10,} nodes  {took:7.2f} s  "
              f"{nodes / took:>12,.0f} node events/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,64,512,1024")
    parser.add_argument("--distinct-sizes", default="8,64,512,1024,4096", help="ranks of the synthetic job")
    parser.add_argument("--every-rank", action="store_true", help="also time the plain loop over every rank")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        for ranks in sizes:
            if ranks in SIMAI_SHAPES:
                trace = read(simai_at(ranks, Path(folder)), "simai", diagnostics=Diagnostics())
                timed("simai sample", trace, args.every_rank)
    for ranks in (int(s) for s in args.distinct_sizes.split(",")):
        trace = synthetic(ranks)
        gc.collect()
        timed("synthetic (distinct)", trace, False)
        del trace


if __name__ == "__main__":
    main()
