"""`make bench`: speed and memory of et-convert, side by side with `chakra_converter Text`.

Every figure is the median of at least 3 runs; the two tools' runs alternate so that machine
noise hits both alike. Peak RSS is read from the kernel for each child process (wait4).
Numbers, not pass/fail: the targets from the issue are printed beside the measurements.

    python benchmarks/run.py [--runs 3] [--only 1,2,3,4,5,6,7,8] [--work benchmarks/work]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "simai_tp8_pp16_1024gpu.txt"
BIN = Path(sys.executable).parent


@dataclass
class Run:
    seconds: float
    peak_rss_mb: float
    cpu_seconds: float = 0.0  # user + system of the child: steadier than wall time on a shared machine


def measure(argv: list[str], cwd: Path | None = None) -> Run:
    """Run a command to completion; wall time and the child's own peak RSS.

    The disk is synced first, so the previous run's dirty pages (the reference writes 174 MB)
    are not flushed during this one and charged to it.
    """
    os.sync()
    began = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - began
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{err}")
    return Run(seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)


def median_runs(runs: list[Run]) -> Run:
    return Run(statistics.median(r.seconds for r in runs), statistics.median(r.peak_rss_mb for r in runs),
               statistics.median(r.cpu_seconds for r in runs))


def bytes_of(paths) -> int:
    return sum(p.stat().st_size for p in paths)


def et_convert(*args) -> list[str]:
    return [str(BIN / "et-convert"), *map(str, args)]


def data_variant(work: Path) -> Path:
    """The sample's rows read as an ASTRA-sim DATA workload (line 1 = DATA, no _DP_EP suffixes)."""
    lines = SAMPLE.read_text().splitlines()
    rows = [re.sub(r"_DP_EP\b", "", line) for line in lines[1:]]
    path = work / "simai_as_data.txt"
    path.write_text("\n".join(["DATA", *rows]) + "\n")
    return path


def with_gpus(work: Path, gpus: int) -> Path:
    """The sample at another rank count: TP 8 and up to 16 stages (64 ranks: 8 stages, DP 1)."""
    text = SAMPLE.read_text()
    text = re.sub(r"all_gpus:\s*\d+", f"all_gpus: {gpus}", text, count=1)
    text = re.sub(r"pp:\s*\d+", f"pp: {min(16, gpus // 8)}", text, count=1)
    path = work / f"simai_{gpus}gpu.txt"
    path.write_text(text)
    return path


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def bench_reference(work: Path, runs: int) -> None:
    print("1. DATA workload, 1024 ranks, to Chakra: et-convert vs chakra_converter Text")
    data = data_variant(work)
    ours, theirs = [], []
    for _ in range(runs):
        out = fresh(work / "ref")
        theirs.append(measure([str(BIN / "chakra_converter"), "--log-filename", os.devnull, "Text", "--input", str(data), "--output",
                               str(out / "workload"), "--num-npus", "1024", "--num-passes", "1"]))
        ref_bytes = bytes_of(out.glob("*.et"))
        out = fresh(work / "ours")
        ours.append(measure(et_convert(data, "--from", "astra-text", "--num-npus", 1024, "--to", "chakra",
                                       "-o", out / "workload")))
        our_bytes = bytes_of(out.glob("*"))
    o, t = median_runs(ours), median_runs(theirs)
    print(f"   chakra_converter: {t.seconds:7.2f} s  {t.peak_rss_mb:7.0f} MB RSS  {ref_bytes / 1e6:8.1f} MB written")
    print(f"   et-convert:       {o.seconds:7.2f} s  {o.peak_rss_mb:7.0f} MB RSS  {our_bytes / 1e6:8.1f} MB written")
    print(f"   ratio: {t.seconds / o.seconds:5.1f}x faster (target >= 10x), "
          f"{our_bytes / ref_bytes:5.2f} of the bytes (target <= 0.33)")
    check = subprocess.run(et_convert("validate", work / "ours"), capture_output=True, text=True)
    print(f"   validate of our set: exit {check.returncode}: {check.stdout.strip().splitlines()[-1] if check.stdout.strip() else check.stderr.strip()}")
    ref_time["data_to_chakra"] = t.seconds


ref_time: dict[str, float] = {}


