"""A timeline (Chrome JSON or .pftrace) of per-rank inputs, placed and printed where the ranks
were built (--jobs, --cluster): this process never holds a rank's nodes.

The steps are those of a local run, in the same order, so the bytes are the same:

1. The workers build and finish their files' ranks (`Workers.keep_parts`) and turn
   one-member collectives into compute, as `api.read` does. Of each rank this process gets
   its shell (no nodes) and the earliest start of its nodes and of its display spans
   (`RankTimes`).
2. This process chooses the drawn ranks and the shift, as `layout_chrome.start_plan` does,
   from the shells.
3. Each worker places its drawn ranks (`_Planner.place_rank`) and sends back the processes'
   heads and communication slices. This process adds those in drawn order, numbers the flows
   (`_Planner.assign_flows`) and writes the head.
4. Each worker places its drawn ranks again, one at a time (so it never holds all their
   layouts), and prints each process into its own part file, in a folder beside the output
   (which a cluster's workers must be able to write, as for a Chakra set). This process
   appends the parts in drawn order, removes them and writes the tail.

A worker with more input than it keeps (`per_rank.hold_budget`) builds the ranks of the other
files again for steps 1, 3 and 4, from their records or reading them again (`per_rank.LetGo`),
so it holds one such file's nodes at a time.

Only measured timelines are drawn this way. A scheduled timeline needs every rank's nodes in
one place (the scheduler), and a modelled one may draw a process of the whole run beside the
ranks: their ranks come here and are written the local way.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from . import progress
from .builders import per_rank
from .builders.one_rank import demote_in_rank, record_demoted
from .diagnostics import Diagnostics, InputError
from .model import ExecutionTrace, Rank
from .options import Options
from .timeline import Timeline, measured_timeline
from .writers import chrome
from .writers.atomic import atomic_file
from .writers.forked import copy_into
from .writers.layout_chrome import (COMM_SENT, PlanStart, ProcessHead, _Planner, choose_ranks, one_clock,
                                    report_iteration, write_parts)

def _writer(writer: str):
    """The timeline format's writer module (`write_head`, `process_encoder`, `new_encoder`); the
    .pftrace writer (protobuf) is imported only when asked for."""
    if writer == "chrome":
        return chrome
    from .writers import perfetto

    return perfetto


@dataclass
class RankTimes:
    """What a worker tells about one finished rank: its shell (no nodes, no display spans), its
    earliest start (None without nodes), the earliest start of its display spans (None without
    any), and the one-member collectives it turned into compute."""

    rank: Rank
    first_start: int | None
    display_start: int | None
    demoted: int
    first: str


def convert(fmt: per_rank.PerRankFormat, paths: list[Path], output: Path, writer: str, options: Options,
            diagnostics: Diagnostics, finish_read) -> ExecutionTrace:
    """Read `paths` and write the timeline `output` (`writer`: "chrome" or "perfetto"); returns the
    model (each rank's shell when the workers drew it). `finish_read` is as for
    `rank_files.convert` (`api._AfterWorkersLoad`)."""
    with per_rank.start_workers(fmt, paths, options, streaming=True) as workers:
        finish_read.workers_started()
        with progress.bar(f"reading {paths[0].name} and {len(paths) - 1} more on the workers"):
            trace = workers.keep_parts(diagnostics).trace
            shell = replace(trace, ranks={})
            facts = workers.each_rank(_finish_and_measure, shell, "measuring", change=(demote_in_rank, shell))
        record_demoted(trace, facts)
        trace.ranks = {f.rank.rank: f.rank for f in facts}
        finish_read(trace)
        if trace.timing == "measured":
            with progress.bar(f"drawing {output} on the workers"):
                _draw(workers, trace, facts, output, writer, options, diagnostics)
            return trace
        trace.ranks = dict(zip(trace.ranks, workers.each_rank(per_rank.whole, None, "sending")))
    from .api import write

    write(trace, output, writer, options, diagnostics)
    return trace


def _finish_and_measure(rank: Rank, shell: ExecutionTrace) -> RankTimes:
    _, demoted, first = demote_in_rank(rank, shell)
    starts = [n.start_ns or 0 for n in rank.nodes]  # as measured_timeline reads them
    display = [span.start_ns for span in rank.display]
    return RankTimes(replace(rank, nodes=[], display=[]), min(starts, default=None), min(display, default=None),
                     demoted, first)


def _start(trace: ExecutionTrace, facts: list[RankTimes], options: Options, diagnostics: Diagnostics) -> PlanStart:
    """`layout_chrome.start_plan` of a measured trace, from its ranks' shells and times."""
    timeline = Timeline({}, {}, "measured")
    drawn = choose_ranks(trace, options, diagnostics)
    by_rank = {f.rank.rank: f for f in facts}
    shift = min((f.first_start for f in facts if f.first_start is not None), default=0)
    shift = min([shift, *(by_rank[r].display_start for r in drawn if by_rank[r].display_start is not None)])
    planner = _Planner(trace, timeline, shift, diagnostics)
    return PlanStart(trace, timeline, drawn, shift, planner, one_clock(trace, timeline), None)


def _draw(workers: per_rank.Workers, trace: ExecutionTrace, facts: list[RankTimes], output: Path, writer: str,
          options: Options, diagnostics: Diagnostics) -> None:
    module = _writer(writer)
    start = _start(trace, facts, options, diagnostics)
    placing = (trace, start.shift, frozenset(start.drawn))  # every rank's shell: a world group lists them
    placed = {head.rank: (head, comm) for file_results in workers.step(_place, placing, "placing")
              for head, comm in file_results}
    heads = [placed[r][0] for r in start.drawn]
    plan = start.plan(heads, start.number_flows(placed.pop(r) for r in start.drawn))
    flows = {head.pid: start.planner.flows_of_pid[head.pid] for head in heads}
    start.planner.forget_comm()
    with _opened(output, writer) as out:  # (it makes the output's folder)
        module.write_head(plan, out)
        parts = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
        try:
            # one encoder per worker, kept across its ranks (the step's argument is one object on a worker)
            printing = (flows, str(parts.resolve()), module.process_encoder, module.new_encoder(), str(output))
            workers.step(_print, printing, "printing")
            for head in heads:  # in drawn order, as one process prints them
                part = parts / f"{head.pid}.part"
                with open(part, "rb") as source:
                    copy_into(out, source)
                part.unlink()
        finally:
            shutil.rmtree(parts, ignore_errors=True)
        if writer == "chrome":
            chrome.write_tail(plan, out)
            json_bytes = out.tell()
    if writer == "chrome":
        chrome.warn_if_large(plan, json_bytes, output, diagnostics)
    report_iteration(plan, diagnostics)


def _opened(output: Path, writer: str):
    return chrome.open_output(output) if writer == "chrome" else atomic_file(output)


# Steps on the workers (`per_rank.Workers.step`): each file's finished ranks, then its drawn
# ranks, then nothing once they are printed. A rank is placed twice, to send what crosses ranks
# and to print it, so a worker holds one rank's layout at a time: on the 184 MB set of 16 logs
# the largest worker went from 459 to 353 MB, for 12% more CPU (7.7 s instead of 6.9 s wall).

def _place(fmt: per_rank.PerRankFormat, options: Options, kept, placing) -> tuple[tuple, list]:
    """Place this file's drawn ranks; their heads and comm slices go back, the ranks stay here
    (or are let go, `per_rank.LetGo`)."""
    placed, drawn = [], []
    let_go = isinstance(kept, per_rank.LetGo)
    for rank, place in _drawn(fmt, options, kept, placing):
        comms = []
        process = place(rank, comms)
        placed.append((ProcessHead.of(process), comms[0]))
        if not let_go:  # a rank built again is dropped once placed (and built again to print)
            drawn.append(rank)
        del rank, place, process  # (a let-go rank: freed before the next is built)
    return (kept if let_go else drawn, placing), placed


def _drawn(fmt: per_rank.PerRankFormat, options: Options, kept, placing):
    """Each of this file's drawn ranks with its `place` (`_placer`), built again a rank at a time
    when the file was let go of (`per_rank.rank_batches`)."""
    for ranks in per_rank.rank_batches(fmt, options, kept):
        mine, place = _placer(ranks, placing)
        del ranks
        mine.reverse()  # popped from the end: what was yielded is not kept here while the next batch is built
        while mine:
            yield mine.pop(), place
        del place


def _placer(ranks: list[Rank], placing):
    """This file's drawn ranks, and `place(rank, comm_out)`: the rank's process, its comm slices
    appended to `comm_out` (one planner per file, in a trace of every rank's shell and this
    file's ranks)."""
    shell, shift, drawn = placing
    mine = [rank for rank in ranks if rank.rank in drawn]
    trace = replace(shell, ranks={**shell.ranks, **{rank.rank: rank for rank in ranks}})
    planner = _Planner(trace, measured_timeline(replace(trace, ranks={rank.rank: rank for rank in mine})), shift,
                       Diagnostics())
    lists_drawn = Counter(id(rank.nodes) for rank in mine)
    lists_left = lists_drawn.copy()  # ranks still to place, per node list

    def place(rank: Rank, comm_out: list):
        planner.comm_out = comm_out
        process = planner.place_rank(rank)
        planner.comm_out = None
        for tpl in planner.templates.values():  # as in one process: args rows only for a list one rank draws
            tpl.drawn = lists_drawn[id(tpl.nodes)]
        lists_left[id(rank.nodes)] -= 1
        if not lists_left[id(rank.nodes)]:  # a log's rank: about 12 MB of layout a later rank will not use
            planner.forget_rank(rank)
        return process

    return mine, place


def _print(fmt: per_rank.PerRankFormat, options: Options, kept: tuple, printing) -> tuple[None, None]:
    """Place each of this file's drawn ranks again and print its process into its part file
    (named by its pid), with the worker's one encoder (`printing`)."""
    kept, placing = kept
    flows, folder, process_encoder, encoder, output = printing
    for rank, place in _drawn(fmt, options, kept, placing):
        process = place(rank, COMM_SENT)
        process.flow_pairs = flows[process.pid]
        try:
            with open(Path(folder) / f"{process.pid}.part", "wb", buffering=1 << 20) as out:
                write_parts(out, process_encoder([process], encoder)(process))
        except OSError as e:  # a worker elsewhere may not see the output folder
            raise InputError(output, f"cannot write rank {rank.rank}'s part of the timeline on a worker: "
                                     f"{e.strerror or e} (the output folder must be writable by every worker "
                                     "under this path)") from None
        del rank, place, process  # (before the next rank is placed, or built when let go of)
    return None, None
