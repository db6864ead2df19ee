"""Run `et-convert ARGS` in this process and print the CPU time and peak RSS of this process
(the client) apart from its worker processes (--jobs, --cluster local:N), as one JSON line on
stderr. Used by benchmark 7: a child's usage counts once the child has ended and been waited for,
which both kinds of workers are before the command returns.

The client's peak is the kernel's high-water mark of this process's memory (VmHWM), not
getrusage's ru_maxrss: Linux carries ru_maxrss over an exec, so a process started by a bigger
one (benchmarks/run.py, after its other benchmarks) would report its parent's peak.

    python benchmarks/client_and_workers.py logs/ --to chakra --jobs 2 -o out/w
"""

from __future__ import annotations

import atexit
import json
import resource
import sys

from converters.cli import main as program


def usage(who: int) -> dict:
    u = resource.getrusage(who)
    peak_kb = own_peak_kb() if who == resource.RUSAGE_SELF else u.ru_maxrss
    return {"cpu_s": round(u.ru_utime + u.ru_stime, 2), "peak_rss_mb": round(peak_kb / 1024)}


def own_peak_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: the best there is


def report() -> None:
    print(json.dumps({"client": usage(resource.RUSAGE_SELF), "workers": usage(resource.RUSAGE_CHILDREN)}),
          file=sys.stderr)


def main() -> None:
    sys.argv = ["et-convert", *sys.argv[1:]]
    # The program ends the process itself once the exit handlers ran (converters/exiting.py), so
    # the figures are printed by one; the process's exit code is the command's.
    atexit.register(report)
    program()


if __name__ == "__main__":
    main()
