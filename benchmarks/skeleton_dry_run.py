"""Does the client's compact form of skeleton nodes slow the validator's deadlock dry run?

    python benchmarks/skeleton_dry_run.py LOGS_DIR [--rounds 7]

When the workers write a Chakra set (`converters/rank_files.py`), the client checks every
rank's communication skeleton as `rank_files.SkeletonNode`s whose equal ids and dependency lists
are shared across ranks (`SharedValues`, read-only `SharedDeps`). This reads a folder of
per-rank logs in this process, makes those skeleton nodes, and also the same values as plain
`Node`s with their own lists, then times the deadlock dry run (the scheduler's programs built
and run, what `rank_files._cross_rank_notes` runs last) on each, the two forms alternating,
CPU seconds of this process with the garbage collector off (as there).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from converters.api import read  # noqa: E402
from converters.diagnostics import Diagnostics  # noqa: E402
from converters.model import ExecutionTrace, Node  # noqa: E402
from converters.options import Options  # noqa: E402
from converters.rank_files import SharedValues, _reported, skeleton  # noqa: E402


def as_plain_nodes(trace: ExecutionTrace) -> ExecutionTrace:
    """The same nodes as `Node`s, each with its own dependency list and args."""
    names = [f.name for f in fields(Node)]

    def plain(node) -> Node:
        values = {name: getattr(node, name) for name in names}
        values.update(deps=list(node.deps), ctrl_deps=[], args=dict(node.args))
        return Node(**values)

    ranks = {r: replace(rank, nodes=list(map(plain, rank.nodes))) for r, rank in trace.ranks.items()}
    return replace(trace, ranks=ranks)


def dry_run_seconds(trace: ExecutionTrace) -> float:
    start = time.process_time()
    found = _reported(trace, Options(), ("deadlock",))
    seconds = time.process_time() - start
    if found:
        raise SystemExit(f"the dry run found {found[0].message}: give it a clean set of logs")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", type=Path, help="a folder of per-rank logs (benchmarks/megatron_set.py makes one)")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    whole = read(sorted(args.logs.glob("*.log")), "auto", Options(jobs=1), Diagnostics())
    shared = SharedValues()
    skeletons = replace(whole, ranks={r: replace(rank, nodes=skeleton(rank).nodes(shared))
                                      for r, rank in whole.ranks.items()})
    del whole
    forms = {"SkeletonNode, shared lists": skeletons, "Node, own lists": as_plain_nodes(skeletons)}
    nodes = sum(len(rank.nodes) for rank in skeletons.ranks.values())
    print(f"{nodes:,} skeleton nodes in {len(skeletons.ranks)} ranks")
    gc.disable()
    times: dict[str, list[float]] = {label: [] for label in forms}
    for round_ in range(args.rounds):
        for label in (list(forms) if round_ % 2 == 0 else list(reversed(forms))):
            times[label].append(dry_run_seconds(forms[label]))
    for label, seconds in times.items():
        seconds.sort()
        print(f"{label:<28} dry run: best {seconds[0]:.3f} s, median {seconds[len(seconds) // 2]:.3f} s CPU")


if __name__ == "__main__":
    main()
