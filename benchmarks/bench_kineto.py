"""PyTorch profiler traces: throughput (MB of trace per second) and peak memory per rank.

    python benchmarks/bench_kineto.py [MB_PER_RANK] [RANKS]       # default 100 MB x 2 ranks

Writes a set of big traces (the NCCL fixture's steps repeated, times shifted, ids renumbered;
Kineto's one-event-per-line layout) into benchmarks/work/kineto, then measures fresh processes:
reading one rank's file into its items (the per-rank phase's survey; peak RSS against the file's
size), and the whole set to Chakra and to Chrome JSON by default, with --jobs 1 and 2, and on a
Dask cluster of 2 workers (when dask is installed). Figures: CPU seconds of the command and
every process it waited for (the machine is shared: wall time says little), wall seconds, MB
of trace per CPU second, peak RSS of the largest process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "work" / "kineto"
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))


def write_big_set(mb_per_rank: int, ranks: int) -> list[Path]:
    import make_nccl_traces

    small = WORK / "small"
    make_nccl_traces.write_set(small, "new", world=ranks)
    out = WORK / f"set_{mb_per_rank}mb_{ranks}"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(ranks):
        path = out / f"rank-{r}.json"
        paths.append(path)
        if path.exists():
            continue
        doc = json.loads((small / f"rank-{r}.json").read_text())
        _write_repeated(doc, path, mb_per_rank << 20)
    return paths


def _write_repeated(doc: dict, path: Path, target: int) -> None:
    events = doc.pop("traceEvents")
    meta = [e for e in events if e["ph"] == "M"]
    timed = [e for e in events if e["ph"] != "M"]
    first = min(e["ts"] for e in timed)
    period = max(e["ts"] + e["dur"] for e in timed) - first + 100.0
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n'
    with open(path, "w") as f:
        f.write(head + ",\n".join(json.dumps(e) for e in meta))
        written, copy = f.tell(), 0
        while written < target:
            lines = []
            for e in timed:
                e2 = dict(e, ts=round(e["ts"] + copy * period, 3))
                if "args" in e:
                    e2["args"] = args = dict(e["args"])
                    for key in ("External id", "correlation"):
                        if key in args:
                            args[key] += copy * 1_000_000
                    if "Seq" in args:
                        args["Seq"] += copy * 2
                if e["name"].startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e['name'][13:]) + 2 * copy}"
                lines.append(json.dumps(e2))
            f.write(",\n" + ",\n".join(lines))
            written, copy = f.tell(), copy + 1
        f.write('\n], "traceName": "big"}\n')


# Runs a command and prints the peak RSS (KB) of the largest process it started and the CPU
# seconds of the processes it waited for: its own figures, not those of every command this
# benchmark ran before it.
_MEASURE = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "sys.stderr.write(done.stderr); use = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(use.ru_maxrss, use.ru_utime + use.ru_stime); sys.exit(done.returncode)")


def measured(command: list[str]) -> tuple[float, float, int]:
    """CPU seconds, wall seconds and the peak RSS (bytes) of the largest process the command ran."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stderr}")
    rss, cpu = done.stdout.split()[-2:]
    return float(cpu), wall, int(rss) * 1024


def have_dask() -> bool:
    return importlib.util.find_spec("distributed") is not None


def main(argv: list[str]) -> int:
    usage = "usage: " + __doc__.strip().splitlines()[2].strip()
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(argv) > 2 or not all(a.isdigit() and int(a) > 0 for a in argv):
        print(usage, file=sys.stderr)
        return 2
    mb = int(argv[0]) if argv else 100
    ranks = int(argv[1]) if len(argv) > 1 else 2
    paths = write_big_set(mb, ranks)
    size = paths[0].stat().st_size
    total = sum(p.stat().st_size for p in paths)
    py = sys.executable
    print(f"{ranks} ranks x {size / 1e6:.1f} MB ({total / 1e6:.1f} MB of trace)")
    # with the cyclic GC off, as every worker surveys (forked from a process that paused it, or on Dask)
    one = [py, "-c", "import gc, sys; gc.disable(); from converters.builders.kineto import survey_file; "
           "from converters.options import Options; from pathlib import Path; p = Path(sys.argv[1]); "
           "s = survey_file(p, Options(), str(p)); print(len(s.records.items))", str(paths[0])]
    cpu, wall, rss = measured(one)
    print(f"one rank's file -> its items: {cpu:.2f} s CPU ({wall:.2f} s wall), {size / 1e6 / cpu:.1f} MB/s, "
          f"peak RSS {rss / 1e6:.0f} MB ({rss / size:.2f}x the file)")
    # (default): a set this big is read, drawn or written by one worker per core (`--jobs 1`: in this process)
    runners = [("(default)", []), ("--jobs 1", ["--jobs", "1"]), ("--jobs 2", ["--jobs", "2"])]
    if have_dask():
        runners.append(("--cluster local:2", ["--cluster", "local:2"]))
    for name, runner in runners:
        for what, args in (("chakra", ["--to", "chakra", "-o", str(WORK / "out" / "w")]),
                           ("chrome json", ["-o", str(WORK / "out.json")])):
            cpu, wall, rss = measured([py, "-m", "converters.cli", str(paths[0].parent), *args, *runner, "-q"])
            print(f"{name} -> {what}: {cpu:.2f} s CPU ({wall:.2f} s wall), {total / 1e6 / cpu:.1f} MB/s, "
                  f"peak RSS {rss / 1e6:.0f} MB ({rss / size:.2f}x one file)")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
