"""Write outputs so that a reader never sees half a file or a mixed old/new Chakra set.

Single files go to a temporary file in the target directory and are renamed into place when
complete. A Chakra set is written into a temporary directory beside the target and moved in
file by file only once every file is complete; files of an older, larger set with the same
prefix are removed so no stale rank remains.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside `path` for binary writing; rename it to `path` on success."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
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
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.", suffix=".tmp", dir=directory))
    try:
        yield tmpdir
        written = {p.name for p in tmpdir.iterdir()}
        for name in written:
            os.chmod(tmpdir / name, _default_file_mode())
        _remove_stale_set_files(directory, prefix.name, written)
        for name in sorted(written):
            os.replace(tmpdir / name, directory / name)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _default_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _remove_stale_set_files(directory: Path, prefix: str, keep: set[str]) -> None:
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.et$")
    for p in directory.iterdir():
        if pattern.match(p.name) and p.name not in keep:
            p.unlink()
