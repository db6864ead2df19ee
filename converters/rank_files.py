"""A Chakra set from per-rank inputs, written where the ranks were built (--jobs, --cluster).

The workers (`builders/per_rank.py`) build their files' ranks and keep them; this process joins
only what crosses ranks (the format's `join`: groups, assumptions, where sends start) and the
workers finish their ranks with it. Then, before anything is written, the checks of
`converters.api.write`:

- on each worker, per rank: the one-member-collective pass (`builders/one_rank.py`, which needs
  only the trace's groups) and the validator's per-rank checks (graph, attributes, nodes,
  pipeline, timing on one rank);
- here: the validator's whole gate on the ranks' communication skeletons (every send, receive
  and collective with its dependencies on earlier ones, compute left out): rank set, groups,
  collective sequences, send/receive matching, clocks between ranks, the deadlock dry run.

A clean set is then written by the workers (each its ranks' `.et` files, with the writer's
code, into the temporary folder `atomic_set` renames only when every file is there) and
here (comm_group.json). Any finding that `api.write` would report (an error, a warning, a
partial rank set) sends every rank here instead, and the set is gated and written as a local
run does, so messages are the same too. A worker lost on the way fails the run with one error
and nothing written.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import chain
from pathlib import Path

from .builders import per_rank
from .builders.one_rank import ASSUMPTION, KEPT, demote_one_rank_collectives, warn_if_kept
from .diagnostics import Diagnostics
from .model import COMM_KINDS, ExecutionTrace, Rank
from .options import Options
from .validate.findings import ERROR, WARNING
from .writers import chakra

# The validator's checks that look at one rank's nodes only.
PER_RANK_CHECKS = ("graph", "attributes", "nodes", "pipeline", "timing")


def convert(fmt: per_rank.PerRankFormat, paths: list[Path], output: Path, options: Options,
            diagnostics: Diagnostics, finish_read) -> ExecutionTrace:
    """Read `paths` and write the Chakra set `output`; returns the model (ranks as skeletons
    when the workers wrote them). `finish_read(trace)` does what `api.read` does after a load."""
    with per_rank.start_workers(fmt, paths, options) as workers:
        trace = workers.keep_parts(diagnostics).trace
        checked = workers.each_rank(_finish_and_check, (replace(trace, ranks={}), options), "checking")
        _record_demoted(trace, checked)
        trace.ranks = {facts.rank.rank: facts.rank for facts in checked}
        finish_read(trace)
        if all(facts.clean for facts in checked) and _clean(trace, options):
            warn_if_kept(trace, diagnostics)
            chakra.write_by_workers(trace, output, diagnostics, workers.each_rank)
            return trace
        trace.ranks = dict(zip(trace.ranks, workers.each_rank(_whole, None, "sending")))
    from .api import write  # any finding: gated and written here, as a local run does

    write(trace, output, "chakra", options, diagnostics)
    return trace


class RankFacts:
    """What a worker tells about one finished rank: its skeleton, the collectives it demoted."""

    def __init__(self, rank: Rank, clean: bool, demoted: int, first: str):
        self.rank, self.clean, self.demoted, self.first = rank, clean, demoted, first


def _finish_and_check(rank: Rank, shell_and_options) -> RankFacts:
    shell, options = shell_and_options
    one = replace(shell, ranks={rank.rank: rank}, metadata={}, assumptions=[])
    demoted = demote_one_rank_collectives(one)
    first = one.metadata[KEPT]["first"] if demoted else ""
    return RankFacts(skeleton(rank), _clean_rank(one, options), demoted, first)


def _clean_rank(one: ExecutionTrace, options: Options) -> bool:
    from .validate import _checks
    from .validate.context import build_context

    ctx = build_context(one, options)
    for name, check in _checks():
        if name in PER_RANK_CHECKS and any(_reported(f) for f in check(ctx) or ()):
            return False
    return True


def _clean(trace: ExecutionTrace, options: Options) -> bool:
    from .validate import validate_trace

    return not any(_reported(f) for f in validate_trace(trace, options).findings)


def _reported(finding) -> bool:
    """A finding `validate.gate` turns into an error or a warning."""
    return finding.severity in (ERROR, WARNING) or finding.code == "I024"


def skeleton(rank: Rank) -> Rank:
    """The rank's sends, receives and collectives, each depending on the nearest earlier ones
    its dependencies lead to through compute: what other ranks and the dry run need."""
    through: dict[int, list[int]] = {}  # compute node -> the comm nodes it waits for
    comm: set[int] = set()
    nodes = []
    for node in rank.nodes:
        deps = []
        for dep in chain(node.deps, node.ctrl_deps):
            deps.extend((dep,) if dep in comm else through.get(dep, (dep,)))
        deps = list(dict.fromkeys(deps))
        if node.kind in COMM_KINDS:
            comm.add(node.id)
            nodes.append(replace(node, deps=deps, ctrl_deps=[]))
        else:
            through[node.id] = deps
    return replace(rank, nodes=nodes)


def _whole(rank: Rank, _) -> Rank:
    return rank


def _record_demoted(trace: ExecutionTrace, checked: list[RankFacts]) -> None:
    """What `demote_one_rank_collectives` records when it runs on the whole model."""
    demoted = [facts for facts in checked if facts.demoted]
    if demoted:
        trace.assume(ASSUMPTION)
        trace.metadata[KEPT] = {"count": sum(f.demoted for f in demoted), "first": demoted[0].first}
