"""Megatron per-rank op logs -> the model (FORMATS.md §2).

Each logged op becomes one node on its rank, with its measured start (timestamp − duration;
the timestamp is the op's end) and duration:

- get_batch, forward_step, backward_step, optimizer_step (and unknown ops): COMPUTE;
- send_/recv_forward, send_/recv_backward: SEND/RECV with the peer stage's rank from the layout
  and a tag from (iteration, microbatch, direction), so both sides of a transfer agree;
- dp_allreduce, exp_dp_allreduce, ep_allreduce: COLLECTIVE in the DP, expert-DP and embedding
  (first and last stage) groups;
- every sub-operation: a COLLECTIVE with `parent` = its step, its own measured time.

Dependencies follow program order per rank. A fused exchange (two lines with the same
timestamp and duration) becomes a SEND and a RECV that both follow the previous op and that the
next op waits for: never a send-then-recv chain, which would invent a deadlock. Sub-operations
start with their step (they depend on the step's predecessor, chained among themselves) and
the next op waits only for the step itself.
"""

from __future__ import annotations

import functools
import operator
from collections import defaultdict
from dataclasses import dataclass, field, replace
from itertools import repeat
from math import prod
from pathlib import Path

from ..diagnostics import Diagnostics, InputError
from ..gc_pause import paused_gc
from ..model import NO_CTRL_DEPS, CollType, ExecutionTrace, Node, NodeKind, Parallel, Rank, SharedArgs
from ..options import Options
from ..readers.megatron_log import OpRecord, SubOpKind, SubOps, read_file
from . import per_rank
from .layout import Layout

