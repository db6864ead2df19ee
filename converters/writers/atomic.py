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


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside `path` for binary writing; rename it to `path` on success."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(directory, path.name)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=".tmp", dir=directory)
    os.fchmod(fd, _default_file_mode())  # mkstemp makes 0600; users expect what `open` would give
    try:
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
    directory (e.g. `workload.0.et`, `workload.comm_group.json`).
    """
    prefix = Path(prefix)
    directory = prefix.parent if str(prefix.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(directory, prefix.name)
    tmpdir = Path(tempfile.mkdtemp(prefix=_temp_prefix(prefix.name), suffix=".tmp", dir=directory))
    try:
        yield tmpdir
        written = {p.name for p in tmpdir.iterdir()}
        for name in written:
            os.chmod(tmpdir / name, _default_file_mode())
        with _signals_held():
            _remove_stale_set_files(directory, prefix.name, written)
            for name in sorted(written):
                os.replace(tmpdir / name, directory / name)
            tmpdir.rmdir()
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


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
def _signals_held() -> Iterator[None]:
    """Delay Ctrl-C and SIGTERM until the block is done (only the main thread can do this)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _default_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _remove_stale_set_files(directory: Path, prefix: str, keep: set[str]) -> None:
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.et$")
    for p in directory.iterdir():
        if pattern.match(p.name) and p.name not in keep:
            p.unlink()
