"""Reading per-rank Megatron logs into the model, without any writer: MB of log per CPU second.

    python benchmarks/bench_megatron_read.py [DIRECTORY] [--runs 3]

On the issue's 46 MB set (`megatron_set.py`; made in benchmarks/work/set46 when no directory is
given), fresh processes time with CPU time (steadier than wall time on a shared machine) the
phases: reading and surveying the files, building every rank's nodes, merging them into one
model; and, in a process of its own (whose peak RSS is printed), `api.read` as a whole: the
phases plus the checks after them. Best of the runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def phases(directory: Path) -> dict:
    """CPU seconds per phase (the phases as `per_rank.run` calls them in one process)."""
    from converters.builders import megatron
    from converters.diagnostics import Diagnostics
    from converters.options import Options

    paths = sorted(directory.glob("*.log"))
    options, diagnostics = Options(), Diagnostics()
    seconds = {}
    began = time.process_time()
    surveys = [megatron.survey_file(path, options, str(path)) for path in paths]
    seconds["read + survey"] = time.process_time() - began
    began = time.process_time()
    plan = megatron.plan(surveys, paths, options, diagnostics)
    parts = [part for survey in surveys for part in megatron.build_file(survey, plan, options)]
    seconds["plan + build"] = time.process_time() - began
    began = time.process_time()
    trace = megatron.merge(plan, parts, options, diagnostics)
    seconds["merge"] = time.process_time() - began
    return {"seconds": seconds, "nodes": trace.node_count(), "bytes": sum(p.stat().st_size for p in paths)}


def whole_read(directory: Path) -> dict:
    """CPU seconds and peak RSS of `api.read` alone."""
    from converters import api
    from converters.diagnostics import Diagnostics

    began = time.process_time()
    api.read(sorted(directory.glob("*.log")), "megatron-log", diagnostics=Diagnostics())
    seconds = time.process_time() - began
    return {"seconds": {"api.read": seconds}, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child(directory: Path, what: str) -> dict:
    argv = [sys.executable, __file__, str(directory), "--child", what]
    return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=("phases", "read"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps((phases if args.child == "phases" else whole_read)(args.directory)))
        return 0
    directory = args.directory
    if directory is None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from megatron_set import write_set

        directory = ROOT / "benchmarks" / "work" / "set46"
        write_set(directory)
    runs = [child(directory, "phases") for _ in range(args.runs)]
    reads = [child(directory, "read") for _ in range(args.runs)]
    size = runs[0]["bytes"]
    print(f"Megatron logs read into the model: {directory} ({size / 1e6:.1f} MB, {runs[0]['nodes']:,} nodes); "
          f"CPU seconds, best of {args.runs} processes")
    for phase in runs[0]["seconds"]:
        best = min(run["seconds"][phase] for run in runs)
        print(f"   {phase:14} {best:6.2f} s  {size / 1e6 / best:6.1f} MB/s")
    best = min(reads, key=lambda run: run["seconds"]["api.read"])
    print(f"   {'api.read':14} {best['seconds']['api.read']:6.2f} s  {size / 1e6 / best['seconds']['api.read']:6.1f} MB/s"
          f"  {best['peak_mb']:.0f} MB peak RSS ({best['peak_mb'] * 2**20 / size:.1f} x the logs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