def bench_simai_chakra(work: Path, runs: int) -> None:
    print("2. SimAI sample, 1024 ranks, to Chakra (per-stage graphs, groups, send/recv)")
    results = []
    for _ in range(runs):
        out = fresh(work / "simai")
        results.append(measure(et_convert(SAMPLE, "--to", "chakra", "-o", out / "workload")))
    r = median_runs(results)
    size = bytes_of((work / "simai").glob("*"))
    target = ref_time.get("data_to_chakra")
    print(f"   {r.seconds:7.2f} s  {r.peak_rss_mb:7.0f} MB RSS (target <= 1024)  {size / 1e6:8.1f} MB written"
          + (f"  ({r.seconds / target:.2f} of the reference's time in 1.; target < 1)" if target else ""))


def count_events(path: Path) -> int:
    """Counted in a child process: a big parent would inflate the next child's peak RSS
    (Linux children start from their parent's high-water mark)."""
    code = "import orjson,sys; print(len(orjson.loads(open(sys.argv[1],'rb').read())['traceEvents']))"
    return int(subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout)


def bench_chrome(work: Path, runs: int) -> None:
    print("3. SimAI sample, all 1024 ranks, to Chrome JSON and to .pftrace")
    events = 0
    for suffix in (".json", ".pftrace"):  # JSON first: its event count stands for both (same slices)
        out = work / f"simai_all{suffix}"
        results = [measure(et_convert(SAMPLE, "--ranks", "all", "-o", out)) for _ in range(runs)]
        r = median_runs(results)
        size = out.stat().st_size
        events = events or count_events(out)
        print(f"   {suffix:8} {r.seconds:7.2f} s  {r.peak_rss_mb:7.0f} MB RSS  {size / 1e6:8.1f} MB  "
              f"{events:,} events, {events / r.seconds / 1e6:.2f} M events/s end to end (reading and scheduling included)")
    print("   writing step alone (benchmarks/bench_chrome.py, one run, per second of CPU time; target >= 1 M/s written):")
    writers = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_chrome.py")],
                             capture_output=True, text=True, check=True)
    for line in writers.stdout.splitlines():
        print(f"   {line}")


def bench_validate_and_schedule(work: Path, runs: int) -> None:
    print("4. Validator and scheduler on benchmark 2's output")
    chakra_set = work / "simai"
    if not chakra_set.exists():
        bench_simai_chakra(work, 1)
    v = median_runs([measure(et_convert("validate", chakra_set)) for _ in range(runs)])
    s = median_runs([measure(et_convert("stats", chakra_set)) for _ in range(runs)])
    print(f"   validate (1024 .et files): {v.seconds:7.2f} s  {v.peak_rss_mb:7.0f} MB RSS")
    print(f"   stats (scheduler, 1024 .et files): {s.seconds:7.2f} s  {s.peak_rss_mb:7.0f} MB RSS")


def bench_growth(work: Path, runs: int) -> None:
    print("5. Growth: SimAI sample to Chakra at 64 (PP 8), 256, 1024, 4096 ranks (PP 16)")
    for gpus in (64, 256, 1024, 4096):
        path = with_gpus(work, gpus)
        results = []
        for _ in range(runs):
            out = fresh(work / f"growth{gpus}")
            results.append(measure(et_convert(path, "--to", "chakra", "-o", out / "workload")))
        r = median_runs(results)
        print(f"   {gpus:5} ranks: {r.seconds:7.2f} s  {r.seconds / gpus * 1e3:6.2f} ms/rank  "
              f"{r.peak_rss_mb:7.0f} MB RSS  {r.peak_rss_mb / gpus * 1024:7.1f} KB/rank")
        shutil.rmtree(work / f"growth{gpus}", ignore_errors=True)