COMPUTE_OPS = ("get_batch", "forward_step", "backward_step", "optimizer_step")
# op -> (kind, tag direction: 0 activations / 1 gradients, peer stage offset)
P2P_OPS = {
    "send_forward": (NodeKind.SEND, 0, +1),
    "recv_forward": (NodeKind.RECV, 0, -1),
    "send_backward": (NodeKind.SEND, 1, -1),
    "recv_backward": (NodeKind.RECV, 1, +1),
}
# op -> group kind of the model (Layout.members kinds)
COLLECTIVE_OPS = {"dp_allreduce": "dp", "exp_dp_allreduce": "dp_ep", "ep_allreduce": "embedding"}
FINALIZE_OPS = ("dp_allreduce", "exp_dp_allreduce", "ep_allreduce", "optimizer_step")
FUSED_PAIRS = {
    frozenset(("send_forward", "recv_backward")): "send_forward_recv_backward",
    frozenset(("send_backward", "recv_forward")): "send_backward_recv_forward",
}
# The log's group names -> the model's group kinds. "ep" in these logs is the EMBEDDING group.
LOG_GROUPS = {
    "tp": "tp", "dp": "dp", "pp": "pp", "exp": "ep", "exp_dp": "dp_ep",
    "ep": "embedding", "pep": "pos_embedding",
}
COMM_FUNCS = {
    "allreduce": CollType.ALL_REDUCE, "all_reduce": CollType.ALL_REDUCE,
    "allgather": CollType.ALL_GATHER, "all_gather": CollType.ALL_GATHER,
    "all_to_all": CollType.ALL_TO_ALL, "alltoall": CollType.ALL_TO_ALL,
    "reduce_scatter": CollType.REDUCE_SCATTER, "reducescatter": CollType.REDUCE_SCATTER,
    "broadcast": CollType.BROADCAST,
}
DTYPE_BYTES = {
    "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1,
    "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
MAX_RANKS = 1 << 20
MAX_TAG = (1 << 31) - 1  # Chakra's comm_tag is an int32
MAX_BYTES = (1 << 63) - 1  # Chakra's comm_size is an int64
# Timestamps are printed with 0.01 ms resolution: closer than this is "the same time".
STAMP_TOLERANCE_NS = 10_000


def load(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    return per_rank.run(MEGATRON, paths, options, diagnostics)


# ---------------------------------------------------------------- per file: what the other ranks need to know

@dataclass
class RankSurvey:
    """What one rank's records tell the cross-rank plan; small whatever the log's length.

    `summary` holds header records (no sub-operations beyond one per group) that answer every
    question the layout inference asks: the first iteration's ops in order, one record of each
    other op, the sub-operation groups seen.
    """

    first: OpRecord
    summary: list[OpRecord]
    # first measured start (sub-operations included), before any origin, with the sub-operations'
    # stamps read as end times and as start times: the file's reading is known only when all of
    # its ranks are (a log shared among workers)
    earliest_as_end_ns: int
    earliest_as_start_ns: int
    max_forward_batch: int | None = None
    max_p2p_batch: int | None = None
    ops: set[str] = field(default_factory=set)  # in the summary
    groups: set[str | None] = field(default_factory=set)  # sub-operation groups in the summary

    def earliest_ns(self, reading: str) -> int:
        """The first measured start when sub-operation stamps are `reading` ("end" or "start") times."""
        return self.earliest_as_end_ns if reading == "end" else self.earliest_as_start_ns


@dataclass
class FileSurvey:
    """One input file read: its ranks' surveys, plus (in this process only) the records themselves."""

    file: str  # the name as given (what messages and node sources say)
    path: str  # where to read it again (absolute when a worker elsewhere reads it)
    counts: tuple[int, int, int]  # sub-operations, and those outside their step read as end / start times
    ranks: dict[int, RankSurvey]
    simulation: OpRecord | None  # the file's first description=simulation line (scaling mode)
    problem: InputError | None  # the first line whose stage_id disagrees with its rank's first line
    diagnostics: Diagnostics
    records: list[OpRecord] | None = None
    share: tuple[int, int] | None = None  # (k, n): the survey of the file's ranks r with r % n == k

    @property
    def reading(self) -> tuple[str, str]:
        """Whether the file's sub-operation stamps are end or start times, and why (whole files only)."""
        return reading_of_counts(*self.counts)


def survey_file(path: Path, options: Options, name: str, share: tuple[int, int] | None = None) -> FileSurvey:
    """Read one log (the per-file phase's first half): the survey, with its records kept.

    `share` (k, n): the survey of the ranks r with r % n == k only, so that n workers can share
    one log that holds several ranks, each parsing its own ranks' lines (read_file). What
    describes the whole file (the sub-operation reading, a scaling-mode line, the first line
    whose stage is wrong) is then made of its shares' by the plan (`whole_files`). The file's
    warnings are in share 0 only (every share reads the last line, which may be cut off), so
    they are said once."""
    diagnostics = Diagnostics()
    with paused_gc():
        records = read_file(path, diagnostics, options.strict, name=name, share=share)
        if share is not None:
            k, n = share
            records = [record for record in records if record.rank % n == k]  # (the lines every share parses)
            if k:
                diagnostics = Diagnostics()
        survey = survey_records(name, str(path), records, diagnostics)
    survey.share = share
    return survey


def whole_files(surveys: list[FileSurvey]) -> list[FileSurvey]:
    """The surveys with the shares of each file (consecutive, share 0 first) made one: its
    ranks, and what describes the file (counts summed, the first scaling-mode line, the first
    line whose stage is wrong), as a survey of the whole file would have them."""
    whole: list[FileSurvey] = []
    for survey in surveys:
        if survey.share is not None and survey.share[0] > 0:
            whole[-1] = _joined(whole[-1], survey)
        else:
            whole.append(survey)
    return whole


def _joined(one: FileSurvey, other: FileSurvey) -> FileSurvey:
    """Two shares of a file's survey as one (the records are left where they were; the warnings
    are share 0's, which the runner merged before the plan)."""
    ranks = dict(sorted({**one.ranks, **other.ranks}.items(), key=lambda item: item[1].first.line))
    return replace(one, counts=tuple(map(operator.add, one.counts, other.counts)), ranks=ranks,
                   simulation=_first_line(one.simulation, other.simulation),
                   problem=_first_line(one.problem, other.problem), records=None, share=None)


def _first_line(one, other):
    """Of two records or errors (either may be None), the one of the earlier line."""
    if one is None or other is None:
        return other if one is None else one
    return min(one, other, key=_line_of)


def _line_of(found) -> int:
    return found.line if isinstance(found, OpRecord) else int(found.where.rsplit(":", 1)[1])


def split(survey: FileSurvey) -> list[FileSurvey]:
    """One survey per rank of the file, each with that rank's records (`per_rank.LetGo` builds
    a file's ranks one at a time from these), in rank order."""
    if len(survey.ranks) < 2:
        return [survey]
    records: dict[int, list[OpRecord]] = defaultdict(list)
    for record in survey.records:
        records[record.rank].append(record)
    return [replace(survey, ranks={r: survey.ranks[r]}, records=records[r]) for r in sorted(survey.ranks)]


def survey_records(name: str, path: str, records: list[OpRecord], diagnostics: Diagnostics) -> FileSurvey:
    ranks: dict[int, RankSurvey] = {}
    iterating: set[int] = set()  # ranks still in their first iteration
    simulation = problem = None
    for record in records:
        survey = ranks.get(record.rank)
        if survey is None:
            survey = ranks[record.rank] = RankSurvey(_header(record), [], record.start_ns, record.start_ns)
            iterating.add(record.rank)
        elif survey.first.stage != record.stage and problem is None:
            problem = InputError(
                record.where,
                f"rank {record.rank} logs stage_id {record.stage} here but stage_id {survey.first.stage} at {survey.first.where}",
            )
        _survey_record(survey, record, record.rank in iterating)
        if record.op == "optimizer_step":
            iterating.discard(record.rank)
        if simulation is None and record.description == "simulation":
            simulation = _header(record)
    return FileSurvey(name, path, subop_counts(records), ranks, simulation, problem, diagnostics, records)


def _survey_record(survey: RankSurvey, record: OpRecord, first_iteration: bool) -> None:
    subs = record.sub_ops
    start = record.end_ns - record.duration_ns
    as_end, as_start = min(survey.earliest_as_end_ns, start), min(survey.earliest_as_start_ns, start)
    if subs:
        first_stamp, _, longest = subs.bounds
        as_start = min(as_start, first_stamp)
        if first_stamp - longest < as_end:  # else no sub-operation starts before `as_end`: skip them
            as_end = min(as_end, *_sub_starts(subs, "end"))
    survey.earliest_as_end_ns, survey.earliest_as_start_ns = as_end, as_start
    if record.op == "forward_step":
        survey.max_forward_batch = _larger(survey.max_forward_batch, record.batch)
    if record.op in P2P_OPS:
        survey.max_p2p_batch = _larger(survey.max_p2p_batch, record.batch)
    new_groups = {group: index for group, index in _first_of_each_group(subs.kinds).items() if group not in survey.groups}
    if first_iteration or new_groups or record.op not in survey.ops:
        survey.summary.append(_header(record, list(new_groups.values())))
        survey.ops.add(record.op)
        survey.groups.update(new_groups)


# id of a sequence of kinds (the reader shares one tuple per sequence) -> (the sequence, group -> the position
# of its first sub-operation); the sequence is kept, so its id stays its own
_FIRST_OF_EACH_GROUP: dict[int, tuple[tuple, dict[str | None, int]]] = {}


def _first_of_each_group(kinds: tuple[SubOpKind, ...]) -> dict[str | None, int]:
    """Group -> the position of its first sub-operation in a sequence (steps repeat a few sequences)."""
    known = _FIRST_OF_EACH_GROUP.get(id(kinds))
    if known is not None:
        return known[1]
    first: dict[str | None, int] = {}
    for index, kind in enumerate(kinds):
        first.setdefault(kind.group, index)
    if len(_FIRST_OF_EACH_GROUP) >= 4096:
        _FIRST_OF_EACH_GROUP.clear()
    _FIRST_OF_EACH_GROUP[id(kinds)] = (kinds, first)
    return first


def _larger(old: int | None, new: int) -> int:
    return new if old is None else max(old, new)


def _header(record: OpRecord, keep: list[int] | None = None) -> OpRecord:
    """The record without its sub-operations (or with those at the positions given)."""
    if not record.sub_ops:
        return record  # records are never changed: it can be shared
    return record.with_sub_ops(record.sub_ops.only(keep or []))


@dataclass
class Plan:
    """The cross-rank decisions every rank's build needs: small, sent to every worker."""

    layout: Layout
    inferred: str
    origins: dict[int, int]
    readings: dict[str, tuple[str, str]]
    tag_stride: int
    microbatches: int
    simulation: OpRecord | None


def plan(surveys: list[FileSurvey], paths: list[Path], options: Options, diagnostics: Diagnostics) -> Plan:
    """The cross-rank phase before any node is made: checks across files, layout, clocks, tags."""
    surveys = whole_files(surveys)
    if not any(survey.ranks for survey in surveys):
        raise InputError(str(paths[0]), "no op lines found; expected rank:<r>:<op>(key=value,...)")
    by_rank: dict[int, RankSurvey] = {}
    for survey in surveys:
        _check_ranks_once(survey, by_rank)
        by_rank.update(survey.ranks)
    summaries = {rank_id: rank.summary for rank_id, rank in by_rank.items()}
    layout, inferred, doubts = infer_layout(summaries, options)
    if doubts:
        _warn_layout_guess(layout, doubts, summaries, diagnostics)
    simulation = next((survey.simulation for survey in surveys if survey.simulation is not None), None)
    earliest = {rank_id: rank.earliest_ns(survey.reading[0]) for survey in surveys for rank_id, rank in survey.ranks.items()}
    shared = min(earliest.values())
    return Plan(
        layout=layout, inferred=inferred,
        origins=earliest if simulation is not None else {rank_id: shared for rank_id in by_rank},
        readings={survey.file: survey.reading for survey in surveys if survey.ranks},
        tag_stride=2 * (1 + _largest(rank.max_p2p_batch for rank in by_rank.values())),
        microbatches=1 + _largest(rank.max_forward_batch for rank in by_rank.values()),
        simulation=simulation,
    )


def _largest(values) -> int:
    """The largest of the values that are not None; 0 when there are none."""
    return max((v for v in values if v is not None), default=0)


def _check_ranks_once(survey: FileSurvey, seen: dict[int, RankSurvey]) -> None:
    """Each rank in one file only, on one stage: the first offending line of this file is reported."""
    problems = [] if survey.problem is None else [survey.problem]
    for rank_id, rank in survey.ranks.items():
        earlier = seen.get(rank_id)
        if earlier is not None:
            problems.append(InputError(
                rank.first.where,
                f"rank {rank_id} also appears in {earlier.first.file} (line {earlier.first.line}); give each rank's log once",
            ))
    if problems:
        raise min(problems, key=_line_of)


# ---------------------------------------------------------------- per file: the nodes of its ranks

@dataclass
class RankPart:
    """One rank built: its nodes, and what the merge replays in rank order (groups, assumptions, warnings)."""

    rank: Rank
    group_uses: list[tuple[str, tuple[int, ...]]]  # local group id i+1 = the i-th (kind, members) used
    assumptions: list[str]
    diagnostics: Diagnostics
    p2p: list[int]  # positions of the sends and receives in the rank's nodes (a few of them)

    def p2p_nodes(self) -> list[Node]:
        nodes = self.rank.nodes
        return [nodes[i] for i in self.p2p]


def build_file(survey: FileSurvey, plan: Plan, options: Options) -> list[RankPart]:
    """The nodes of every rank of one file (the per-file phase's second half); re-reads the file
    when the survey came from another process and left its records there."""
    records = survey.records
    if records is None:
        records = read_file(Path(survey.path), Diagnostics(), options.strict, name=survey.file)
    survey.records = None
    by_rank: dict[int, list[OpRecord]] = defaultdict(list)
    for record in records:
        by_rank[record.rank].append(record)
    del records
    parts = []
    for rank_id in sorted(by_rank):
        builder = _RankBuilder(plan.layout, plan.readings, plan.tag_stride, Diagnostics())
        rank = builder.build(rank_id, by_rank.pop(rank_id), plan.origins[rank_id])
        parts.append(RankPart(rank, builder.group_uses, builder.assumptions, builder.diagnostics, builder.p2p))
    return parts


# ---------------------------------------------------------------- across ranks: the model
#
# The merge is two halves, so that ranks can be finished where they were built (per_rank.py):
# `join` makes everything that crosses ranks from each part's small summary (groups, assumptions,
# warnings, where sends start, which peers are absent), `finish` applies it to one rank's nodes.

@dataclass
class RankSummary:
    """What the join needs from one rank's part: small whatever the rank's length."""

    rank: int
    group_uses: list[tuple[str, tuple[int, ...]]]
    assumptions: list[str]
    diagnostics: Diagnostics
    sends: list[tuple[int | None, int | None, int | None]]  # (peer, tag, start_ns) of each send, in node order
    peers: set[int]  # peers of its sends and receives


@dataclass
class Joined:
    """The cross-rank result: the model without its ranks, and what each rank's nodes need."""

    trace: ExecutionTrace
    group_ids: dict[int, dict[int, int]]  # rank -> local group id -> the trace's, where they differ
    send_starts: dict[int, dict[tuple, int | None]]  # receiver -> (sender, tag) -> the send's start
    waits: bool  # record receive waits (not in scaling mode)
    retime: bool  # drop the measured times (--retime on a scaling-mode log)


def summarize(part: RankPart) -> RankSummary:
    rank = part.rank
    sends, peers = [], set()
    for node in part.p2p_nodes():
        if node.kind is NodeKind.SEND:
            sends.append((rank.peer_of(node), node.tag, node.start_ns))
        if node.peer is not None:
            peers.add(rank.peer_of(node))
    return RankSummary(rank.rank, part.group_uses, part.assumptions, part.diagnostics, sends, peers)


def merge(plan: Plan, parts: list[RankPart], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    """The model from every rank's part, in rank order whatever order the parts came in."""
    parts = sorted(parts, key=lambda p: p.rank.rank)
    joined = join(plan, [summarize(part) for part in parts], options, diagnostics)
    for part in parts:
        joined.trace.ranks[part.rank.rank] = finish(part, joined)
    return joined.trace


def join(plan: Plan, summaries: list[RankSummary], options: Options, diagnostics: Diagnostics) -> Joined:
    """Everything of the model that is not one rank's nodes, from the ranks' summaries."""
    layout = plan.layout
    trace = ExecutionTrace()
    trace.parallel = Parallel(
        world=layout.world, tp=layout.tp, dp=layout.dp, pp=layout.pp, ep=layout.ep, microbatches=plan.microbatches,
    )
    trace.units = {"time": "ms (converted exactly to integer ns)", "size": "input__shape elements x dtype bytes"}
    trace.timing = "measured"
    if plan.inferred:
        trace.assume(plan.inferred)
    trace.assume("op timestamps are end times: start = timestamp - duration")
    scaling = plan.simulation is not None
    if scaling:
        _scaling_mode(trace)
    trace.time_origin_ns = min(plan.origins.values())
    if scaling:
        trace.metadata["rank_time_origins_ns"] = {str(r): plan.origins[r] for r in sorted(plan.origins)}
    _record_readings(plan.readings, trace)
    summaries = sorted(summaries, key=lambda s: s.rank)
    joined = Joined(trace, {}, {}, waits=not scaling, retime=bool(scaling and options.retime))
    for summary in summaries:
        joined.group_ids[summary.rank] = _adopt(trace, summary, diagnostics)
    if joined.waits:
        joined.send_starts = _send_starts(summaries)
    present = {summary.rank for summary in summaries}
    _note_absent_peers(trace, sorted(set().union(*(s.peers for s in summaries)) - present), diagnostics)
    if options.retime and not scaling:
        diagnostics.warn(
            "megatron-retime-ignored",
            "--retime applies only to scaling-mode logs (description=simulation); kept the measured times",
        )
    if scaling:
        missing = _missing_ranks(trace, summaries, present)
        _warn_scaling_mode(plan.simulation, missing, options, diagnostics)
        if options.retime:
            _check_complete_for_retime(missing)
            trace.timing = "none"
            trace.assume("measured times dropped (--retime): the scheduler re-times this scaling-mode log")
    return joined


def finish(part: RankPart, joined: Joined) -> Rank:
    """One rank's nodes with the trace's group ids, their receive waits, and (--retime) no times."""
    rank = part.rank
    ids = joined.group_ids.get(rank.rank)
    if ids:
        for node in rank.nodes:
            if node.group is not None:
                node.group = ids[node.group]
    if joined.waits:
        _record_receive_waits(rank, part.p2p_nodes(), joined.send_starts.get(rank.rank, {}))
    if joined.retime:
        for node in rank.nodes:
            node.start_ns = None
    return rank


def _adopt(trace: ExecutionTrace, summary: RankSummary, diagnostics: Diagnostics) -> dict[int, int]:
    """Add one rank's groups (they get the trace's ids in the order of first use, rank by rank, as
    one builder would have made them), assumptions and warnings; the local ids that change."""
    ids = {}
    for local, (kind, members) in enumerate(summary.group_uses, 1):
        group = trace.add_group(kind, members)
        if not group.name:
            group.name = f"{kind}#{group.id}"
        ids[local] = group.id
    for sentence in summary.assumptions:
        trace.assume(sentence)
    diagnostics.merge(summary.diagnostics)
    return ids if any(local != gid for local, gid in ids.items()) else {}


MEGATRON = per_rank.PerRankFormat(survey_file, plan, build_file, merge, summarize, join, finish, small_records=True,
                                   split=split, shares=True)
PER_RANK_FORMAT = MEGATRON  # what `converters.api` looks for to let workers write a Chakra set or draw a timeline


# ---------------------------------------------------------------- grouping and checks

def subop_counts(records: list[OpRecord]) -> tuple[int, int, int]:
    """How many sub-operations the records have, and how many would lie outside their step with
    their timestamps read as end times and as start times (`reading_of_counts` decides).

    A step whose sub-operations' bounds (SubOps.bounds: a stamp minus the longest duration is at
    or before every start read from end times; plus it, at or after every end read from start
    times) fit inside it under a reading has none outside it: only the others are counted one by one.
    """
    total = outside_as_end = outside_as_start = 0
    for record in records:
        subs = record.sub_ops
        if not subs:
            continue
        first_stamp, last_stamp, longest = subs.bounds
        low, high = record.end_ns - record.duration_ns - STAMP_TOLERANCE_NS, record.end_ns + STAMP_TOLERANCE_NS
        total += len(subs)
        if not (first_stamp - longest >= low and last_stamp <= high):
            outside_as_end += _outside(_sub_starts(subs, "end"), subs.stamps, low, high)
        if first_stamp < low:
            outside_as_start += _outside(subs.stamps, list(map(operator.add, subs.stamps, subs.durations)), low, high)
        elif last_stamp + longest > high:  # none starts early: count the late ends alone
            outside_as_start += sum(map(operator.lt, repeat(high), map(operator.add, subs.stamps, subs.durations)))
    return total, outside_as_end, outside_as_start


def reading_of_counts(total: int, outside_as_end: int, outside_as_start: int) -> tuple[str, str]:
    """Whether a file's sub-operation timestamps are end or start times, and why: the reading
    that puts fewer of its `total` sub-operations outside their step; a tie keeps "end" (what
    FORMATS.md §2 found in the real sample)."""
    if total == 0:
        return "end", "no sub-operations"
    if outside_as_start > outside_as_end:
        return "end", f"read as start times, {outside_as_start} of {total} sub-operations would end outside their step"
    if outside_as_end > outside_as_start:
        return "start", f"read as end times, {outside_as_end} of {total} sub-operations would start outside their step"
    return "end", f"both readings fit all {total} sub-operations; end times assumed (the tracer's usual stamp)"


def _record_readings(readings: dict[str, tuple[str, str]], trace: ExecutionTrace) -> None:
    """Per file in the metadata; one sentence per reading (listing a few files) in the assumptions."""
    trace.metadata["subop_timestamps"] = {Path(name).name: reading for name, (reading, _) in sorted(readings.items())}
    for reading in ("end", "start"):
        files = [(Path(name).name, why) for name, (r, why) in sorted(readings.items()) if r == reading and why != "no sub-operations"]
        if not files:
            continue
        names = ", ".join(name for name, _ in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        trace.assume(f"sub-operation timestamps read as {reading} times in {names} ({files[0][1]})")


def _scaling_mode(trace: ExecutionTrace) -> None:
    """Say in the trace what a scaling-mode log (description=simulation) means."""
    trace.metadata["scaling_mode"] = True
    trace.metadata["cross_rank_timing"] = "meaningless: ranks ran one after another on one GPU"
    trace.assume(
        "scaling-mode log: each rank keeps its own timeline starting at 0; communication durations "
        "are not measurements and cross-rank timing means nothing"
    )


def _warn_scaling_mode(first: OpRecord, missing: list[int], options: Options, diagnostics: Diagnostics) -> None:
    """Say what a scaling-mode log's times mean, and how to re-time it when that is possible."""
    if options.retime:
        advice = ""  # re-timed, or refused with an error naming the missing ranks
    elif missing:
        advice = (f"; to re-time it with the scheduler (--retime), give the logs of every rank "
                  f"(missing ranks {_rank_list(missing)})")
    else:
        advice = "; use --retime to re-time it with the scheduler"
    diagnostics.warn(
        "megatron-scaling-mode",
        f"{first.where}: scaling-mode log (description=simulation): ranks ran one after another, so "
        "communication times are not measurements and ranks' timestamps are not on one timeline" + advice,
    )


def _sub_starts(subs: SubOps, reading: str):
    """The sub-operations' starts when their stamps are read as `reading` ("end" or "start") times."""
    return list(map(operator.sub, subs.stamps, subs.durations)) if reading == "end" else subs.stamps


def _outside(starts, ends, low: int, high: int) -> int:
    """How many of the spans start before `low` or end after `high` (most steps: none, seen at once)."""
    if min(starts) >= low and max(ends) <= high:
        return 0
    return sum(map(operator.or_, map(operator.lt, starts, repeat(low)), map(operator.gt, ends, repeat(high))))


# ---------------------------------------------------------------- layout

def infer_layout(by_rank: dict[int, list[OpRecord]], options: Options) -> tuple[Layout, str, list[str]]:
    """The rank layout, from options where given and from the logs otherwise.

    Megatron places ranks TP fastest: stage = rank // (tp·dp). The smallest tp·dp that puts
    every rank on its logged stage_id is used (the whole set of ranks when 0..N-1 are all
    there); TP > 1 only when TP sub-operations appear (a guess: TP 1 runs log them too, so it is
    warned about), EP > 1 only when expert ones do; pp is the fewest stages the pipeline ops and
    the 1F1B warmup allow.
    Returns the layout, a sentence saying what was inferred (empty when nothing was), and the
    doubts: what the ranks leave open that changes this set's peers or groups.
    """
    stages = {r: recs[0].stage for r, recs in by_rank.items()}
    first = {r: recs[0] for r, recs in by_rank.items()}
    ops = [rec for recs in by_rank.values() for rec in recs]
    subs = [kind for rec in ops for kind in rec.sub_ops.kinds]
    tp_seen = any(sub.group == "tp" for sub in subs)
    ep_seen = any(sub.group == "exp" for sub in subs) or any(rec.op == "exp_dp_allreduce" for rec in ops)
    embedding_seen = any(rec.op == "ep_allreduce" for rec in ops) or any(sub.group == "ep" for sub in subs)
    for r, stage in stages.items():
        if stage < 0:
            raise InputError(first[r].where, f"stage_id must be at least 0, found {stage}")
        if r >= MAX_RANKS or stage >= MAX_RANKS:
            raise InputError(first[r].where, f"rank {r} / stage_id {stage} is beyond the {MAX_RANKS} ranks et-convert handles")

    pp_floor, pp_pinned, pp_from_warmup = _pipeline_floor(by_rank)
    # TP sub-operations need tp > 1, so tp*dp at least 2 (2·dp when --dp is given)
    minimum = (2 * (options.dp or 1)) if tp_seen and not options.tp else 1
    found = _ranks_per_stage(stages, options, pp_floor, minimum)
    if found is None:
        r = max(stages)
        given = " ".join(f"--{k} {getattr(options, k)}" for k in ("tp", "dp", "pp") if getattr(options, k))
        raise InputError(
            first[r].where,
            f"rank {r} logs stage_id {stages[r]}, which no layout{' with ' + given if given else ''} allows "
            "(Megatron order: stage = rank // (tp*dp))",
        )
    per_stage, per_stage_pinned = found
    if options.tp:
        tp = options.tp
    elif options.dp:
        tp = per_stage // options.dp
    else:
        tp = _smallest_factor(per_stage) if tp_seen else 1
    dp = per_stage // tp
    ep = options.ep or (_smallest_factor(dp) if ep_seen else 1)
    pp = options.pp or pp_floor
    for r, stage in stages.items():
        if stage >= pp:
            raise InputError(first[r].where, f"rank {r} logs stage_id {stage}, but --pp is {pp}")
    layout = Layout(tp=tp, dp=dp, pp=pp, ep=ep)
    layout.check()
    doubts = []
    if not (options.tp and options.dp) and not per_stage_pinned:
        doubts.append(f"the ranks given only show tp*dp >= {per_stage}")
    if tp_seen and not (options.tp or options.dp):
        if tp > 1:  # the tracer logs the TP all-reduces whatever the TP size: their presence proves nothing
            doubts.append(f"tp {tp} read from the TP sub-operations, which tp=1 runs also log")
        others = [f"tp={t}, dp={per_stage // t}" for t in _divisors(per_stage) if t > tp]
        if others:
            doubts.append(f"tp*dp = {per_stage} could also be {' or '.join(others)}")
    if not options.pp and pp_from_warmup:
        doubts.append(pp_from_warmup)
    if not options.pp and not pp_pinned and embedding_seen:  # pp names the embedding group's last stage
        doubts.append(f"pp could be more than {pp} (no rank of the last stage is given)")
    guessed = [k for k in ("tp", "dp", "pp") if getattr(options, k) is None]
    if options.ep is None and ep_seen:
        guessed.append("ep")
    if not guessed:
        return layout, "", doubts
    return layout, (
        f"layout tp={tp}, dp={dp}, pp={pp}, ep={ep}: {', '.join(guessed)} inferred from the ranks' "
        "stage_id (stage = rank // (tp*dp)), their sub-operations, pipeline ops and 1F1B warmup; "
        "give --tp/--dp/--pp/--ep to set them"
    ), doubts


def _warn_layout_guess(layout: Layout, doubts: list[str], by_rank, diagnostics: Diagnostics) -> None:
    """Say on stderr which layout was guessed when the ranks allow others that change peers or groups."""
    file = by_rank[min(by_rank)][0].file
    expert = f", ep={layout.ep}" if layout.ep > 1 else ""
    diagnostics.warn(
        "megatron-layout-guess",
        f"{file}: layout guessed as tp={layout.tp}, dp={layout.dp}, pp={layout.pp}{expert}: {'; '.join(doubts)}; "
        f"give --tp/--dp/--pp{'/--ep' if expert else ''} to state it",
    )


def _pipeline_floor(by_rank: dict[int, list[OpRecord]]) -> tuple[int, bool, str]:
    """The fewest pipeline stages the ranks' ops allow, whether some rank pins that number, and
    (when the 1F1B warmup alone decided it) a sentence saying so.

    A rank that sends forward (or receives backward) has a next stage: pp >= s + 2; one with
    neither is the last stage: pp = s + 1, and nothing else counts. Without a last-stage rank,
    non-interleaved 1F1B warms up with W = min(pp - s - 1, M) forwards and runs one more forward
    before its first backward when W < M, so F forwards before the first backward give
    pp >= s + F, exactly s + F when F < M. Interleaved (vpp) or GPipe runs warm up longer, so a
    pp read from the warmup is a guess worth saying.
    """
    floor, last_stage = 1, None
    for recs in by_rank.values():
        stage = recs[0].stage
        if any(rec.op in ("send_forward", "recv_backward") for rec in recs):
            floor = max(floor, stage + 2)
        else:
            last_stage = stage if last_stage is None else max(last_stage, stage)
    if last_stage is not None:
        return max(floor, last_stage + 1), True, ""
    pinned, reason = False, ""
    for rank, recs in sorted(by_rank.items()):
        warmup = _forwards_before_first_backward(recs)
        if warmup is None:
            continue
        forwards, microbatches = warmup
        pinned = pinned or forwards < microbatches
        if recs[0].stage + forwards > floor:
            floor = recs[0].stage + forwards
            reason = (f"pp {floor} read from rank {rank}'s {forwards} forwards before its first backward "
                      "(non-interleaved 1F1B warmup)")
    return floor, pinned, reason


def _forwards_before_first_backward(records: list[OpRecord]) -> tuple[int, int] | None:
    """(forwards before the first backward, forwards) of the first iteration; None without a backward."""
    first_iteration = []
    for record in records:
        if record.op == "optimizer_step":
            break
        first_iteration.append(record.op)
    if "backward_step" not in first_iteration:
        return None
    before = first_iteration[: first_iteration.index("backward_step")]
    return before.count("forward_step"), first_iteration.count("forward_step")


def _ranks_per_stage(stages: dict[int, int], options: Options, pp_floor: int, minimum: int) -> tuple[int, bool] | None:
    """tp·dp and whether the ranks pin it: the given one, the whole set's when ranks 0..N-1 are
    all present (over at least `pp_floor` stages), else the smallest of at least `minimum` that
    fits (the smallest that fits at all when none of those does)."""
    def fits(k: int) -> bool:
        return all(r // k == s for r, s in stages.items())

    if options.tp and options.dp:
        return (options.tp * options.dp, True) if fits(options.tp * options.dp) else None
    step = options.tp or options.dp or 1  # tp*dp must be a multiple of the one given
    ranks = sorted(stages)
    if ranks == list(range(len(ranks))):
        count = options.pp or max(len(set(stages.values())), pp_floor)
        k = len(ranks) // count
        if len(ranks) % count == 0 and k % step == 0 and k >= minimum and fits(k):
            return k, True
    # rank // k == s  <=>  r // (s + 1) < k <= r // s: intersect the ranges of all ranks
    low = max(r // (s + 1) + 1 for r, s in stages.items())
    high = min((r // s for r, s in stages.items() if s > 0), default=None)
    for floor in (max(low, minimum), low):
        k = -(-floor // step) * step
        if high is None or k <= high:
            return k, high is not None and k + step > high
    return None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _smallest_factor(n: int) -> int:
    """The smallest divisor of n above 1 (1 when n is 1)."""
    for d in range(2, n + 1):
        if n % d == 0:
            return d
    return 1


def _members(layout: Layout, kind: str, rank: int) -> list[int]:
    if kind == "pos_embedding":  # Megatron's position-embedding group: the first stage
        return [layout.pp_members(rank)[0]]
    return layout.members(kind, rank)


# ---------------------------------------------------------------- nodes of one rank

@dataclass
class _RankBuilder:
    """One rank's nodes. Groups get local ids (the order of first use); the merge gives the trace's."""

    layout: Layout
    readings: dict[str, tuple[str, str]]
    tag_stride: int
    diagnostics: Diagnostics
    group_uses: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    _group_ids: dict[str, int] = field(default_factory=dict)  # kind -> local id (one group per kind per rank)
    # (group, comm_func, shape, dtype) of a sub-operation -> (coll, group id, size), when it warned of nothing
    _sub_comm: dict[tuple, tuple] = field(default_factory=dict)
    # (kinds, op, mg_state, stage) of a step's sub-operations -> each one's (name, args, coll, group id, size),
    # when they warned of nothing: a log repeats a few sequences in thousands of steps. The reader shares
    # one kinds tuple per sequence, so its id is the key (the value keeps it alive: the id stays its own).
    _sub_plans: dict[tuple, tuple[tuple, list[tuple]]] = field(default_factory=dict)
    p2p: list[int] = field(default_factory=list)  # positions of the sends and receives made

    def build(self, rank_id: int, records: list[OpRecord], origin: int) -> Rank:
        if rank_id >= self.layout.world:
            raise InputError(records[0].where, f"rank {rank_id} is outside the layout's {self.layout.world} ranks")
        coords = self.layout.coords(rank_id)
        rank = Rank(rank_id, coords={k: coords[k] for k in ("tp", "dp", "pp", "ep")}, source=Path(records[0].file).name)
        self.rank, self.origin, self.iteration = rank, origin, 0
        with paused_gc():  # many nodes that stay and form no cycles (gc_pause.py)
            self._add_ops(records)
        return rank

    def _add_ops(self, records: list[OpRecord]) -> None:
        """Every record's node (and its sub-operations'), in program order."""
        frontier: list[int] = []
        index = 0
        while index < len(records):
            record = records[index]
            partner = records[index + 1] if index + 1 < len(records) else None
            if partner is not None and _fused(record, partner):
                name = FUSED_PAIRS[frozenset((record.op, partner.op))]
                pair = [self._add_op(record, frontier, fused=name), self._add_op(partner, frontier, fused=name)]
                frontier = [node.id for node in pair]
                index += 2
            else:
                frontier = [self._add_op(record, frontier).id]
                index += 1
            if record.op == "optimizer_step":  # the next op belongs to the next iteration
                self.iteration += 1

    def _add_op(self, record: OpRecord, deps: list[int], fused: str | None = None) -> Node:
        node = Node(
            id=len(self.rank.nodes), name=_op_name(record), kind=NodeKind.COMPUTE,
            duration_ns=record.duration_ns, deps=list(deps), start_ns=record.start_ns - self.origin,
            source=record.where, args=_op_args(record, self.iteration),
        )
        if record.op not in FINALIZE_OPS:
            node.microbatch = record.batch
        if fused:
            node.args["fused"] = fused
        self.rank.nodes.append(node)
        if record.op in P2P_OPS:
            self._make_p2p(node, record)
        elif record.op in COLLECTIVE_OPS:
            self._make_collective(node, COLLECTIVE_OPS[record.op], CollType.ALL_REDUCE, record.shape, record.dtype, record.where)
        elif record.op not in COMPUTE_OPS:
            self.diagnostics.warn(
                f"megatron-unknown-op:{record.op}",
                f"{record.where}: {{count}} {record.op} op(s) are not known Megatron steps; drawn as compute",
            )
        self._add_sub_ops(node, record, deps)
        return node

    def _make_p2p(self, node: Node, record: OpRecord) -> None:
        kind, direction, offset = P2P_OPS[record.op]
        coords = self.layout.coords(self.rank.rank)
        peer_stage = coords["pp"] + offset
        if not 0 <= peer_stage < self.layout.pp:
            raise InputError(
                record.where,
                f"{record.op} on stage {coords['pp']} has no peer stage (pipeline has {self.layout.pp} stages; give --pp)",
            )
        node.kind = kind
        self.p2p.append(len(self.rank.nodes) - 1)  # the node was just appended
        node.peer = self.layout.rank_of(coords["tp"], coords["dp"], peer_stage)
        node.tag = self.iteration * self.tag_stride + 2 * record.batch + direction
        if not 0 <= node.tag <= MAX_TAG:
            raise InputError(record.where, f"batch_id {record.batch} gives a transfer tag outside 0..{MAX_TAG}")
        node.size = self._bytes(record.shape, record.dtype, record.where, "p2p")
        node.args["peer_stage"] = peer_stage

    def _make_collective(self, node, kind: str, coll: CollType, shape, dtype, where: str) -> None:
        node.kind = NodeKind.COLLECTIVE
        node.coll = coll
        node.group = self._group_id(kind)
        node.size = self._bytes(shape, dtype, where, "collective")

    def _group_id(self, kind: str) -> int:
        gid = self._group_ids.get(kind)
        if gid is None:
            self.group_uses.append((kind, tuple(sorted(_members(self.layout, kind, self.rank.rank)))))
            gid = self._group_ids[kind] = len(self.group_uses)
        return gid

    def _assume(self, sentence: str) -> None:
        if sentence not in self.assumptions:
            self.assumptions.append(sentence)

    def _add_sub_ops(self, parent: Node, record: OpRecord, deps: list[int]) -> None:
        """The step's sub-operations: each starts after the one before it (the first after the step's
        own predecessors), inside the step, in its group."""
        subs = record.sub_ops
        if not subs:
            return
        key = (id(subs.kinds), record.op, record.mg_state, record.stage)
        kinds_plan = self._sub_plans.get(key)
        if kinds_plan is None:
            self._add_sub_ops_one_by_one(parent, record, deps, key)
            return
        plan = kinds_plan[1]
        durations = subs.durations
        low, high, origin = record.start_ns, record.end_ns, self.origin
        nodes = self.rank.nodes
        where, parent_id, microbatch = parent.source, parent.id, parent.microbatch
        collective = NodeKind.COLLECTIVE
        previous = list(deps)
        first, last, longest = subs.bounds
        if self.readings[record.file][0] == "end":
            starts = map(operator.sub, subs.stamps, durations)
            inside = first - longest >= low and last <= high
        else:
            starts = subs.stamps
            inside = first >= low and last + longest <= high
        if inside:  # every one inside its step (most steps): nothing to clip
            for (name, args, coll, group, size), duration, start in zip(plan, durations, starts):
                # positional: Node's fields in order, from id to args (keywords cost more per node)
                node = Node(len(nodes), name, collective, duration, previous, NO_CTRL_DEPS, coll, size, group, None,
                            None, start - origin, "", parent_id, microbatch, where, args)
                nodes.append(node)
                previous = [node.id]
            return
        for (name, args, coll, group, size), duration, start in zip(plan, durations, starts):
            end = start + duration
            if start < low or end > high:
                start, end = _clipped(start, end, record, self.diagnostics)
                duration = end - start
            node = Node(len(nodes), name, collective, duration, previous, NO_CTRL_DEPS, coll, size, group, None, None,
                        start - origin, "", parent_id, microbatch, where, args)
            nodes.append(node)
            previous = [node.id]

    def _add_sub_ops_one_by_one(self, parent: Node, record: OpRecord, deps: list[int], key: tuple) -> None:
        """The sub-operations of a sequence not seen before (or that warned): each described on its own;
        the sequence's plan is kept when none of them warned."""
        reading = self.readings[record.file][0]
        previous = list(deps)
        where = parent.source  # one string for the step and all its sub-operations
        nodes = self.rank.nodes
        plan = []
        starts = _sub_starts(record.sub_ops, reading)
        for index, (kind, start, duration) in enumerate(zip(record.sub_ops.kinds, starts, record.sub_ops.durations)):
            end = start + duration
            if start < record.start_ns or end > record.end_ns:
                start, end = _clipped(start, end, record, self.diagnostics)
            node = Node(
                len(nodes), _sub_name(kind.name, kind.comm_func), NodeKind.COLLECTIVE, end - start, previous, NO_CTRL_DEPS,
                start_ns=start - self.origin, parent=parent.id, microbatch=parent.microbatch, source=where,
                args=_sub_args(kind.comm_func, kind.func_name, kind.trace_src_func, kind.group, kind.dtype, kind.shape,
                               record.stage, record.op, record.mg_state, index),
            )
            nodes.append(node)
            previous = [node.id]
            comm = (kind.group, kind.comm_func, kind.shape, kind.dtype)
            known = self._sub_comm.get(comm)
            if known is None:
                self._describe_sub_op(node, kind, where)
                known = self._sub_comm.get(comm)
            else:  # seen before without a warning: same group, type and size
                node.coll, node.group, node.size = known
            if known is None:  # it warned: each of its kind must be described (and counted) again
                plan = None
            elif plan is not None:
                plan.append((node.name, node.args, *known))
        if plan is not None:
            if len(self._sub_plans) >= 4096:  # sequences the reader could not share: keep memory flat
                self._sub_plans.clear()
            self._sub_plans[key] = (record.sub_ops.kinds, plan)

    def _describe_sub_op(self, node: Node, sub: SubOpKind, where: str) -> None:
        """The sub-operation's group, collective type and size; remembered when nothing was warned about."""
        warnings = sum(entry.count for entry in self.diagnostics.kinds.values())
        kind = LOG_GROUPS.get(sub.group or "tp")
        if kind is None:
            self.diagnostics.warn(
                f"megatron-unknown-group:{sub.group}",
                f"{where}: {{count}} sub-operation(s) in unknown group {sub.group!r}; placed in the TP group",
            )
            kind = "tp"
        coll = COMM_FUNCS.get((sub.comm_func or "").lower())
        if coll is None:
            self.diagnostics.warn(
                f"megatron-unknown-comm:{sub.comm_func}",
                f"{where}: {{count}} sub-operation(s) with comm_func={sub.comm_func}; written as ALL_REDUCE",
            )
            self._assume(f"sub-operations with comm_func={sub.comm_func} are written as ALL_REDUCE")
            coll = CollType.ALL_REDUCE
        self._make_collective(node, kind, coll, sub.shape, sub.dtype, where)
        if warnings == sum(entry.count for entry in self.diagnostics.kinds.values()):
            self._sub_comm[(sub.group, sub.comm_func, sub.shape, sub.dtype)] = (node.coll, node.group, node.size)

    def _bytes(self, shape, dtype, where: str, what: str) -> int:
        if shape is None:
            self.diagnostics.warn(
                f"megatron-no-shape-{what}",
                f"{where}: {{count}} {what} op(s) log no input__shape; written with size 1 byte",
            )
            return 1
        width = DTYPE_BYTES.get((dtype or "").removeprefix("torch."))
        if width is None:
            self.diagnostics.warn(
                f"megatron-dtype:{dtype}", f"{where}: {{count}} op(s) with unknown dtype {dtype}; 4 bytes per element assumed",
            )
            self._assume(f"dtype {dtype} taken as 4 bytes per element")
            width = 4
        size = prod(shape) * width
        if size > MAX_BYTES:
            raise InputError(where, f"input__shape {_shape_text(shape)} is {size} bytes, more than a Chakra size holds")
        return max(1, size)


def _fused(a: OpRecord, b: OpRecord) -> bool:
    """Two lines of one fused exchange: a send and the opposite receive, logged with the same time."""
    return (
        frozenset((a.op, b.op)) in FUSED_PAIRS
        and a.end_ns == b.end_ns
        and a.duration_ns == b.duration_ns
    )


def _clipped(start: int, end: int, parent: OpRecord, diagnostics: Diagnostics) -> tuple[int, int]:
    """A sub-operation's start and end that reach outside its step, kept inside it (the log rounds
    to 0.01 ms; further out is worth a warning)."""
    low, high = parent.start_ns, parent.end_ns
    if start < low - STAMP_TOLERANCE_NS or end > high + STAMP_TOLERANCE_NS:
        diagnostics.warn(
            "megatron-subop-outside",
            f"{parent.where}: {{count}} sub-operation(s) lie outside their step; clipped to it",
        )
    start = min(max(start, low), high)
    return start, min(max(end, start), high)


# Names and shape texts repeat across millions of nodes of a long log: build each one once.
def _op_name(record: OpRecord) -> str:
    if record.op in FINALIZE_OPS:
        return record.op
    return _microbatch_name(record.op, record.batch)


@functools.lru_cache(maxsize=1 << 16)
def _microbatch_name(op: str, batch: int) -> str:
    return f"{op} mb{batch}"


@functools.lru_cache(maxsize=1 << 12)
def _sub_name(name: str, comm_func: str | None) -> str:
    return f"{name} {comm_func or 'comm'}"


@functools.lru_cache(maxsize=1 << 12)
def _shape_text(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _op_args(record: OpRecord, iteration: int) -> dict:
    args: dict = {"stage": record.stage, "op": record.op, "iteration": iteration}
    if record.op not in FINALIZE_OPS:
        args["microbatch"] = record.batch
    for key, value in (
        ("mg_state", record.mg_state), ("group_kind", record.group_kind), ("dtype", record.dtype),
        ("description", record.description),
    ):
        if value is not None:
            args[key] = value
    if record.shape is not None:
        args["shape"] = _shape_text(record.shape)
    return args


@functools.lru_cache(maxsize=1 << 14)
def _sub_args(comm_func, func_name, trace_src_func, group, dtype, shape, stage, step, mg_state, index) -> SharedArgs:
    """One read-only dict for all sub-operations that say the same (a log repeats a few thousand)."""
    args: dict = {"stage": stage, "sub_operation": index, "step": step}
    for key, value in (
        ("comm_func", comm_func), ("func_name", func_name), ("trace_src_func", trace_src_func),
        ("group_kind", group), ("dtype", dtype), ("mg_state", mg_state),
    ):
        if value is not None:
            args[key] = value
    if shape is not None:
        args["shape"] = _shape_text(shape)
    return SharedArgs(args)


# ---------------------------------------------------------------- after all ranks

def _send_starts(summaries: list[RankSummary]) -> dict[int, dict[tuple, int | None]]:
    """receiver -> (sender, tag) -> the start of that send (the last one, when a tag repeats)."""
    out: dict[int, dict[tuple, int | None]] = defaultdict(dict)
    for summary in summaries:
        for peer, tag, start in summary.sends:
            out[peer][(summary.rank, tag)] = start
    return dict(out)


def _record_receive_waits(rank: Rank, p2p: list[Node], send_starts: dict[tuple, int | None]) -> None:
    """How long each receive waited for its peer (args wait_ns), so a long receive reads as a bubble.

    With the sender in the set: the time from the receive's start to the send's start. Without
    it: the receive's duration minus the fastest send of the same size on this rank (an estimate).
    """
    fastest: dict[int, int] = {}
    for node in p2p:  # the rank's sends and receives, in node order
        if node.kind == NodeKind.SEND:
            fastest[node.size] = min(fastest.get(node.size, node.duration_ns), node.duration_ns)
    for node in p2p:
        if node.kind != NodeKind.RECV or node.start_ns is None:
            continue
        send_start = send_starts.get((rank.peer_of(node), node.tag))
        if send_start is not None:
            wait = send_start - node.start_ns
            node.args["wait_basis"] = "start of the matching send"
        elif node.size in fastest:
            wait = node.duration_ns - fastest[node.size]
            node.args["wait_basis"] = "estimate: duration minus this rank's fastest send of the same size"
        else:
            continue
        node.args["wait_ns"] = min(max(wait, 0), node.duration_ns)


def _missing_ranks(trace: ExecutionTrace, summaries: list[RankSummary], present: set[int]) -> list[int]:
    """Ranks the groups and transfers name that are not in the set."""
    named = {m for group in trace.groups.values() for m in group.members}
    named |= {peer for summary in summaries for peer in summary.peers}
    return sorted(named - present)


def _rank_list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")


def _check_complete_for_retime(missing: list[int]) -> None:
    """The scheduler can only re-time a set that holds every rank its groups and transfers name."""
    if missing:
        raise InputError(
            None,
            f"--retime needs the logs of every rank the groups and transfers name; missing ranks {_rank_list(missing)} "
            "(give all ranks' logs, or convert without --retime)",
        )


def _note_absent_peers(trace: ExecutionTrace, absent: list[int], diagnostics: Diagnostics) -> None:
    if absent:
        listed = ", ".join(map(str, absent))
        trace.metadata["absent_peers"] = absent
        trace.assume(
            f"pipeline peers not in the input (ranks {listed}): their sends and receives are kept with "
            "the layout's peer rank and have no partner in this set"
        )
        diagnostics.note(f"pipeline peers {listed} are not in the input; their transfers stay unmatched")
