"""Start and end times for every node of every rank, kept beside the model.

A `Timeline` is per-rank lists aligned with `Rank.nodes` (index i = the i-th node), so ranks
that share one node list still get their own times. It comes either from the input's own
measurements (`trace.timing == "measured"`), from a model the builder already timed
(`"modelled"`: OptimusPrime logs give per-layer totals, not timestamps) or from the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import ExecutionTrace


@dataclass
class Timeline:
    starts: dict[int, list[int]]  # rank -> start ns per node, in node order
    ends: dict[int, list[int]]  # rank -> end ns per node
    kind: str  # "measured", "modelled" or "scheduled"
    summary: dict[str, Any] = field(default_factory=dict)  # iteration time, per-rank breakdown ...
    parameters: dict[str, Any] = field(default_factory=dict)  # network parameters used, if scheduled

    @property
    def end_ns(self) -> int:
        return max((max(e) for e in self.ends.values() if e), default=0)


def measured_timeline(trace: ExecutionTrace) -> Timeline:
    """The times the trace carries (every node has `start_ns`): measured, or modelled by its builder."""
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for rank in trace.sorted_ranks():
        s = [n.start_ns or 0 for n in rank.nodes]
        starts[rank.rank] = s
        ends[rank.rank] = [b + n.duration_ns for b, n in zip(s, rank.nodes)]
    return Timeline(starts, ends, "modelled" if trace.timing == "modelled" else "measured")


def timeline_for(trace: ExecutionTrace, options=None) -> Timeline:
    """The trace's own times when it has them, otherwise a schedule over all ranks."""
    if trace.timing in ("measured", "modelled"):
        return measured_timeline(trace)
    from .scheduler import schedule

    return schedule(trace, options)
