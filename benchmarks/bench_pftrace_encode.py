"""CPU time of encoding each drawn process, `.pftrace` against Chrome JSON, in one process.

    python benchmarks/bench_pftrace_encode.py LOGS [--runs 5] [--profile]

Reads and plans once (not timed), then encodes every process as a worker prints its ranks (one
encoder kept from rank to rank, `process_encoder([process], encoder)`), the writers alternating,
and prints each writer's best CPU time. `--profile`: cProfile of one `.pftrace` pass.
"""

from __future__ import annotations

import argparse
import os
import cProfile
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from converters.api import read, schedule  # noqa: E402
from converters.diagnostics import Diagnostics  # noqa: E402
from converters.options import Options  # noqa: E402
from converters.writers import chrome, perfetto  # noqa: E402
from converters.writers.layout_chrome import plan_trace, write_parts  # noqa: E402


def encode_all(plan, module) -> int:
    encoder = module.new_encoder()
    with open(os.devnull, "wb") as out:
        for process in plan.processes:
            write_parts(out, module.process_encoder([process], encoder)(process))
        return sum(len(p.names) for p in plan.processes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--only", choices=("chrome", "perfetto"), help="time this writer alone")
    args = parser.parse_args()
    trace = read(args.input, diagnostics=Diagnostics())
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), schedule(trace))
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(encode_all, plan, perfetto)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return
    best = {}
    for _ in range(args.runs):
        for module in (chrome, perfetto) if args.only is None else ({"chrome": chrome, "perfetto": perfetto}[args.only],):
            cpu = time.process_time()
            size = encode_all(plan, module)
            cpu = time.process_time() - cpu
            name = module.__name__.rsplit(".", 1)[-1]
            best[name] = min(best.get(name, (cpu, size)), (cpu, size))
    for name, (cpu, size) in best.items():
        print(f"{name:8s} {cpu:.3f} s CPU ({plan.slice_count:,} slices)")


if __name__ == "__main__":
    main()
