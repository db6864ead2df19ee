"""Work split over forked workers that share this process's memory copy-on-write.

A writer that has made its whole plan in this process (the model, the processes of a
timeline) forks workers that encode parts of it; the parts need no pickling on the way in,
and only their bytes (in temporary files) and small results come back. The Chakra writer
forks one worker per share of ranks (`chakra.write_ranks_in_parallel`); the timeline writers
(Chrome JSON, .pftrace) go through `draw`, which uses `draw_in_workers` for big traces:
contiguous blocks of ranks, each placed and encoded by one worker, written one after the
other so the output is the same bytes whatever the number of workers (`write_processes` does
the encoding part alone for a plan made here).

Workers ignore Ctrl-C (the parent stops them); a worker that dies (killed, out of memory)
fails the run with one error (`WorkerFailed`), so the writer's `atomic_file` leaves no output.
"""

from __future__ import annotations

import io
import os
import select
import shutil
import signal
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Sequence

from .. import memory
from ..diagnostics import InputError
from ..gc_pause import paused_gc
from ..options import memory_bytes
from .layout_chrome import Plan, PlanStart, Process, ProcessHead, plan_from, write_parts

# Work worth a second process: below this many nodes (or slices), starting workers costs more than it saves.
PARALLEL_MIN_NODES = 200_000

_COPY_CHUNK = 1 << 20


class WorkerFailed(InputError):
    """A forked worker died or failed without an error of its own to report."""


def workers_for(options, work: int) -> int:
    """--jobs, or all cores when `work` (nodes, slices) is big enough and memory allows
    (`memory_allows`); 1 where fork is not available."""
    if not hasattr(os, "fork"):
        return 1
    jobs = getattr(options, "jobs", None) if options is not None else None
    if jobs is not None:
        return max(1, jobs)
    return memory_allows(os.cpu_count() or 1, memory_bytes(options)) if work >= PARALLEL_MIN_NODES else 1


