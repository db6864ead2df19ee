"""Validating the SimAI sample's 1024-rank Chakra set, against writing it (target: at most ~2x).

    python benchmarks/bench_validate.py [--work benchmarks/work/validate] [--skip-cli]

1. `et-convert samples/simai_tp8_pp16_1024gpu.txt --to chakra -o WORK/w` (timed);
2. `et-convert validate WORK` and `et-convert stats WORK` (timed, the user's commands);
3. the same in one process, split into reading the set, each check, and the deadlock dry run,
   plus the checks on the model the converter writes (what `converters.validate.gate` costs).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "simai_tp8_pp16_1024gpu.txt"
sys.path.insert(0, str(ROOT))

from converters.api import read  # noqa: E402
from converters.options import Options  # noqa: E402
from converters.validate import _checks  # noqa: E402
from converters.validate.context import build_context  # noqa: E402


def timed_cli(*args: str) -> float:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "converters.cli", *args], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - began
    if done.returncode not in (0, 1):
        sys.exit(f"et-convert {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return seconds


def breakdown(label: str, trace) -> float:
    total = 0.0
    began = time.perf_counter()
    ctx = build_context(trace, Options())
    parts = [("context", time.perf_counter() - began)]
    for name, check in _checks():
        began = time.perf_counter()
        check(ctx)
        parts.append((name, time.perf_counter() - began))
    total = sum(s for _, s in parts)
    print(f"  {label}: checks {total:.2f} s = " + ", ".join(f"{n} {s:.2f}" for n, s in parts))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "work" / "validate")
    parser.add_argument("--skip-cli", action="store_true", help="only the in-process breakdown")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)

    write_s = timed_cli(str(SAMPLE), "--from", "simai", "--to", "chakra", "-o", str(args.work / "w"), "-q")
    print(f"write the 1024-rank Chakra set: {write_s:.2f} s")
    if not args.skip_cli:
        validate_s = timed_cli("validate", str(args.work), "-q")
        print(f"et-convert validate on it:      {validate_s:.2f} s = {validate_s / write_s:.1f}x writing (target <= 2x)")
        stats_s = timed_cli("stats", str(args.work), "-q")
        print(f"et-convert stats on it:         {stats_s:.2f} s = {stats_s / write_s:.1f}x writing")

    began = time.perf_counter()
    model = read(SAMPLE, "simai")
    print(f"in process: read the SimAI text {time.perf_counter() - began:.2f} s")
    breakdown("model before writing (what gate() runs)", model)
    began = time.perf_counter()
    trace = read(args.work, "chakra")
    print(f"in process: read the Chakra set {time.perf_counter() - began:.2f} s")
    breakdown("Chakra set read back", trace)


if __name__ == "__main__":
    main()
