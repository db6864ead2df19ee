"""Write outputs so that a reader never sees half a file or a mixed old/new Chakra set.

Single files go to a temporary file in the target directory and are renamed into place when
complete. A Chakra set is written into a temporary directory beside the target and moved in
file by file only once every file is complete; files of an older, larger set with the same
prefix are removed so no stale rank remains.

Temporary names start with '.', so `<prefix>.*.et` globs never see them, and carry the writer's
process id: a run that was killed (SIGKILL cannot be caught) leaves its temporary behind, and
the next write to the same target removes it once that process is gone. Ctrl-C and SIGTERM are
held back while a finished set is moved into place, so a set is never left half old, half new.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import BinaryIO, Iterator

from ..diagnostics import InputError, InterruptedAfterWriting


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside `path` for binary writing; rename it to `path` on success.

    A path that cannot be written (its directory is a file or read-only, the disk is full, a
    directory has the name) is an InputError naming `path`, not a traceback.
    """
    path = Path(path)
    with _write_errors_reported(path):
        directory = _target_directory(path)
        if path.is_dir():
            raise InputError(str(path), "cannot write: it is a directory")
        remove_stale_temporaries(directory, path.name)
        fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=".tmp", dir=directory)
        os.fchmod(fd, _default_file_mode())  # mkstemp makes 0600; users expect what `open` would give
    try:
        with _write_errors_reported(path, only_under=Path(tmp)):
            with os.fdopen(fd, "wb", buffering=1 << 20) as f:
                yield f
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_set(prefix: Path) -> Iterator[Path]:
    """Yield a temporary directory; on success move every file in it next to `prefix`.

    Files in the temporary directory must be named as they should appear in the target
    directory (e.g. `workload.0.et`, `workload.comm_group.json`). A set that cannot be
    written is an InputError naming the prefix (or the file in the way), not a traceback.
    """
    prefix = Path(prefix)
    with _write_errors_reported(prefix):
        directory = _target_directory(prefix)
        remove_stale_temporaries(directory, prefix.name)
        tmpdir = Path(tempfile.mkdtemp(prefix=_temp_prefix(prefix.name), suffix=".tmp", dir=directory))
    try:
        with _write_errors_reported(prefix, only_under=tmpdir):
            yield tmpdir
        with _write_errors_reported(prefix):
            written = {p.name for p in tmpdir.iterdir()}
            for name in written:
                os.chmod(tmpdir / name, _default_file_mode())
            _refuse_directories_in_the_way(directory, written)
            with _signals_held(str(prefix)):
                _remove_stale_set_files(directory, prefix.name, written)
                for name in sorted(written):
                    os.replace(tmpdir / name, directory / name)
                tmpdir.rmdir()
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _target_directory(path: Path) -> Path:
    """The directory `path` goes into, made if missing."""
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _refuse_directories_in_the_way(directory: Path, names: set[str]) -> None:
    """Checked before anything of the old set is removed, so a refused set changes nothing."""
    for name in sorted(names):
        if (directory / name).is_dir():
            raise InputError(str(directory / name), "cannot write: it is a directory")


@contextlib.contextmanager
def _write_errors_reported(target: Path, only_under: Path | None = None) -> Iterator[None]:
    """Turn an OSError while writing `target` into the one-line error a user can act on.

    With `only_under` (the temporary file or folder the caller's code writes into), only errors
    of writing there count: a write to an open file (disk full) names no file, one under the
    temporary path names it. Anything else the caller's code hits is not about the output.
    """
    try:
        yield
    except OSError as e:
        if only_under is not None and e.filename is not None and not _is_under(Path(e.filename), only_under):
            raise
        raise InputError(str(target), f"cannot write: {_why_not_writable(e, target)}") from None


def _is_under(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _why_not_writable(error: OSError, target: Path) -> str:
    for ancestor in target.parents:  # the nearest one that exists decides whether mkdir could work
        if ancestor.exists():
            if not ancestor.is_dir():
                return f"{ancestor} is a file, not a directory"
            break
    return error.strerror or str(error)


def _temp_prefix(name: str) -> str:
    return f".{name}.{os.getpid()}."


def remove_stale_temporaries(directory: Path, name: str) -> list[Path]:
    """Remove temporaries for `name` left in `directory` by runs that were killed; return them.

    A temporary is stale when it is older than this call and the process that made it (the
    id in its name) no longer runs; a concurrent writer's temporary is left alone.
    """
    pattern = re.compile(re.escape(f".{name}.") + r"(\d+)\.[^.]+\.tmp$")
    now = time.time()
    removed = []
    for entry in directory.iterdir():
        match = pattern.match(entry.name)
        if match is None or _process_alive(int(match[1])):
            continue
        try:
            if entry.lstat().st_mtime >= now:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except FileNotFoundError:
            continue  # another run cleaned it first
        removed.append(entry)
    return removed


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or a number we cannot ask about): leave it alone
    return True


@contextlib.contextmanager
def _signals_held(written: str) -> Iterator[None]:
    """Delay Ctrl-C and SIGTERM until the block is done (only the main thread can do this).
    A Ctrl-C held back is then InterruptedAfterWriting(`written`) if the block finished, else a
    KeyboardInterrupt as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # The handlers are swapped rather than the signals blocked: a blocked signal still reaches
    # another thread (a Dask client leaves some, --cluster), whose delivery runs the handler here.
    received: list[int] = []
    old = {signum: signal.signal(signum, lambda signum, frame: received.append(signum))
           for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BaseException:
        _restore(old, received)
        raise
    interrupted = signal.SIGINT in received and old[signal.SIGINT] is signal.default_int_handler
    _restore(old, [signum for signum in received if signum != signal.SIGINT] if interrupted else received)
    if interrupted:  # the block is done, the new output in place: "the earlier one was kept" would be wrong
        raise InterruptedAfterWriting(written)


def _restore(handlers: dict, received: list[int]) -> None:
    """Put the handlers back, then deliver the signals held back, as they would have come."""
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    for signum in received:
        signal.raise_signal(signum)


def _default_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def set_file_name(prefix: str) -> re.Pattern[str]:
    """The names of the files a Chakra set `prefix` writes (or removes as an older set's)."""
    return re.compile(re.escape(prefix) + r"\.(\d+\.et|comm_group\.json)$")


def _remove_stale_set_files(directory: Path, prefix: str, keep: set[str]) -> None:
    """Remove the files of an older set with this prefix that the new set does not replace.

    The old set's comm_group.json goes too: a new set without groups would otherwise be read
    (and validated) with the old set's groups.
    """
    pattern = set_file_name(prefix)
    for p in directory.iterdir():
        if pattern.match(p.name) and p.name not in keep:
            p.unlink()