def memory_allows(jobs: int, limit: int | None = None) -> int:
    """Of `jobs` workers, as many as the memory available holds copies of this process: a forked
    worker comes to copy every page of the model it reads (reading an object writes its
    reference count), and so does this process beside it. Benchmark 6 to Chakra takes 850 MB
    for the processes together with 2 workers: in a job limited to 600 MiB the kernel killed
    it; in one process it takes 393 MB and finishes. `limit`: --memory."""
    own = memory.resident()
    available = memory.under_limit(memory.available(), limit, own)
    if not own or not available:
        return jobs
    return max(1, min(jobs, available // own))


def run_forked(task: Callable[[int], Any], jobs: int, what: str = "a worker") -> list[Any]:
    """`task(k)` for k in range(jobs): k = 0 in this process, every other k in a forked child,
    all at once; their results (pickled back through a pipe) in k order.

    An exception raised in a child is raised here; a child that dies without a result (a
    signal, e.g. the out-of-memory killer) raises WorkerFailed. If this process fails or is
    interrupted, the children are killed.
    """
    return run_forked_in_two_rounds(task, None, None, jobs, what)[0]


def run_forked_in_two_rounds(
    first: Callable[[int], Any],
    decide: Callable[[list[Any]], list[Any]] | None,
    second: Callable[[int, Any], Any] | None,
    jobs: int,
    what: str = "a worker",
) -> tuple[list[Any], list[Any]]:
    """`run_forked` with a step between: every worker k runs `first(k)`; once all have, this
    process runs `decide(all their results)`, whose k-th item goes to worker k for `second(k, item)`.
    Returns both rounds' results. Worker 0 is this process: it runs `first(0)` and `second(0, ...)`
    while the children run theirs. Without `decide`, one round."""
    children: list[_Child] = []
    try:
        for k in range(1, jobs):
            children.append(_Child(k, first, second if decide is not None else None))
        firsts = [first(0)] + [child.result(what) for child in children]
        if decide is None:
            return firsts, []
        items = decide(firsts)
        for child, item in zip(children, items[1:]):
            child.send(item)
        seconds = [second(0, items[0])] + [child.result(what) for child in children]
        return firsts, seconds
    finally:
        for child in children:
            child.close()


def run_in_children(task: Callable[[int], Any], jobs: int, what: str, meanwhile: Callable[[], None] | None = None,
                    tick: Callable[[], bool] | None = None) -> list[Any]:
    """`task(k)` for k in range(jobs), each in a forked child, while this process runs
    `meanwhile()` and then, every 0.2 s until the children are done, `tick()` (while it returns
    True). Their results in k order; an exception here, in `meanwhile` or in a child kills the
    children and is raised (a child's as in `run_forked`).

    Not `multiprocessing.Pool`: its `terminate()` (the way out when `meanwhile` fails) can hang
    for ever in a race between its task-feeding thread and the workers' queue lock; a CI run
    stopped on it.
    """
    children: list[_Child] = []
    try:
        for k in range(jobs):
            children.append(_Child(k, task, None))
        if meanwhile is not None:
            meanwhile()
        waiting = [child.results for child in children]
        while tick is not None and waiting and tick():
            ready, _, _ = select.select(waiting, [], [], 0.2)
            waiting = [f for f in waiting if f not in ready]
        return [child.result(what) for child in children]
    finally:
        for child in children:
            child.close()


class _Child:
    """A forked worker and the two pipes to it: results come back pickled, each after its length."""

    def __init__(self, k: int, first: Callable[[int], Any], second: Callable[[int, Any], Any] | None):
        results_in, results_out = os.pipe()
        items_in, items_out = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(results_in)
            os.close(items_out)
            _be_the_child(k, first, second, results_out, items_in)  # never returns
        os.close(results_out)
        os.close(items_in)
        self.pid: int | None = pid
        self.results = os.fdopen(results_in, "rb")
        self.items = os.fdopen(items_out, "wb")

    def send(self, item: Any) -> None:
        _write_message(self.items, item)
        self.items.flush()

    def result(self, what: str) -> Any:
        message = _read_message(self.results)
        if message is None:
            status = self._reap()
            ended = how_it_ended(os.waitstatus_to_exitcode(status[1]))
            raise WorkerFailed(None, f"{what} (process {status[0]}) {ended} before finishing; nothing written")
        ok, value = message
        if not ok:
            raise value
        return value

    def _reap(self) -> tuple[int, int]:
        pid, self.pid = self.pid, None
        _, status = os.waitpid(pid, 0)
        return pid, status

    def close(self) -> None:
        """Reap the child: done by now, else (this process failed, or Ctrl-C) killed first."""
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)  # our own child, not reaped yet: its id is still ours
            except ProcessLookupError:
                pass
            self._reap()
        self.results.close()
        try:
            self.items.close()
        except OSError:  # a killed reader: a broken pipe on the last flush
            pass


def _be_the_child(k: int, first, second, results_fd: int, items_fd: int) -> None:
    # os._exit: the parent's atexit handlers and buffered output are not the child's to run
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
        with os.fdopen(results_fd, "wb") as results, os.fdopen(items_fd, "rb") as items:
            ok = _answer(results, first, k)
            if ok and second is not None:
                item = _read_message(items)
                if item is not None:  # None: the parent gave up
                    _answer(results, second, k, item)
        code = 0
    finally:
        os._exit(code)


def _answer(results, task, *args) -> bool:
    try:
        message = (True, task(*args))
    except BaseException as e:  # noqa: BLE001 - everything goes to the parent
        message = (False, e)
    try:
        _write_message(results, message)
    except Exception:  # an exception or a result that does not pickle: its text
        _write_message(results, (False, WorkerFailed(None, f"{type(message[1]).__name__}: {message[1]}")))
    results.flush()
    return message[0]


def _write_message(f, value: Any) -> None:
    import pickle  # here: a conversion in one process never needs it (start-up time)

    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(len(data).to_bytes(8, "little"))
    f.write(data)


def _read_message(f) -> Any:
    """The next message, or None at the end of the pipe (the other side is gone)."""
    head = f.read(8)
    if len(head) < 8:
        return None
    import pickle

    size = int.from_bytes(head, "little")
    data = f.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def how_it_ended(exitcode: int) -> str:
    """How a worker ended, from its exit code as `os.waitstatus_to_exitcode` and multiprocessing
    give it (killed by a signal: the signal's number, negative)."""
    if exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (out of memory?)" if number == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode}"


# ---------------------------------------------------------------- timelines (Chrome JSON, Perfetto)


def draw(start: PlanStart, out: BinaryIO, options, beside: Path | None,
         write_head: Callable[[Plan, BinaryIO], None],
         make_encoder: Callable[[list[Process]], Callable[[Process], Iterable[list[bytes]]]]) -> Plan:
    """A timeline writer's head and processes for the drawn ranks of `start`: by forked workers
    (`draw_in_workers`) when `workers_for` finds the work big enough or --jobs asks, else here.
    The same bytes either way; returns the plan, the caller writes what follows the processes."""
    jobs = min(workers_for(options, start.drawn_work()), len(start.drawn))
    if jobs > 1:
        return draw_in_workers(start, out, jobs, beside, write_head, make_encoder)
    plan = plan_from(start)
    with paused_gc():
        write_head(plan, out)
        write_processes(out, plan.processes, make_encoder, 1)
    return plan


def draw_in_workers(
    start: PlanStart,
    out: BinaryIO,
    jobs: int,
    beside: Path | None,
    write_head: Callable[[Plan, BinaryIO], None],
    make_encoder: Callable[[list[Process]], Callable[[Process], Iterable[list[bytes]]]],
) -> Plan:
    """Place and print the drawn ranks of `start` (`layout_chrome.start_plan`) in `jobs` forked
    workers; returns the plan (its processes: ProcessHeads, then `start.beside`).

    Each worker (this process is the first) places a contiguous block of the drawn ranks
    (`_Planner.place_rank`) and sends back what crosses ranks: the processes' heads and comm
    slices (`comm_slices`). This process adds those in drawn order, so the flow ids are those
    of one process (`_Planner.assign_flows`), calls `write_head(plan, out)` and sends each
    worker the flows of its processes. The workers then print their blocks with
    `make_encoder(block)` (as `write_processes` does): the first into `out`, the others into
    unnamed temporary files in `beside`, copied into `out` after it in order. `start.beside`
    is printed last, here; the caller writes what follows the processes.
    """
    trace, planner = start.trace, start.planner
    blocks = split_blocks(start.drawn, jobs, start.rank_weight)
    lists_drawn = Counter(id(trace.ranks[r].nodes) for r in start.drawn)
    placed: list[Process] = []  # the block of this process (of each worker)
    plans: list[Plan] = []

    def place(k: int) -> tuple[list[ProcessHead], list]:
        planner.comm_out = comms = []
        placed.extend(planner.place_rank(trace.ranks[r]) for r in blocks[k])
        planner.comm_out = None
        for tpl in planner.templates.values():  # as in one process: args rows only for a list one rank draws
            tpl.drawn = lists_drawn[id(tpl.nodes)]
        return list(map(ProcessHead.of, placed)), comms

    def assign_flows(results: list) -> list[dict]:
        flows_of_pid = planner.flows_of_pid
        heads: list[ProcessHead] = [head for block_heads, _ in results for head in block_heads]
        flow_count = start.number_flows(pair for block_heads, comms in results for pair in zip(block_heads, comms))
        plans.append(start.plan(heads, flow_count))
        items = [{head.pid: flows_of_pid[head.pid] for head in block_heads} for block_heads, _ in results]
        planner.forget_comm()
        write_head(plans[0], out)
        return items

    def print_block(k: int, flows: dict) -> None:
        for process in placed:
            process.flow_pairs = flows[process.pid]
        files.print(k, placed, make_encoder)

    with _BlockFiles(out, len(blocks), beside) as files:
        with paused_gc():  # the workers' too: 100,000s of comm slices and pieces, no cycles
            run_forked_in_two_rounds(place, assign_flows, print_block, len(blocks), "a worker drawing the timeline")
        files.join()
    plan = plans[0]
    if start.beside is not None:
        write_parts(out, make_encoder([start.beside])(start.beside))
    return plan


def write_processes(out: BinaryIO, processes: Sequence, make_encoder: Callable[[Sequence], Callable[[Any], Iterable[list[bytes]]]],
                    jobs: int, beside: Path | None = None, weight: Callable[[Any], int] | None = None) -> None:
    """Write the events of every process into `out`, in order, encoded by `jobs` workers.

    `make_encoder(block)` is called once per worker with its contiguous block of processes
    and returns `encode(process)`, its blocks of pieces, called on each process of the block in
    order: the blocks are written as they come (`layout_chrome.write_parts`). This process
    encodes the first block straight into `out`; each other worker writes its block into an
    unnamed temporary file in `beside` (nothing is left behind, even when killed), copied
    into `out` after the first block. With one block this is the plain loop.
    """
    blocks = split_blocks(processes, jobs, weight)
    with _BlockFiles(out, len(blocks), beside) as files:
        if len(blocks) <= 1:
            files.print(0, processes, make_encoder)
            return
        run_forked(lambda k: files.print(k, blocks[k], make_encoder), len(blocks), "a worker encoding the timeline")
        files.join()


class _BlockFiles:
    """Where each worker prints its block of processes: the first (this process) into `out`,
    worker k > 0 into an unnamed temporary file in `beside` (nothing is left behind, even when
    killed), copied into `out` after the first block, in order (`join`)."""

    def __init__(self, out: BinaryIO, blocks: int, beside: Path | None):
        self.out = out
        self.files = [tempfile.TemporaryFile(dir=beside) for _ in range(blocks - 1)]

    def __enter__(self) -> "_BlockFiles":
        return self

    def __exit__(self, *exc) -> None:
        for f in self.files:
            f.close()

    def print(self, k: int, processes: Sequence, make_encoder: Callable[[Sequence], Callable[[Any], Iterable[list[bytes]]]]) -> None:
        """Worker k's block: the pieces of each process as `make_encoder(processes)` encodes them."""
        target = self.out if k == 0 else open(self.files[k - 1].fileno(), "wb", buffering=1 << 20, closefd=False)
        encode = make_encoder(processes)
        for process in processes:
            write_parts(target, encode(process))
        if target is not self.out:
            target.close()  # flushes into the temporary file

    def join(self) -> None:
        for f in self.files:
            copy_into(out=self.out, source=f)


def split_blocks(items: Sequence, parts: int, weight: Callable[[Any], int] | None = None) -> list[list]:
    """`items` in at most `parts` contiguous, non-empty blocks of about equal total weight."""
    items = list(items)
    parts = max(1, min(parts, len(items)))
    if parts == 1:
        return [items] if items else []
    weights = [max(1, weight(item)) if weight is not None else 1 for item in items]
    total = sum(weights)
    blocks: list[list] = []
    start = done = 0
    for i, w in enumerate(weights):
        done += w
        left = len(items) - (i + 1)  # items after this one
        wanted = parts - len(blocks) - 1  # blocks still to make after closing this one
        # close the block at the k-th share of the weight, keeping an item for every later block
        if wanted and left >= wanted and done * parts >= total * (len(blocks) + 1):
            blocks.append(items[start:i + 1])
            start = i + 1
    blocks.append(items[start:])
    return blocks


def copy_into(out: BinaryIO, source: BinaryIO) -> None:
    """Append the whole of `source` (a file) to `out`: in the kernel when both are plain files."""
    size = os.fstat(source.fileno()).st_size
    copied = 0
    if type(out) is io.BufferedWriter and size:
        out.flush()
        try:
            while copied < size:
                n = os.copy_file_range(source.fileno(), out.fileno(), size - copied, offset_src=copied)
                if n == 0:
                    break
                copied += n
        except OSError:  # no copy_file_range here (another file system, an old kernel)
            if copied:
                raise
        out.seek(0, os.SEEK_END)  # the buffered writer learns where the kernel left the file
    source.seek(copied)
    shutil.copyfileobj(source, out, _COPY_CHUNK)
