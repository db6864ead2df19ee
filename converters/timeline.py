"""Start and end times for every node of every rank, kept beside the model.

A `Timeline` is per-rank lists aligned with `Rank.nodes` (index i = the i-th node), so ranks
that share one node list still get their own times. It comes either from the input's own
measurements (`trace.timing == "measured"`) or from the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import ExecutionTrace


@dataclass
class Timeline:
    starts: dict[int, list[int]]  # rank -> start ns per node, in node order
    ends: dict[int, list[int]]  # rank -> end ns per node
    kind: str  # "measured" or "scheduled"
    summary: dict[str, Any] = field(default_factory=dict)  # iteration time, per-rank breakdown ...
    parameters: dict[str, Any] = field(default_factory=dict)  # network parameters used, if scheduled

    @property
    def end_ns(self) -> int:
        return max((max(e) for e in self.ends.values() if e), default=0)


def measured_timeline(trace: ExecutionTrace) -> Timeline:
    """The times the input recorded (every node has `start_ns`)."""
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for rank in trace.sorted_ranks():
        s = [n.start_ns or 0 for n in rank.nodes]
        starts[rank.rank] = s
        ends[rank.rank] = [b + n.duration_ns for b, n in zip(s, rank.nodes)]
    return Timeline(starts, ends, "measured")


def timeline_for(trace: ExecutionTrace, options=None) -> Timeline:
    """Measured times when the input has them, otherwise a schedule over all ranks."""
    if trace.timing == "measured":
        return measured_timeline(trace)
    from .scheduler import schedule

    return schedule(trace, options)
