"""Measured inputs, one rank (or a few) per file: the per-file phase in parallel, a small merge.

A format whose files each hold whole ranks (Megatron op logs; profiler traces) is four functions
(`PerRankFormat`):

    survey(path, options, name) -> survey   read one file; what the other ranks need to know (small)
    plan(surveys, paths, options, diagnostics) -> plan    across ranks, before any node: layout, clocks
    build(survey, plan, options) -> [part]  that file's ranks as model parts (nodes, groups used, warnings)
    merge(plan, parts, options, diagnostics) -> ExecutionTrace    the parts, in rank order, into one model

`run` calls them in this process, over `--jobs` processes, or on a Dask cluster (`--cluster`);
the result is the same model, so outputs are byte-identical whichever runs them.

A format may split its merge in two (the optional `summarize`, `join`, `finish`):

    summarize(part) -> summary             what crosses ranks (groups used, sends, peers): small
    join(plan, summaries, options, diagnostics) -> joined   the model without its ranks' nodes,
                                           and `joined.trace`; what each rank's nodes still need
    finish(part, joined) -> Rank           one rank's nodes made final (group ids, waits, ...)

and `merge` is then `join` + `finish` of every part. `start_workers` + `Workers.keep_parts`
use this to keep every part where it was built: only the summaries reach this process, and
later steps (`Workers.each_rank`: checks, writing a rank's file) run where the nodes are.

A worker keeps the parts of its files up to a budget of input (`hold_budget`); the nodes of the
files after that are let go after each step and built again by the next, one rank at a time
(`LetGo`, with the format's optional `split`), so a worker's memory stays flat however many
files it has. A file of several ranks may also be shared among workers (the format's `shares`:
`survey(path, options, name, share=(k, n))`; `units_of`). A format whose records are small
(`small_records`: Megatron logs) keeps the records of those files and builds from them, at a
build per step: its budget is small (`HOLD_BYTES_PER_WORKER`). Any other format reads such a
file again at each step: its budget is a share of the worker's memory
(`REREAD_MEMORY_SHARE`), so that only a set the machine cannot hold pays for it.

A survey has two attributes the runner uses: `diagnostics` (the file's warnings, merged here in
file order) and `records` (the parsed file, kept for `build` in the process that read it; set to
None before a survey crosses processes, and `build` then reads the file again). `name` is the
path as the user gave it (what messages and sources say); `path` may be absolute (what a worker
elsewhere opens).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import multiprocessing
import re
import signal
from multiprocessing import connection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..diagnostics import Diagnostics, InputError
from ..memory import available as memory_available, under_limit
from ..model import ExecutionTrace
from ..options import Options, memory_bytes


@dataclass(frozen=True)
class PerRankFormat:
    survey: Callable[[Path, Options, str], Any]
    plan: Callable[[list, list[Path], Options, Diagnostics], Any]
    build: Callable[[Any, Any, Options], list]
    merge: Callable[[Any, list, Options, Diagnostics], ExecutionTrace]
    summarize: Callable[[Any], Any] | None = None
    join: Callable[[Any, list, Options, Diagnostics], Any] | None = None
    finish: Callable[[Any, Any], Any] | None = None
    # Whether a survey's records are much smaller than the nodes built from them and `build`
    # leaves them as they were (a Megatron log's: 0.2 bytes per byte of log, its nodes 2.5): a
    # worker then keeps the records of the files it lets go of (`LetGo`) and builds from them;
    # otherwise it reads such a file again for each step (profiler traces).
    small_records: bool = False
    # split(survey) -> [survey]: one per rank of the file, with that rank's records (when the
    # records are small), so that a file let go of is built again one rank at a time.
    split: Callable[[Any], list] | None = None
    # Whether survey(path, options, name, share=(k, n)) gives the survey of the file's ranks r
    # with r % n == k: n workers then share a file that holds several ranks (one concatenated log).
    shares: bool = False

    @property
    def parts_stay_with_workers(self) -> bool:
        """True when the merge is split, so workers can keep and finish their own parts."""
        return self.join is not None


def run(fmt: PerRankFormat, paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    """Read `paths` with `fmt`: in this process, over --jobs processes, or on --cluster.

    Workers survey the files and keep their records; after the plan they build them there,
    so each file is read once; every part comes back here to be merged.
    """
    if not uses_workers(options, paths):
        surveys = [_merged(fmt.survey(path, options, str(path)), diagnostics) for path in paths]
        plan = fmt.plan(surveys, paths, options, diagnostics)
        parts = [part for survey in surveys for part in fmt.build(survey, plan, options)]
        return fmt.merge(plan, parts, options, diagnostics)
    with start_workers(fmt, paths, options) as workers:
        plan = workers.plan(diagnostics)
        parts = [part for file_parts in workers.step(_build, plan, "reading") for part in file_parts]
    return fmt.merge(plan, parts, options, diagnostics)


def uses_workers(options: Options, paths: list[Path], fmt: PerRankFormat | None = None, streaming: bool = False) -> bool:
    """True for --cluster, or --jobs above 1 with more than one file (or one file that `fmt`
    shares among workers, `streaming`)."""
    jobs = reading_jobs(options)
    return bool(options.cluster) or min(jobs, len(units_of(fmt, paths, jobs, streaming))) > 1


@dataclass(frozen=True)
class Unit:
    """What one worker reads: a file, or a share (k, n) of its ranks (`PerRankFormat.shares`)."""

    path: Path
    share: tuple[int, int] | None = None


def units_of(fmt: PerRankFormat | None, paths: list[Path], workers: int, streaming: bool,
             cluster: bool = False) -> list[Unit]:
    """The files, each shared among several of the `workers` when there are fewer files than
    workers, the parts stay with the workers (`streaming`: their ranks need not meet here), and
    the files are big (`SHARED_FILES_MIN_BYTES`) or on a cluster."""
    shareable = streaming and fmt is not None and fmt.shares and paths and len(paths) < workers
    if not shareable or not (cluster or _bytes_of(paths) >= SHARED_FILES_MIN_BYTES):
        return [Unit(path) for path in paths]
    shares = workers // len(paths)
    return [Unit(path, (k, shares)) for path in paths for k in range(shares)]


# Files of several ranks (one concatenated log) at least this big in all are shared among the
# workers: each reads every byte of the file but parses and builds only its share of the ranks
# (benchmark 6, 98 MB on 2 workers, against one process reading and 2 forked writers drawing:
# 895 -> 674 MB for the processes together, 515 -> 325 MB the largest).
SHARED_FILES_MIN_BYTES = 32 << 20
# What one process needs to draw a log of several ranks, per byte of log (benchmark 6: 5.5 for
# Chrome JSON, 6.2 for .pftrace): the measure of `too_big_for_one_process`.
ONE_FILE_MEMORY_PER_BYTE = 6


def _bytes_of(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):  # the reader reports an unreadable file itself
            total += path.stat().st_size
    return total


def too_big_for_one_process(paths: list[Path], memory: int | None = None) -> bool:
    """Whether drawing `paths` in one process would take more than half the memory available
    (`memory`: a process's, by default this one's; False when that is not known): the workers
    then let go of a share of a file even when it is their only one, for a flat memory
    (benchmark 6: 472-489 -> 336-338 MB together, about 15 -> 17 s CPU on the slower machine
    of 2026-11-27)."""
    memory = available_memory() if memory is None else memory
    return 0 < memory < 2 * _bytes_of(paths) * ONE_FILE_MEMORY_PER_BYTE


def reading_jobs(options: Options) -> int:
    """--jobs for reading; 1 (this process) unless asked."""
    if options.jobs is None or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, options.jobs)


def start_workers(fmt: PerRankFormat, paths: list[Path], options: Options, streaming: bool = False,
                  all_or_none: bool = False) -> "Workers":
    """Workers for `paths` (--cluster or --jobs processes), to use as a context manager.

    `streaming`: for `keep_parts`, whose parts stay with the workers. Each worker then keeps the
    parts of its files up to `hold_budget` of input and lets go of the others' (`LetGo`), and a
    file may be shared among workers (`units_of`). `all_or_none`: the workers keep every file
    or none (`files_to_hold`)."""
    if options.cluster:
        from . import cluster  # dask is an optional extra: imported only when asked for

        return cluster.DaskWorkers(fmt, paths, options, streaming, all_or_none)
    units = units_of(fmt, paths, reading_jobs(options), streaming)
    return ProcessWorkers(fmt, units, options, min(reading_jobs(options), len(units)), streaming, all_or_none)


# The input a worker keeps the nodes of when the format's records are small (about 2.5 bytes of
# memory per byte of a Megatron log). On the 184 MB set of 16 logs (benchmark 8), each of 2
# workers keeps 2 files and lets go of 6: 743 -> 435 MB for the three processes together, for
# 15% more CPU (three more builds of 6 files).
HOLD_BYTES_PER_WORKER = 32 << 20
# Otherwise (each step reads a file let go of again: a profiler trace's JSON), the share of a
# worker's memory its kept input may take: parsing a trace holds several times its size for a
# while, and its part about 1.5 times.
REREAD_MEMORY_SHARE = 1 / 8


def hold_budget(fmt: PerRankFormat, memory: int, short: bool = False) -> int:
    """The input bytes a worker with `memory` bytes at hand keeps the parts of. When memory is
    `short` (`too_big_for_one_process`, as under a tight --memory), a worker of a format of small
    records keeps none: it builds each rank again from its records for each step, and holds one
    rank's nodes at a time (benchmark 8 → Chakra with `--jobs 2`: about 90 MB less for the
    processes together, for 11% more time)."""
    if fmt.small_records:
        return 0 if short else HOLD_BYTES_PER_WORKER
    return max(HOLD_BYTES_PER_WORKER, int(memory * REREAD_MEMORY_SHARE))


def available_memory() -> int:
    """The memory this process may still use (`memory.available`: MemAvailable, or less under a
    cgroup's limit), or 0 when it cannot be told."""
    return memory_available()


def files_to_hold(sizes: list[int], budget: int, alone: list[bool] | None = None, all_or_none: bool = False) -> list[bool]:
    """Which of one worker's files (their sizes in bytes, in the order it reads them) it keeps:
    the first ones while they fit in `budget`, and all of them when only one would be let go,
    unless letting go of that one alone is worth it (`alone`: a share of a file's ranks, built a
    rank at a time, when memory is short). A file let go of alone is otherwise built as a whole
    at each step: that holds as much as keeping it, for more CPU.

    `all_or_none`: none when some would be let go. For a Chakra set (rank_files.py): a file kept
    saves one building of its ranks (those let go of are built again once, to be checked and
    written in one step), but its nodes stay while this process holds every rank's skeleton
    (benchmark 8 → Chakra, 2 workers keeping 2 of their 8 logs or none: 596 → 503 MB for the
    processes together, 22.3 → 23.1 s, when those let go of were built twice again)."""
    held, hold = 0, []
    for size in sizes:
        held += size
        hold.append(held <= budget)
    let_go = [i for i, kept in enumerate(hold) if not kept]
    if len(let_go) == 1 and not (alone and alone[let_go[0]]):
        return [True] * len(sizes)
    if all_or_none and let_go:
        return [False] * len(sizes)
    return hold


def let_go_alone(units: list[Unit], paths: list[Path], memory: int | None = None) -> list[bool]:
    """For `files_to_hold`: the shares of files, when memory is short (`too_big_for_one_process`;
    `memory`: a worker's, by default what this process has available)."""
    short = any(unit.share for unit in units) and too_big_for_one_process(paths, memory)
    return [short and unit.share is not None for unit in units]


def unit_bytes(unit: Unit) -> int:
    """The bytes of input whose nodes a unit makes: its file's, or its share of them."""
    size = unit.path.stat().st_size
    return size if unit.share is None else size // unit.share[1]


class LetGo:
    """A file whose parts a worker does not keep: what builds them again, one rank at a time,
    for a step that needs them (its survey in pieces, with their records when they are small;
    the plan, the format's `joined`, and the changes earlier steps made to its finished ranks)."""

    def __init__(self, fmt: PerRankFormat, survey):
        self.survey = without_records(survey)  # what the plan is made of
        if not fmt.small_records:
            self.pieces = [self.survey]  # (build reads the file again)
        else:
            self.pieces = fmt.split(survey) if fmt.split is not None else [survey]
        self.plan, self.joined = None, None
        self.changes: list[tuple[Callable, Any]] = []  # (change, arg): change(rank, arg), in order

    def parts(self, fmt: PerRankFormat, options: Options) -> Iterator:
        for piece in self.pieces:
            yield from fmt.build(copy.copy(piece), self.plan, options)  # (build lets go of its survey's records)

    def ranks(self, fmt: PerRankFormat, options: Options) -> Iterator:
        """The finished ranks, each built when asked for; nothing here keeps one while the
        next is built (a loop variable would: `del` once used)."""
        for part in self.parts(fmt, options):
            rank = fmt.finish(part, self.joined)
            del part
            for change, arg in self.changes:
                change(rank, arg)
            yield rank
            del rank


def ranks_of(fmt: PerRankFormat, options: Options, kept) -> Iterable:
    """A file's finished ranks, as a step gets them: kept, or built again one at a time (`LetGo`)."""
    return kept.ranks(fmt, options) if isinstance(kept, LetGo) else kept


def rank_batches(fmt: PerRankFormat, options: Options, kept) -> Iterator[list]:
    """A file's finished ranks in lists a step may hold at once: all of them when kept, one at a
    time when built again (`LetGo`)."""
    if isinstance(kept, LetGo):
        for rank in kept.ranks(fmt, options):
            yield [rank]
            del rank  # (before the next is built)
    else:
        yield kept


def surveyed(fmt: PerRankFormat, unit: Unit, options: Options, name: str, hold: bool):
    """A worker's first state of a file (or of its share): its survey (records kept), or a
    LetGo of it."""
    share = () if unit.share is None else (unit.share,)  # (only formats that share files take it)
    survey = fmt.survey(unit.path, options, name, *share)
    return survey if hold else LetGo(fmt, survey)


class Workers:
    """Workers that survey the files, then run steps over what they keep of each file.

    A step is a module-level function `step(fmt, options, kept, arg) -> (kept, result)`, run once per
    file where its state is; `step` returns the results in file order. `start` sends a step
    and returns the function that waits for its results, so that this process can work
    meanwhile (one step at a time); that function's `arrived(result)`, when given, is called
    with each file's result as it comes in, so that this process can work on it while the
    workers go on.
    """

    fmt: PerRankFormat
    paths: list[Path]
    options: Options
    holding: bool = True  # whether they keep every file's parts (else memory is short: `LetGo`)

    def surveys(self) -> list:
        raise NotImplementedError

    def start(self, step: Callable, arg, doing: str) -> Callable[..., list]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def step(self, step: Callable, arg, doing: str) -> list:
        return self.start(step, arg, doing)()

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def plan(self, diagnostics: Diagnostics):
        """Survey every file (warnings merged in file order) and make the plan."""
        surveys = self.surveys()
        for survey in surveys:
            diagnostics.merge(survey.diagnostics)
        return self.fmt.plan(surveys, self.paths, self.options, diagnostics)

    def keep_parts(self, diagnostics: Diagnostics):
        """Build every file where it was surveyed and keep the parts there; join their summaries
        here. Returns the format's `joined`; the workers then finish their ranks with it."""
        plan = self.plan(diagnostics)
        summaries = [summary for file_summaries in self.step(_build_and_keep, plan, "building")
                     for summary in file_summaries]
        joined = self.fmt.join(plan, summaries, self.options, diagnostics)
        self.step(_finish, joined, "finishing")
        return joined

    def each_rank(self, work: Callable, arg, doing: str, change: tuple[Callable, Any] | None = None,
                  each: Callable | None = None) -> list:
        """`work(rank, arg)` for every finished rank, where it is; the results in rank order.
        `change` = (function, argument): `function(rank, argument)` is what `work` changes in
        the rank, done again when a LetGo builds it (which keeps the argument: only what the
        change needs). `each(result)`: called here on each result as its file's results come in."""
        return self.each_rank_later(work, arg, doing, change, each)()

    def each_rank_later(self, work: Callable, arg, doing: str, change: tuple[Callable, Any] | None = None,
                        each: Callable | None = None) -> Callable[[], list]:
        """`each_rank` started: returns the function that waits for its results."""
        collect = self.start(_each_rank, (work, arg, change), doing)
        arrived = None if each is None else lambda file_results: [each(result) for _, result in file_results]

        def in_rank_order() -> list:
            results = [result for file_results in collect(arrived) for result in file_results]
            return [result for _, result in sorted(results, key=lambda pair: pair[0])]

        return in_rank_order


# Steps: what a worker keeps of a file becomes its survey, then its parts, then its finished ranks.

def _build(fmt: PerRankFormat, options: Options, survey, plan):
    return None, fmt.build(survey, plan, options)


def _build_and_keep(fmt: PerRankFormat, options: Options, survey, plan):
    if isinstance(survey, LetGo):
        survey.plan = plan
        return survey, each_released(fmt.summarize, survey.parts(fmt, options))  # one part at a time
    parts = fmt.build(survey, plan, options)
    return parts, [fmt.summarize(part) for part in parts]


def _finish(fmt: PerRankFormat, options: Options, parts, joined):
    if isinstance(parts, LetGo):
        parts.joined = joined
        return parts, None
    return [fmt.finish(part, joined) for part in parts], None


def whole(rank, _):
    """The rank itself, nodes and all: `each_rank(whole, None, ...)` brings every rank here."""
    return rank


def _each_rank(fmt: PerRankFormat, options: Options, kept, work_and_arg):
    work, arg, change = work_and_arg
    results = each_released(lambda rank: (rank.rank, work(rank, arg)), ranks_of(fmt, options, kept))
    if isinstance(kept, LetGo) and change is not None:
        kept.changes.append(change)  # after: `work` made it in the ranks just built
    return kept, results


def each_released(work: Callable, items: Iterable) -> list:
    """`[work(item) for item in items]`, without holding an item while the next is made (a
    loop's variable would): a let-go file's ranks are built one at a time."""
    results = []
    for item in items:
        results.append(work(item))
        del item
    return results


class ProcessWorkers(Workers):
    """--jobs forked processes: worker k has files k, k + jobs, ...; pipes carry the results."""

    def __init__(self, fmt: PerRankFormat, units: list[Unit], options: Options, jobs: int, streaming: bool = False,
                 all_or_none: bool = False):
        self.fmt, self.options = fmt, options
        self.paths = [unit.path for unit in units]  # (what messages name)
        context = multiprocessing.get_context("fork")
        self.links, self.processes = [], []
        # (one reading for both decisions: /proc and the cgroup files)
        memory = under_limit(available_memory(), memory_bytes(options))
        distinct = list(dict.fromkeys(self.paths))
        budget = hold_budget(fmt, memory // jobs, too_big_for_one_process(distinct, memory))
        alone = let_go_alone(units, distinct, memory)
        self.holding = True
        for k in range(jobs):
            mine, theirs = context.Pipe()
            indices = range(k, len(units), jobs)
            hold = (files_to_hold([unit_bytes(units[i]) for i in indices], budget, [alone[i] for i in indices],
                                  all_or_none) if streaming else [True] * len(indices))
            files = [(i, units[i], keep) for i, keep in zip(indices, hold)]
            self.holding = self.holding and all(hold)
            process = context.Process(target=_worker, args=(fmt, options, files, theirs), daemon=True)
            process.start()
            theirs.close()
            self.links.append(mine)
            self.processes.append(process)

    def surveys(self) -> list:
        return _collect(self.links, self.processes, self.paths, "reading")

    def start(self, step: Callable, arg, doing: str) -> Callable[..., list]:
        for link in self.links:
            link.send((step, arg))
        return lambda arrived=None: self._collect(doing, arrived)

    def _collect(self, doing: str, arrived: Callable | None) -> list:
        try:
            return _collect(self.links, self.processes, self.paths, doing, arrived)
        except BaseException:
            # (a worker died, or Ctrl-C) the others are stopped before the caller cleans up: one
            # still printing would write into the temporary folder as it is removed
            self.close()
            raise

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.join()


def _worker(fmt: PerRankFormat, options: Options, files: list[tuple[int, Unit, bool]], link) -> None:
    """Survey this worker's files (sending each survey without its records), then run the steps
    the parent sends over what it keeps of each file. Ctrl-C is the parent's to handle: it
    stops the workers (`close`), and a worker's own KeyboardInterrupt would print a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    kept = {}
    index = -1
    try:
        for index, unit, hold in files:
            kept[index] = surveyed(fmt, unit, options, str(unit.path), hold)
            link.send((index, without_records(kept[index]), None))
        while True:
            step, arg = link.recv()
            for index in list(kept):
                kept[index], result = step(fmt, options, kept[index], arg)
                link.send((index, result, None))
                del result  # sent: not held through the next file or step (a file's comm slices: MBs)
            del step, arg  # (nor the step's argument: a writer's caches)
            give_back_freed_memory()
    except InputError as e:
        link.send((index, None, e))
    except EOFError:
        pass  # the parent stopped: an error in another worker's file


def give_back_freed_memory() -> None:
    """Return the heap's free pages to the system (glibc's `malloc_trim`; nothing elsewhere),
    as a worker does after each step. A worker that lets go of its ranks is idle at its peak's
    size otherwise: on benchmark 6 → Chakra with --memory, 90 MB each after the checking step,
    65 MB so, while the client runs the cross-rank checks (`rank_files.convert`)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # no glibc
        pass


def without_records(survey):
    """The survey without its records, to send to the process that plans (the records stay here)."""
    if isinstance(survey, LetGo):
        survey = survey.survey
    light = copy.copy(survey)
    light.records = None
    return light


def _collect(links: list, processes: list, paths: list[Path], doing: str, arrived: Callable | None = None) -> list:
    """Each file's result, in file order (`arrived(result)` on each as it comes in). A bad file
    stops its worker; the error of the first bad file in the order given is raised, as reading
    them one by one would. A worker that dies fails the run, saying how it ended (killed: most
    often by the kernel, out of memory)."""
    results: dict[int, Any] = {}
    errors: dict[int, InputError] = {}
    jobs = len(links)
    left = {k: len(range(k, len(paths), jobs)) for k in range(jobs)}
    while left:
        for link in connection.wait([links[k] for k in left]):
            k = links.index(link)
            try:
                index, value, error = link.recv()
            except EOFError:
                raise InputError(None, f"a worker process died while {doing} {paths[k]} or a file after it"
                                       f"{_how_it_died(processes[k])}") from None
            if error is not None:
                errors[index] = error
                del left[k]
                continue
            results[index] = value
            if arrived is not None:
                arrived(value)
            left[k] -= 1
            if not left[k]:
                del left[k]
    if errors:
        raise first_error(errors, paths)
    return [results[i] for i in range(len(paths))]


def _how_it_died(process) -> str:
    """': it was killed by SIGKILL (out of memory?)' and the like; '' if it has not ended."""
    process.join(timeout=5)  # (its pipe closed as it ended)
    if process.exitcode is None:
        return ""
    from ..writers.forked import how_it_ended  # (only when a worker died)

    return f": it {how_it_ended(process.exitcode)}"


def first_error(errors: dict[int, InputError], paths: list[Path]) -> InputError:
    """Of the errors of some units (by index; `paths`: each unit's file), the one reading the
    files one by one would raise: the first file's, and of the shares of one file (each parses
    its own ranks' lines), the one of the earliest line."""
    def order(i: int) -> tuple[int, int]:
        return paths.index(paths[i]), _line_in(errors[i], str(paths[i]))

    return errors[min(errors, key=order)]


def _line_in(error: InputError, name: str) -> int:
    """The line of `name` an error names (`name:line...`); 0 when it names none."""
    where = error.where or ""
    found = re.match(r":(\d+)", where[len(name):]) if where.startswith(name) else None
    return int(found[1]) if found else 0


def _merged(survey, diagnostics: Diagnostics):
    diagnostics.merge(survey.diagnostics)
    return survey
