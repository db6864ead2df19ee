"""Count the CPU instructions `et-convert stats` spends on an input, step by step: start-up
(imports), reading it into the model, scheduling it (a measured input keeps its times), and then
the validator's deadlock dry run, which every conversion's gate runs, on measured inputs too.
Counted by valgrind (`cachegrind`, no cache simulation), so the same code on the same input
gives the same count to a few parts in a thousand, however busy the machine is: on a shared
machine, where wall times of one command vary by 10-30%, this is how a change of 5% in the
reader or the scheduler can be seen.

    python benchmarks/instructions.py SET                    # this checkout
    python benchmarks/instructions.py SET --against ../old   # and another checkout, side by side

Each step is a separate run of the program stopped after that step; a step's count is the
difference from the previous one's. Valgrind makes Python about 40 times slower: benchmark 7's
16 logs or their Chakra set (273,448 nodes) take 3 to 5 minutes a checkout. Not run by
`make bench` (valgrind is not a dependency of the project: `apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

STEPS = ("start-up", "read", "schedule", "dry-run")

# Run under valgrind: `converters` from the checkout on PYTHONPATH, stopped after the step named.
PROGRAM = """
import sys
from pathlib import Path
from converters import api
from converters.diagnostics import Diagnostics
from converters.gc_pause import paused_gc
from converters.options import Options
from converters.timeline import timeline_for

step, inputs = sys.argv[1], [Path(p) for p in sys.argv[2:]]
if step != "start-up":
    with paused_gc():  # as `stats` runs
        trace = api.read(inputs, "auto", Options(), Diagnostics())
        if step in ("schedule", "dry-run"):
            timeline_for(trace, Options())
        if step == "dry-run":
            from converters.scheduler import dry_run
            dry_run(trace, Options())
        print(sum(len(rank.nodes) for rank in trace.ranks.values()))
"""


def instructions(checkout: Path, step: str, inputs: list[str]) -> tuple[int, int | None]:
    """(instructions, nodes read) of PROGRAM stopped after `step`, with `checkout`'s code."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-c", PROGRAM, step, *inputs],
        env=env, cwd=checkout, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{checkout}: the {step} step failed:\n{done.stderr[-2000:]}")
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    nodes = int(done.stdout.split()[-1]) if done.stdout.split() else None
    return int(found.group(1).replace(",", "")), nodes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="what `et-convert stats` would read")
    parser.add_argument("--against", type=Path, help="another checkout, counted the same way")
    found = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parent.parent
    checkouts = [here] + ([found.against] if found.against else [])
    for checkout in checkouts:  # compiling a module at import would count too (PYTHONDONTWRITEBYTECODE)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "converters"], cwd=checkout, check=True)
    counts: dict[Path, list[int]] = {}
    nodes = None
    inputs = [str(Path(p).resolve()) for p in found.inputs]  # (each checkout runs in its own folder)
    for step in STEPS:  # checkouts alternating: a long run drifts alike for both
        for checkout in checkouts:
            count, read = instructions(checkout, step, inputs)
            counts.setdefault(checkout, []).append(count)
            nodes = nodes or read
    print(f"{nodes:,} nodes; instructions per step (millions), and per node")
    header = f"{'step':10}" + "".join(f"{str(c)[-28:]:>30}" for c in checkouts)
    print(header + ("       ratio" if len(checkouts) == 2 else ""))
    for k, step in enumerate(STEPS):
        own = [counts[c][k] - (counts[c][k - 1] if k else 0) for c in checkouts]
        cells = "".join(f"{n / 1e6:18,.0f} M {n / nodes:8,.0f}/n" for n in own)
        ratio = f"{own[0] / own[1]:12.3f}" if len(own) == 2 and own[1] else ""
        print(f"{step:10}{cells}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
