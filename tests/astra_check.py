"""Run every Chakra set under a folder through both ASTRA-sim builds (developer check, not a test).

    make astra-check                      # make run, then this on out/
    python tests/astra_check.py out/      # after make run

Uses `../shared/astra-sim/run` (see its README): a set passes only if every rank prints its
`finished` line on the build, with no `[critical]` line. A set of some ranks of a job (a one-rank
log's set: its rank files do not start at 0) cannot run alone and is listed as skipped.
Exit 0 when every whole set ran to the end on both builds, 1 otherwise, 2 without the simulator.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT.parent / "shared" / "astra-sim" / "run"
BUILDS = ("legacy", "head")


def chakra_sets(folder: Path) -> list[tuple[Path, list[int]]]:
    """(prefix, rank numbers) of every set under `folder`, found by its rank files."""
    sets: dict[Path, list[int]] = {}
    for path in sorted(folder.rglob("*.et")):
        m = re.fullmatch(r"(.+)\.(\d+)\.et", path.name)
        if m:
            sets.setdefault(path.parent / m.group(1), []).append(int(m.group(2)))
    return [(prefix, sorted(ranks)) for prefix, ranks in sorted(sets.items())]


def run(build: str, prefix: Path, nranks: int) -> str:
    groups = prefix.parent / f"{prefix.name}.comm_group.json"
    args = [str(RUN), build, str(prefix), str(nranks)] + ([str(groups)] if groups.exists() else [])
    done = subprocess.run(args, capture_output=True, text=True)
    return (done.stdout.splitlines() or [f"FAIL {build} no output (exit {done.returncode})"])[0]


def main(argv: list[str]) -> int:
    if not RUN.exists():
        print(f"ASTRA-sim not found at {RUN}")
        return 2
    folder = Path(argv[0] if argv else "out")
    failed = ran = 0
    for prefix, ranks in chakra_sets(folder):
        shown = prefix.relative_to(folder)
        if ranks != list(range(len(ranks))):
            print(f"skip  {shown}: ranks {ranks} of a larger job (a partial set cannot run alone)")
            continue
        for build in BUILDS:
            line = run(build, prefix, len(ranks))
            ran += 1
            failed += not line.startswith("OK")
            print(f"{'ok' if line.startswith('OK') else 'FAIL':>4}  {shown} ({len(ranks)} ranks): {line}", flush=True)
    print(f"\n{ran - failed} of {ran} simulator runs finished on every rank")
    return 1 if failed or not ran else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