def big_megatron_log(work: Path, iterations: int = 60) -> Path:
    """A synthetic 8-rank Megatron run (4 stages x TP 2, 32 microbatches, 8 layers) in one
    concatenated log of about 100 MB, written by the tests' generator in the samples' format."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.megatron_synth import write_run

    (path,) = write_run(fresh(work / "biglog"), stages=4, tp=2, microbatches=32, layers=8,
                        iterations=iterations, one_file=True)
    return path


def bench_big_log(work: Path, runs: int) -> None:
    """One log of 8 ranks: the workers share it (each parses and draws its ranks). Memory of the
    whole process tree (benchmarks/tree_memory.py), and `.pftrace`'s time against JSON's; then
    again with the issue's memory target given as --memory (the workers let go of their shares,
    one forked writer at most)."""
    log = big_megatron_log(work)
    size = log.stat().st_size
    target = f"{2 * size / 2**20 + 200:.0f}M"
    print(f"6. A long Megatron run: {size / 1e6:.0f} MB log, 8 ranks, to Chrome JSON, .pftrace and Chakra; targets "
          f">= 20 MB/s, peak RSS <= 2 x input + 200 MB = {target}B, .pftrace <= JSON's time")
    outputs = (("json", work / "biglog.json", []), ("pftrace", work / "biglog.pftrace", []),
               ("chakra", work / "biglog_set" / "w", ["--to", "chakra"]))
    seconds = {}
    for limit in ([], ["--memory", target]):
        for label, output, extra in outputs:
            found = [tree_memory(*et_convert(log, *extra, *limit, "-q", "-o", output)) for _ in range(runs)]
            median = statistics.median(f["seconds"] for f in found)
            if not limit:
                seconds[label] = median
            print(f"   {label:8}{' '.join(limit):>15} {median:7.2f} s  {size / 1e6 / median:5.1f} MB/s   "
                  f"{statistics.median(f['tree_pss_mb'] for f in found):5.0f} MB together (PSS), the largest process "
                  f"{statistics.median(f['largest_rss_mb'] for f in found):4.0f} MB RSS")
    print(f"   .pftrace / JSON time: {seconds['pftrace'] / seconds['json']:.2f}")
    shutil.rmtree(work / "biglog", ignore_errors=True)


# The measurements before the per-file phase (2026-11-23, same machine): seconds, peak RSS MB.
BEFORE_46MB = {"json": (15.1, 344), "pftrace": (24.7, 659), "chakra": (17.8, 344)}


def bench_measured_set(work: Path, runs: int) -> None:
    """The issue's set: 16 per-rank 1F1B logs (TP 2, PP 4, DP 2, 128 microbatches, 32 layers)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from megatron_set import write_set

    logs = write_set(work / "set46")
    size = bytes_of(logs)
    print(f"7. Per-rank Megatron logs: {len(logs)} files, {size / 1e6:.1f} MB (TP 2, PP 4, DP 2, 128 microbatches, "
          "32 layers); targets >= 20 MB/s, peak RSS <= 2 x input + 200 MB "
          f"= {2 * size / 2**20 + 200:.0f} MB")
    # With workers (the default for timelines of a set this big, --jobs 2, a Dask cluster), they
    # read their files and write their ranks (a Chakra set's rank files, a timeline's processes);
    # the client and the workers are measured apart.
    if importlib.util.find_spec("distributed") is not None:
        clusters = ["--cluster local:1", "--cluster local:2"]  # the cluster's start (about 2 s) is included
    else:
        print("   Dask: not installed (pip install 'et-convert[cluster]'); 1 vs 2 workers skipped")
        clusters = []
    outputs = {"json": ["-o", work / "set46.json"], "pftrace": ["-o", work / "set46.pftrace"],
               "chakra": ["--to", "chakra", "-o", work / "set46_chakra" / "w"]}
    for label, output in outputs.items():
        before_s, before_mb = BEFORE_46MB[label]
        for where in ["(default)", "--jobs 1", "--jobs 2", *clusters]:
            options = [] if where == "(default)" else where.split()
            split = [measure_client_and_workers(work / "set46", *options, "-q", *output) for _ in range(runs)]
            seconds = statistics.median(s["seconds"] for s in split)
            client, workers = ({key: statistics.median(s[who][key] for s in split) for key in ("cpu_s", "peak_rss_mb")}
                               for who in ("client", "workers"))
            print(f"   {label:7} {where:18}: {seconds:6.2f} s  {size / 1e6 / seconds:5.1f} MB/s   client {client['cpu_s']:5.2f} s CPU "
                  f"{client['peak_rss_mb']:4.0f} MB RSS" + (f",  workers {workers['cpu_s']:5.2f} s CPU (together) "
                                                            f"{workers['peak_rss_mb']:4.0f} MB RSS (the largest)"
                                                            if workers["cpu_s"] else "")
                  + f"   (before: {before_s} s, {before_mb} MB)")


