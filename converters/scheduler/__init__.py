"""The timeline scheduler: start and end times for traces that carry none.

    from converters.scheduler import schedule, Deadlock
    timeline = schedule(trace, options)      # Timeline(kind="scheduled"), summary filled in

The rules are ASTRA-sim's (see engine.py); durations of communication come from the network
cost model (see network.py, `--network FILE.toml`). When the ranks cannot all finish,
`schedule` raises `Deadlock` (an `InputError`), whose `blocked` and `chain` say which ranks
wait in which node for whom; the validator uses it as its deadlock dry run.
"""

from __future__ import annotations

from ..gc_pause import paused_gc
from ..model import ExecutionTrace
from ..options import Options
from ..timeline import Timeline
from .deadlock import Deadlock, Wait
from .engine import Engine
from .network import Network, load_network
from .quotient import find_quotient
from .summary import summarize

__all__ = ["schedule", "dry_run", "Deadlock", "Wait", "Network", "load_network", "network_for"]


def network_for(options: Options | None) -> Network:
    options = options or Options()
    return load_network(options.network, options.network_overrides)


def schedule(trace: ExecutionTrace, options: Options | None = None, network: Network | None = None) -> Timeline:
    """Schedule every node of every rank; raise Deadlock when that is impossible."""
    network = network or network_for(options)
    # The loop and the summary allocate millions of small objects that all stay alive until
    # they end; Python's cyclic garbage collector would rescan them (and every node of the
    # trace) again and again: slower than linear growth, half the time of a large set's stats.
    with paused_gc():
        engine, starts, ends, cause = _run(trace, network)
        summary = summarize(engine, starts, ends, cause)
        by_rank_start: dict[int, list[int]] = {}
        by_rank_end: dict[int, list[int]] = {}
        for r in range(len(engine.ranks)):
            # Ranks of one class get the same list objects: read them, never change them in place.
            for rank in engine.class_members(r):
                by_rank_start[rank] = starts[r]
                by_rank_end[rank] = ends[r]
        representatives = len(engine.ranks)
        # The engine's tables (several lists per rank) are freed here, while the collector is
        # off: left alive, the first collection after the pause would walk every one of them
        # (a sixth of the time of a 1024-rank job whose ranks all differ).
        del engine, cause
    by_rank_start = dict(sorted(by_rank_start.items()))
    by_rank_end = dict(sorted(by_rank_end.items()))
    parameters = network.describe()
    parameters["representatives"] = representatives
    return Timeline(by_rank_start, by_rank_end, "scheduled", summary, parameters)


def dry_run(trace: ExecutionTrace, options: Options | None = None, network: Network | None = None) -> None:
    """Run the schedule only to learn whether every node can run: raise what `schedule` raises
    (Deadlock, with the same ranks and chain, or InputError), else return nothing.

    The loop still needs the network's costs: which collective a rank issues first, and so
    which instances meet, can depend on when nodes end. What it skips is the timeline: the
    summary (breakdowns, traffic, critical path) and the per-rank tables.
    """
    network = network or network_for(options)
    with paused_gc():  # as in schedule(): the loop's objects all stay alive until it ends
        engine, *_ = _run(trace, network, timeline=False)
        del engine, _  # freed while the collector is off (see schedule())


def _run(trace: ExecutionTrace, network: Network, timeline: bool = True):
    """Run one representative per role when that is exact (quotient.py), else every rank.

    A deadlock found by the representatives is re-run on every rank so that the report names
    real ranks and nodes. `timeline=False`: only whether every rank finishes (Engine's).
    """
    quotient = find_quotient(trace, max(trace.ranks, default=0) + 1 if network.uses_ring() else None)
    if quotient is not None:
        engine = Engine(trace, network, quotient, timeline=timeline)
        try:
            return (engine, *engine.run())
        except Deadlock:
            pass
    engine = Engine(trace, network, timeline=timeline)
    return (engine, *engine.run())
