"""The memory the workers plan with (`converters/memory.py`): the machine's MemAvailable, or less
under a container's or a batch job's cgroup limit, on fake /proc and /sys/fs/cgroup trees, or
under the user's --memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from converters import memory
from converters.builders import per_rank

GIB = 1 << 30


def fake_proc(tmp_path: Path, cgroup: str, available_kib: int | None = 64 * (1 << 20)) -> Path:
    """A /proc with a meminfo (MemAvailable, 64 GiB by default) and this process's cgroup lines."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    if available_kib is not None:
        (proc / "meminfo").write_text(f"MemTotal:       {2 * available_kib} kB\nMemAvailable:   {available_kib} kB\n")
    return proc


def group(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text + "\n")


def test_a_container_v2_limit_leaves_less_than_the_machine(tmp_path):
    # a Docker container: its own group is the mount (cgroup namespace: "0::/"); the page cache
    # of the inputs it read (inactive_file) does not count as used
    mount = tmp_path / "cgroup"
    group(mount, memory_max=str(4 * GIB), memory_current=str(GIB + GIB // 2),
          memory_stat=f"anon {GIB}\ninactive_file {GIB // 2}\nactive_file 4096")
    proc = fake_proc(tmp_path, "0::/\n")
    assert memory.available(proc, mount) == 3 * GIB
    assert memory.meminfo_available(proc / "meminfo") == 64 * GIB


def test_a_batch_job_limit_on_an_ancestor_counts(tmp_path):
    # Slurm: the limit is on the job's group, the process in its step's group below it, without one
    mount = tmp_path / "cgroup"
    group(mount / "system.slice", memory_max="max", memory_current=str(10 * GIB))
    group(mount / "slurm" / "job_7", memory_max=str(2 * GIB), memory_current=str(GIB // 4))
    group(mount / "slurm" / "job_7" / "step_0", memory_max="max", memory_current=str(GIB // 4))
    proc = fake_proc(tmp_path, "0::/slurm/job_7/step_0\n")
    assert memory.available(proc, mount) == 2 * GIB - GIB // 4
    # a tighter limit below it wins
    group(mount / "slurm" / "job_7" / "step_0", memory_max=str(GIB), memory_current=str(GIB // 4))
    assert memory.available(proc, mount) == GIB - GIB // 4


def test_a_v1_memory_limit_and_v1_s_no_limit(tmp_path):
    mount = tmp_path / "cgroup"
    leaf = mount / "memory" / "docker" / "abc"
    group(leaf, memory_limit_in_bytes=str(8 * GIB), memory_usage_in_bytes=str(3 * GIB),
          memory_stat=f"cache {2 * GIB}\ninactive_file 1\ntotal_inactive_file {GIB}")
    group(mount / "memory", memory_limit_in_bytes="9223372036854771712", memory_usage_in_bytes=str(50 * GIB))
    proc = fake_proc(tmp_path, "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n")
    assert memory.available(proc, mount) == 6 * GIB
    group(leaf, memory_limit_in_bytes="9223372036854771712")  # none: the machine's figure
    assert memory.available(proc, mount) == 64 * GIB


def test_a_group_over_its_limit_has_one_byte_and_the_machine_can_be_tighter(tmp_path):
    mount = tmp_path / "cgroup"
    group(mount, memory_max=str(GIB), memory_current=str(2 * GIB))
    assert memory.available(fake_proc(tmp_path / "a", "0::/\n"), mount) == 1  # (0 would mean "unknown")
    group(mount, memory_max=str(64 * GIB), memory_current="0")
    assert memory.available(fake_proc(tmp_path / "b", "0::/\n", available_kib=1 << 20), mount) == GIB


def test_what_cannot_be_read_is_not_a_limit(tmp_path):
    mount = tmp_path / "cgroup"
    group(mount, memory_max="garbage", memory_current=str(GIB))
    assert memory.available(fake_proc(tmp_path / "a", "0::/\n"), mount) == 64 * GIB
    # no cgroup file, no meminfo: nothing is known
    proc = tmp_path / "b" / "proc"
    proc.mkdir(parents=True)
    assert memory.available(proc, mount) == 0
    # a group with no memory.current counts as using nothing; a path not under the mount is the mount
    group(mount, memory_max=str(5 * GIB))
    (mount / "memory.current").unlink()
    assert memory.available(fake_proc(tmp_path / "c", "0::/elsewhere/x\n"), mount) == 5 * GIB


def test_the_workers_plan_with_this_figure(tmp_path, monkeypatch):
    # what decides whether the workers keep a big log's ranks or build them one at a time
    log = tmp_path / "rank0.log"
    log.write_bytes(b"x" * 1000)
    monkeypatch.setattr(per_rank, "memory_available", lambda: 64 * GIB)
    assert not per_rank.too_big_for_one_process([log])
    monkeypatch.setattr(per_rank, "memory_available", lambda: 11_000)  # a job limited below 2 x 6 x 1000 bytes
    assert per_rank.too_big_for_one_process([log])
    assert per_rank.available_memory() == 11_000


def test_this_process_s_resident_memory(tmp_path):
    import os

    statm = tmp_path / "statm"
    statm.write_text("5000 1000 300 10 0 700 0\n")  # size, resident, shared... in pages
    assert memory.resident(statm) == 1000 * os.sysconf("SC_PAGE_SIZE")
    statm.write_text("")
    assert memory.resident(statm) == 0
    assert memory.resident(tmp_path / "none") == 0
    assert memory.resident() > 10 << 20  # this interpreter, with pytest loaded


def test_the_user_s_limit_less_what_this_process_holds(monkeypatch):
    # --memory: a budget for the run, of which this process already holds some
    assert memory.under_limit(64 * GIB, None, own=100 << 20) == 64 * GIB  # no limit: as found
    assert memory.under_limit(64 * GIB, 400 << 20, own=100 << 20) == 300 << 20
    assert memory.under_limit(200 << 20, 400 << 20, own=100 << 20) == 200 << 20  # the machine is tighter
    assert memory.under_limit(0, 400 << 20, own=100 << 20) == 300 << 20  # the machine unknown: the limit
    assert memory.under_limit(64 * GIB, 400 << 20, own=500 << 20) == 1  # already over: 1 byte, not "unknown"
    monkeypatch.setattr(memory, "resident", lambda: 150 << 20)
    assert memory.under_limit(64 * GIB, 400 << 20) == 250 << 20


def test_a_size_as_users_write_it():
    from converters.options import parse_size

    for text, size in (("400M", 400 << 20), ("400MiB", 400 << 20), ("400mb", 400 << 20), ("1.5G", 3 << 29),
                       ("2 GiB", 2 * GIB), ("512k", 512 << 10), ("1T", 1 << 40), ("1000000", 1_000_000),
                       ("100B", 100), (" 3G ", 3 * GIB)):
        assert parse_size(text) == size, text
    for text in ("", "G", "12Q", "-1G", "1e9", "4 MMB", "1.G"):
        with pytest.raises(ValueError, match="expected a size such as 400M or 2G"):
            parse_size(text)
