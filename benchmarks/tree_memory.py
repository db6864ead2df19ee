"""Run a command and print, as one JSON line on stderr, its wall seconds and the peak memory of
its whole process tree (the command and every worker it starts): the largest sum of PSS over
the tree (shared pages counted once, split among the processes that share them) and the largest
RSS of any one process, sampled every 20 ms from /proc (Linux).

    python benchmarks/tree_memory.py et-convert logs/ -o out.json

`/usr/bin/time` and `getrusage` give one process's peak, or the largest child's: neither says
what the workers hold together, which is what must fit in the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def children_of() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            kids.setdefault(parent, []).append(int(entry))
    return kids


def tree(root: int) -> list[int]:
    kids, found, todo = children_of(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(kids.get(pid, []))
    return found


def pss_and_rss_kb(pid: int) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return 0, 0
    return int(fields.get("Pss", "0 kB").split()[0]), int(fields.get("Rss", "0 kB").split()[0])


def main() -> int:
    began = time.perf_counter()
    process = subprocess.Popen(sys.argv[1:])
    peak_sum_kb = peak_one_kb = 0
    while process.poll() is None:
        sizes = [pss_and_rss_kb(pid) for pid in tree(process.pid)]
        peak_sum_kb = max(peak_sum_kb, sum(pss for pss, _ in sizes))
        peak_one_kb = max([peak_one_kb, *(rss for _, rss in sizes)])
        time.sleep(0.02)
    print(json.dumps({"seconds": round(time.perf_counter() - began, 2), "code": process.returncode,
                      "tree_pss_mb": round(peak_sum_kb / 1024), "largest_rss_mb": round(peak_one_kb / 1024)}),
          file=sys.stderr)
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
