"""Run the fuzzer of every input format and print, per format, edges covered, executions, crashes.

    python fuzz/run.py [--seconds 600] [--jobs 1] [--min-edges 0] [FORMAT...]

The formats are the registry's (`converters.formats.INPUT_FORMATS`) unless named. Each runs
`fuzz/fuzz_reader.py` for `--seconds` on its seeds (`fuzz/seeds.py`, written afresh) and its
growing corpus `fuzz/corpus/<format>`; the log is `fuzz/<format>.log`, an input that crashed
or hung is saved as `fuzz/crashes/<format>-crash-<sha1>` (or `-timeout-`).
Exit status 1 when a format crashed, hung, or covered fewer than `--min-edges` edges (a harness
that stopped seeing inside the readers), so CI (`make fuzz-ci`) fails on either.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from seeds import write_seeds  # noqa: E402

from converters.formats import INPUT_NAMES  # noqa: E402

HANG_S = 30  # one input running longer than this is a hang
PROGRESS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+)", re.M)
EXCEPTION = re.compile(r"=== Uncaught Python exception: ===\n(.*)")
LIBFUZZER_ERROR = re.compile(r"==\d+== ERROR: libFuzzer: (.*)")
SAVED = re.compile(r"Test unit written to (\S+)")


@dataclass
class Result:
    fmt: str
    seconds: float
    edges: int
    executions: int
    failure: str  # "" when clean: what went wrong, in one line
    note: str = ""  # a timeout that did not happen again (the fuzzer stopped there all the same)

    def row(self) -> str:
        crashes = 0 if not self.failure else 1
        return f"{self.fmt:<14} {self.seconds:>6.0f} s {self.edges:>7} {self.executions:>11,} {crashes:>7}"


def start(fmt: str, seconds: int, seeds: Path) -> tuple[subprocess.Popen, Path, float]:
    corpus, crashes = HERE / "corpus" / fmt, HERE / "crashes"
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(exist_ok=True)
    write_seeds(fmt, seeds / fmt)
    log = HERE / f"{fmt}.log"
    command = [
        sys.executable, str(HERE / "fuzz_reader.py"), fmt, str(corpus), str(seeds / fmt),
        f"-max_total_time={seconds}", f"-timeout={HANG_S}", "-rss_limit_mb=4096",
        f"-artifact_prefix={crashes}/{fmt}-", "-print_final_stats=1",
    ]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    return process, log, time.monotonic()


def result(fmt: str, process: subprocess.Popen, log: Path, started: float) -> Result:
    text = log.read_text(errors="replace")
    progress = PROGRESS.findall(text)
    edges = max((int(cov) for _, cov in progress), default=0)
    executions = int(progress[-1][0]) if progress else 0
    r = Result(fmt, time.monotonic() - started, edges, executions, "")
    if process.returncode:
        r.failure = failure_of(text, log)
        saved = SAVED.findall(text)[-1:]  # the input it stopped on (slow ones may be saved before)
        if saved and "-timeout-" in Path(saved[0]).name and not hangs_again(fmt, Path(saved[0])):
            # A stall of the machine (seen on a shared 2-core box), not of the reader.
            r.failure, r.note = "", f"{r.failure}, but it ran in time alone: not a hang; fuzzing stopped there"
    return r


def failure_of(text: str, log: Path) -> str:
    """What went wrong, in one line: the exception (or libFuzzer's error) and the saved input."""
    found = EXCEPTION.search(text) or LIBFUZZER_ERROR.search(text)
    saved = SAVED.findall(text)[-1:]
    what = found.group(1).strip() if found else f"see {log}"
    return f"{what}; input saved as {saved[0]}" if saved else what


def hangs_again(fmt: str, saved: Path) -> bool:
    """Run a timed-out input once more, alone: a real hang times out again."""
    command = [sys.executable, str(HERE / "fuzz_reader.py"), fmt, str(saved), f"-timeout={HANG_S}"]
    try:
        return subprocess.run(command, capture_output=True, timeout=3 * HANG_S).returncode != 0
    except subprocess.TimeoutExpired:
        return True


def run_all(formats: list[str], seconds: int, jobs: int) -> list[Result]:
    """Run the formats `jobs` at a time; results in the order given."""
    waiting, running, done = list(formats), {}, {}
    with tempfile.TemporaryDirectory(prefix="etfuzz-seeds.") as seeds:
        while waiting or running:
            while waiting and len(running) < jobs:
                fmt = waiting.pop(0)
                running[fmt] = start(fmt, seconds, Path(seeds))
            time.sleep(0.5)
            for fmt, (process, log, started) in list(running.items()):
                if process.poll() is not None:
                    done[fmt] = result(fmt, process, log, started)
                    del running[fmt]
    return [done[f] for f in formats]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("formats", nargs="*", help=f"default: every input format ({', '.join(INPUT_NAMES)})")
    parser.add_argument("--seconds", type=int, default=600, help="fuzzing time per format")
    parser.add_argument("--jobs", type=int, default=1, help="formats fuzzed at the same time")
    parser.add_argument("--min-edges", type=int, default=0, help="fail a format covering fewer edges")
    args = parser.parse_args()
    formats = args.formats or INPUT_NAMES
    print(f"{'format':<14} {'time':>8} {'edges':>7} {'executions':>11} {'crashes':>7}", flush=True)
    failed = False
    for r in run_all(formats, args.seconds, args.jobs):
        print(r.row(), flush=True)
        for line in (r.failure, r.note):
            if line:
                print(f"  {r.fmt}: {line}", flush=True)
        if r.edges < args.min_edges:
            print(f"  {r.fmt}: only {r.edges} edges covered (floor {args.min_edges}): "
                  "is the reader still instrumented?", flush=True)
        failed = failed or bool(r.failure) or r.edges < args.min_edges
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
