"""How much memory this process may still take: what the machine has available, or less when
its control group has a memory limit (a container's, a batch job's under Slurm or Kubernetes).

The workers decide from it whether to keep their ranks' nodes or to build them again for each
step (`builders/per_rank.py`). MemAvailable alone would tell a 4 GB job on a 512 GB node that it
has hundreds of GB, and the kernel would kill it instead. A user may ask for less still
(--memory: `under_limit`), e.g. on a shared login node with no limit of its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

# cgroup v1 writes "no limit" as 2^63 - 1 rounded down to a page.
_V1_NO_LIMIT = 1 << 62


def available(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int:
    """The bytes this process may still allocate, about; 0 when neither the machine nor a
    cgroup tells."""
    known = [m for m in (meminfo_available(proc / "meminfo"), cgroup_room(proc / "self" / "cgroup", cgroups))
             if m is not None]
    return min(known, default=0)


def under_limit(found: int, limit: int | None, own: int | None = None) -> int:
    """`found` (what `available` gave; 0: unknown), or less under `limit`, the bytes the user
    allows the run (--memory): the limit less what this process holds now (`own`, by default
    `resident()`), at least 1 byte."""
    if limit is None:
        return found
    room = max(1, limit - (resident() if own is None else own))
    return min(found, room) if found else room


def resident(statm: Path = Path("/proc/self/statm")) -> int:
    """This process's resident memory now, in bytes; 0 when it cannot be read."""
    try:
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def meminfo_available(meminfo: Path) -> int | None:
    """The machine's MemAvailable in bytes (None when it cannot be read)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_room(self_cgroup: Path, mount: Path) -> int | None:
    """What the tightest memory limit of this process's cgroup and its ancestors leaves (at least
    1 byte), both versions (`self_cgroup`: /proc/self/cgroup; `mount`: where the hierarchies
    are); None when no limit is set or none can be read."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None
    rooms: list[int] = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and not controllers:
            rooms += _rooms(mount, path, _v2_room)
        elif "memory" in controllers.split(","):
            rooms += _rooms(mount / "memory", path, _v1_room)
    return max(1, min(rooms)) if rooms else None


def _rooms(mount: Path, path: str, room_of: Callable[[Path], int | None]) -> list[int]:
    """The room under each limit on the way from the group's folder up to the mount. Inside a
    container (a cgroup namespace) the group's path may not be there: its group is the mount."""
    folder = mount / path.lstrip("/")
    if not folder.is_dir():
        folder = mount
    folders = [folder, *(p for p in folder.parents if p.is_relative_to(mount))]
    return [room for room in map(room_of, folders) if room is not None]


def _v2_room(folder: Path) -> int | None:
    limit = _number(folder / "memory.max")  # ("max": no limit)
    if limit is None:
        return None
    return _room(limit, _number(folder / "memory.current"), _stat(folder / "memory.stat", "inactive_file"))


def _v1_room(folder: Path) -> int | None:
    limit = _number(folder / "memory.limit_in_bytes")
    if limit is None or limit >= _V1_NO_LIMIT:
        return None
    return _room(limit, _number(folder / "memory.usage_in_bytes"), _stat(folder / "memory.stat", "total_inactive_file"))


def _room(limit: int, usage: int | None, reclaimable: int) -> int:
    """The limit less what the group uses, not counting the file pages the kernel drops first
    (usage counts the page cache: the inputs just read)."""
    return limit - max(0, (usage or 0) - reclaimable)


def _number(path: Path) -> int | None:
    """The number a cgroup file holds; None when it is absent, unreadable or not a number."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path, key: str) -> int:
    """One counter of a memory.stat file (0 when absent)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0
