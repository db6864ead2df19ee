"""Work split over forked workers that share this process's memory copy-on-write.

A writer that has made its whole plan in this process (the model, the processes of a
timeline) forks workers that encode parts of it; the parts need no pickling on the way in,
and only their bytes (in temporary files) and small results come back. The Chakra writer
forks one worker per share of ranks (`chakra.write_ranks_in_parallel`); the timeline writers
use `write_processes`: contiguous blocks of processes, each encoded by one worker, written
one after the other so the output is the same bytes whatever the number of workers.

Workers ignore Ctrl-C (the parent stops them); a worker that dies (killed, out of memory)
fails the run with one error (`WorkerFailed`), so the writer's `atomic_file` leaves no output.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Sequence

from ..diagnostics import InputError
from .layout_chrome import write_parts

# Work worth a second process: below this many nodes (or slices), starting workers costs more than it saves.
PARALLEL_MIN_NODES = 200_000

_COPY_CHUNK = 1 << 20


class WorkerFailed(InputError):
    """A forked worker died or failed without an error of its own to report."""


def workers_for(options, work: int) -> int:
    """--jobs, or all cores when `work` (nodes, slices) is big enough; 1 where fork is not available."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    jobs = getattr(options, "jobs", None) if options is not None else None
    if jobs is not None:
        return max(1, jobs)
    return (os.cpu_count() or 1) if work >= PARALLEL_MIN_NODES else 1


def run_forked(task: Callable[[int], Any], jobs: int, what: str = "a worker") -> list[Any]:
    """`task(k)` for k in range(jobs): k = 0 in this process, every other k in a forked child,
    all at once; their results (pickled back through a pipe) in k order.

    An exception raised in a child is raised here; a child that dies without a result (a
    signal, e.g. the out-of-memory killer) raises WorkerFailed. If this process fails or is
    interrupted, the children are killed.
    """
    children: list[tuple[int, int]] = []  # (pid, read end of its result pipe)
    try:
        for k in range(1, jobs):
            children.append(_fork_child(task, k))
        results = [task(0)]
        while children:
            pid, fd = children.pop(0)  # reaped by _result_of, whatever it finds
            results.append(_result_of(pid, fd, what))
        return results
    finally:
        for pid, fd in children:  # only on failure: children not reaped yet
            _stop(pid, fd)


def _fork_child(task: Callable[[int], Any], k: int) -> tuple[int, int]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        return pid, read_end
    # the child: never returns; os._exit skips the parent's atexit handlers and buffered output
    code = 1
    try:
        os.close(read_end)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
        try:
            message = pickle.dumps((True, task(k)))
        except BaseException as e:  # noqa: BLE001 - everything goes to the parent
            try:
                message = pickle.dumps((False, e))
            except Exception:  # an exception that does not pickle: its text
                message = pickle.dumps((False, WorkerFailed(None, f"{type(e).__name__}: {e}")))
        with open(write_end, "wb") as pipe:
            pipe.write(message)
        code = 0
    finally:
        os._exit(code)


def _result_of(pid: int, fd: int, what: str) -> Any:
    try:
        with open(fd, "rb") as pipe:
            message = pipe.read()
    except BaseException:  # Ctrl-C while waiting: stop it
        _kill(pid)
        raise
    _, status = os.waitpid(pid, 0)
    if not message:
        raise WorkerFailed(None, f"{what} (process {pid}) {_how_it_ended(status)} before finishing; nothing written")
    ok, value = pickle.loads(message)
    if not ok:
        raise value
    return value


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (out of memory?)" if number == signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {os.waitstatus_to_exitcode(status)}"


def _stop(pid: int, fd: int) -> None:
    _kill(pid)
    os.close(fd)


def _kill(pid: int) -> None:
    """End a child of ours that is not reaped yet (its id cannot be another process's)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


# ---------------------------------------------------------------- timeline processes


def write_processes(out: BinaryIO, processes: Sequence, make_encoder: Callable[[Sequence], Callable[[Any], list[bytes]]],
                    jobs: int, beside: Path | None = None, weight: Callable[[Any], int] | None = None) -> None:
    """Write the events of every process into `out`, in order, encoded by `jobs` workers.

    `make_encoder(block)` is called once per worker with its contiguous block of processes
    and returns `encode(process) -> list[bytes]`, called on each process of the block in
    order: the pieces are written as they come (`layout_chrome.write_parts`). This process
    encodes the first block straight into `out`; each other worker writes its block into an
    unnamed temporary file in `beside` (nothing is left behind, even when killed), copied
    into `out` after the first block. With one block this is the plain loop.
    """
    blocks = split_blocks(processes, jobs, weight)
    if len(blocks) <= 1:
        encode = make_encoder(processes)
        for process in processes:
            write_parts(out, encode(process))
        return
    files = [tempfile.TemporaryFile(dir=beside) for _ in blocks[1:]]
    try:
        def encode_block(k: int) -> None:
            if k == 0:
                target, own = out, None
            else:
                target = own = open(files[k - 1].fileno(), "wb", buffering=1 << 20, closefd=False)
            encode = make_encoder(blocks[k])
            for process in blocks[k]:
                write_parts(target, encode(process))
            if own is not None:
                own.close()  # flushes into the temporary file

        run_forked(encode_block, len(blocks), "a worker encoding the timeline")
        for f in files:
            copy_into(out, f)
    finally:
        for f in files:
            f.close()


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