def measure_client_and_workers(*args) -> dict:
    """Wall seconds, and CPU time and peak RSS of the client apart from its workers
    (benchmarks/client_and_workers.py)."""
    os.sync()
    began = time.perf_counter()
    found = _reported("client_and_workers.py", *args)
    return {"seconds": time.perf_counter() - began, **found}


def _reported(script: str, *args) -> dict:
    """What a measuring script of benchmarks/ prints as its last line on stderr (JSON), run with
    `args`; stops the benchmark if the command failed."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *map(str, args)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = done.stderr.strip().splitlines()
    found = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if done.returncode != 0 or found.get("code", 0) != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(map(str, args))}\n{done.stderr}")
    return found


def bench_long_set(work: Path, runs: int) -> None:
    """The issue's set with 512 microbatches (16 logs, about 184 MB): memory of the whole process
    tree (benchmarks/tree_memory.py) when the workers keep their first 32 MB of logs and build
    the others again for each step (per_rank.LetGo, the default), and when they keep them all;
    then to Chakra (whose workers keep none of them: per_rank.files_to_hold)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.megatron_synth import write_run

    logs = sorted((work / "set184").glob("rank*.log"))
    if len(logs) != 16:
        logs = write_run(work / "set184", stages=4, tp=2, dp=2, microbatches=512, layers=32)
    size = bytes_of(logs)
    print(f"8. Per-rank Megatron logs: {len(logs)} files, {size / 1e6:.1f} MB (benchmark 7 with 512 microbatches) "
          f"-> Chrome JSON; target: the processes together <= 2 x input + 200 MB = {2 * size / 2**20 + 200:.0f} MB")
    for label, budget in (("workers keep 32 MB each (default)", None), ("workers keep every file", 1 << 60)):
        script = ("import sys; from converters.builders import per_rank; from converters.cli import main; "
                  + (f"per_rank.HOLD_BYTES_PER_WORKER = {budget}; " if budget else "")
                  + f"sys.argv = ['et-convert', {str(work / 'set184')!r}, '-q', '-o', {str(work / 'set184.json')!r}]; main()")
        print_tree(label, [tree_memory(sys.executable, "-c", script) for _ in range(runs)], size)
    # -> Chakra: the workers write the rank files, this process checks every rank's skeleton
    out, found = work / "set184_chakra", []
    for _ in range(runs):
        shutil.rmtree(out, ignore_errors=True)
        found.append(tree_memory(str(BIN / "et-convert"), str(work / "set184"), "-q", "--to", "chakra",
                                 "-o", str(out / "workload")))
    print_tree("-> Chakra (default)", found, size)


def print_tree(label: str, found: list[dict], size: int) -> None:
    """The medians of `tree_memory`'s runs of one command on `size` bytes of input."""
    seconds = statistics.median(f["seconds"] for f in found)
    print(f"   {label:34}: {seconds:6.2f} s  {size / 1e6 / seconds:5.1f} MB/s   "
          f"{statistics.median(f['tree_pss_mb'] for f in found):5.0f} MB together (PSS), "
          f"the largest process {statistics.median(f['largest_rss_mb'] for f in found):4.0f} MB RSS")


def tree_memory(*command) -> dict:
    """benchmarks/tree_memory.py's figures for `command`."""
    os.sync()
    return _reported("tree_memory.py", *command)


BENCHES = {1: bench_reference, 2: bench_simai_chakra, 3: bench_chrome, 4: bench_validate_and_schedule, 5: bench_growth,
           6: bench_big_log, 7: bench_measured_set, 8: bench_long_set}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="1,2,3,4,5,6,7,8")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    # As `make bench` does: with PYTHONDONTWRITEBYTECODE set (this machine's image), a fresh
    # checkout has no compiled modules, and every command would compile each one it imports.
    compileall.compile_dir(ROOT / "converters", quiet=1)
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; medians of {args.runs} runs\n")
    for number in sorted(int(n) for n in args.only.split(",")):
        BENCHES[number](args.work, args.runs)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
