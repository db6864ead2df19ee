"""The issue's measured-input benchmark set: 16 per-rank 1F1B Megatron logs (TP 2, PP 4, DP 2,
128 microbatches, 32 layers; about 46 MB), written by the tests' generator in the samples' format.

    python benchmarks/megatron_set.py DIRECTORY     # writes DIRECTORY/rank0.log ... rank15.log
    python benchmarks/megatron_set.py DIRECTORY --jitter 5   # every rank's sub-operations shortened a little

The plain set's ranks of one stage log the same times (the generator simulates one clock per
stage), which lets anything that recognises equal ranks skip work that measured ranks, never
equal, would cost; `--jitter N` draws each sub-operation's start up to N × 0.01 ms later per rank.

`make bench` recreates it under benchmarks/work/ (never committed).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_set(directory: Path, jitter: int = 0) -> list[Path]:
    """The 16 rank files, made once per directory (the generator takes a few seconds)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.megatron_synth import write_run

    directory = Path(directory)
    existing = sorted(directory.glob("rank*.log"))
    if len(existing) == 16:
        return existing
    return write_run(directory, stages=4, tp=2, dp=2, microbatches=128, layers=32, jitter=jitter)


if __name__ == "__main__":
    import argparse

    # argparse, so that `--help` prints this usage instead of becoming the output directory
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--jitter", type=int, default=0)
    found = parser.parse_args()
    paths = write_set(found.directory, found.jitter)
    print(f"{len(paths)} logs, {sum(p.stat().st_size for p in paths) / 1e6:.1f} MB in {found.directory}")
