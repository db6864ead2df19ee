"""Run `et-convert ARGS` for a Chakra set written by the workers (`--jobs N` or `--cluster`)
and print, on stderr, when each of the client's phases begins and ends (seconds since the
start, the client's wall clock): reading and building on the workers, their per-rank checks
(the client making skeleton nodes meanwhile; when memory is short, the workers write each
rank's file there too), the client's cross-rank checks (while the workers write, otherwise),
the files' common metadata (memory short), then comm_group.json (a gap before it: the workers
were still writing), and the client's memory after each (Linux). Where the time goes in
`converters/rank_files.py`.

    python benchmarks/rank_files_phases.py logs/ --to chakra --jobs 2 -o out/w
"""

from __future__ import annotations

import os
import resource
import sys
import time

from converters import rank_files
from converters.builders import per_rank
from converters.cli import main as program
from converters.writers import chakra

STARTED = time.perf_counter()
PHASES = [
    (per_rank.Workers, "keep_parts", "reading and building on the workers"),
    (per_rank.Workers, "each_rank", "checking each rank on the workers"),
    (rank_files, "_cross_rank_notes", "cross-rank checks here"),
    (chakra, "rewrite_common_metadata", "the files' common metadata"),
    (chakra, "finish_set", "comm_group.json"),
]


def resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def timed(function, label: str):
    def wrapper(*args, **kwargs):
        begin = time.perf_counter() - STARTED
        try:
            return function(*args, **kwargs)
        finally:
            print(f"{begin:7.2f} – {time.perf_counter() - STARTED:7.2f} s  {label}  "
                  f"(then {resident_mb():.0f} MB RSS, {peak_mb():.0f} MB at most so far)", file=sys.stderr)
    return wrapper


def main() -> int:
    for owner, name, label in PHASES:
        setattr(owner, name, timed(getattr(owner, name), label))
    sys.argv = ["et-convert", *sys.argv[1:]]
    return program()  # ends the process itself (converters/exiting.py)


if __name__ == "__main__":
    sys.exit(main())
