"""Per-rank logs read file by file: in this process, over --jobs processes and on a Dask cluster,
always the same bytes out; the reader's fast paths agree with its general parser."""

from __future__ import annotations

import gc
import os
import re
import signal
import time
import weakref
from pathlib import Path

import pytest

import converters as etc
from conftest import SAMPLES, run_cli
from converters.builders import megatron
from converters.builders import per_rank
from converters.builders.per_rank import PerRankFormat
from converters.diagnostics import Diagnostics, InputError
from converters.model import NodeKind
from converters.options import Options
from converters.readers import megatron_log
from helpers.megatron_synth import replace_in_op, run_lines, write_run

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OUTPUTS = {"json": ["-o", "t.json"], "pftrace": ["-o", "t.pftrace"], "chakra": ["--to", "chakra", "--force", "-o", "set/w"]}


def logs(tmp_path: Path) -> list[Path]:
    """8 ranks (4 stages x TP 2), with an unknown dtype on two ranks so warnings and assumptions
    come from several workers and must be merged in rank order."""
    edit = replace_in_op(3, "recv_forward", 1, "torch.float32", "torch.weird")
    paths = write_run(tmp_path / "logs", stages=4, tp=2, microbatches=4, edit=edit)
    text = paths[6].read_text().replace("input__dtype=torch.float32", "input__dtype=torch.odd", 1)
    paths[6].write_text(text)
    return paths


def outputs(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def convert_each_way(tmp_path: Path, paths: list[Path], name: str, *extra: str) -> tuple[dict[str, bytes], str]:
    out = tmp_path / name
    out.mkdir()
    stderr = ""
    for kind, args in OUTPUTS.items():
        args = [a if not a.startswith(("t.", "set/")) else str(out / a) for a in args]
        result = run_cli(*paths, *args, *extra)
        assert result.code == 0, result.stderr
        stderr += result.stderr
    return outputs(out), stderr


def test_jobs_give_the_same_bytes_and_warnings(tmp_path):
    paths = logs(tmp_path)
    one, said_one = convert_each_way(tmp_path, paths, "one", "--jobs", "1")
    three, said_three = convert_each_way(tmp_path, paths, "three", "--jobs", "3")
    assert len(one) == 2 + 8 + 1  # t.json, t.pftrace, 8 rank files and comm_group.json
    assert one == three
    assert said_one == said_three
    assert "torch.weird" in said_one and "torch.odd" in said_one


def test_jobs_report_the_first_bad_file_in_the_order_given(tmp_path):
    paths = logs(tmp_path)
    for rank in (2, 5):
        lines = paths[rank].read_text().splitlines()
        lines[3] = lines[3].replace("duration=", "duration=x")
        paths[rank].write_text("\n".join(lines) + "\n")
    result = run_cli(*paths, "--jobs", "2", "-o", tmp_path / "t.json")
    assert result.code == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"et-convert: error: {paths[2]}:4: duration: expected milliseconds")
    assert not (tmp_path / "t.json").exists()


def test_in_process_and_worker_builds_give_the_same_model(tmp_path):
    paths = logs(tmp_path)
    here = etc.read(paths, "megatron-log", diagnostics=Diagnostics())
    there = etc.read(paths, "megatron-log", diagnostics=Diagnostics(), jobs=2)
    assert here.groups == there.groups
    assert here.assumptions == there.assumptions
    assert {r: rank.nodes for r, rank in here.ranks.items()} == {r: rank.nodes for r, rank in there.ranks.items()}


# ---------------------------------------------------------------- the reader's fast paths

def parse_or_error(line: str):
    try:
        return megatron_log.parse_line(line, "f.log", 1)
    except InputError as e:
        return str(e)


def parsed_both_ways(monkeypatch, line: str):
    fast = parse_or_error(line)
    monkeypatch.setattr(megatron_log, "_plain_string_list", lambda text: None)
    monkeypatch.setattr(megatron_log, "_plain_fields", lambda body: None)
    monkeypatch.setattr(megatron_log, "_plain_ms", lambda text: None)
    monkeypatch.setattr(megatron_log, "_timed_sub_ops", lambda text: None)
    general = parse_or_error(line)
    monkeypatch.undo()
    return fast, general


@pytest.mark.parametrize("line", [
    *(SAMPLES / "megatron_rank4_pp_tp2.log").read_text().splitlines()[:12],
    *(SAMPLES / "megatron_rank2_moe_scaling.log").read_text().splitlines()[:12],
    *run_lines(stages=2, tp=2, microbatches=2)[0],
    # a description with a comma and an unknown key inside it, an extra key, odd spacing, a 7-decimal time
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=1.5,description=a, b=c,timestamp=7.0,sub_operations=[])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=1.5,timestamp=7.0,zeta=1,sub_operations=['duration=0.1,timestamp=6.9,group=tp'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=1.5,timestamp=7.0,sub_operations=['duration=0.1, timestamp=6.9', 'duration=0.1,timestamp=6.9,group=tp,group=dp'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=1.5,timestamp=7.0,sub_operations=['duration=0.1,timestamp=6.9,duration=2'])",
    "rank:0:forward_step(stage_id=0,batch_id=0,duration=1.0000005,timestamp=7.00000049,sub_operations=[])",
])
def test_fast_paths_read_lines_as_the_general_parser_does(monkeypatch, line):
    fast, general = parsed_both_ways(monkeypatch, line)
    assert fast == general


def test_repeated_sub_operations_keep_their_own_times():
    line = ("rank:0:forward_step(stage_id=0,batch_id=0,duration=9,timestamp=10,sub_operations=["
            "'duration=0.25,timestamp=2,group=tp,comm_func=allreduce', 'duration=0.5,timestamp=3.125,group=tp,comm_func=allreduce'])")
    record = megatron_log.parse_line(line, "f.log", 1)
    assert [(s.duration_ns, s.stamp_ns, s.group) for s in record.sub_ops] == [(250_000, 2_000_000, "tp"), (500_000, 3_125_000, "tp")]


# ---------------------------------------------------------------- Dask

def test_cluster_needs_a_valid_address(tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    result = run_cli(*logs(tmp_path), "--cluster", "local:zero", "-o", tmp_path / "t.json")
    assert result.code == 2
    assert result.stderr.strip() == ("et-convert: error: --cluster local:zero: expected local:N with N >= 1 workers, "
                                     "or tcp://host:port")


def test_local_cluster_of_two_processes_writes_the_local_bytes(tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    paths = logs(tmp_path)
    here, said_here = convert_each_way(tmp_path, paths, "here")
    dask, said_dask = convert_each_way(tmp_path, paths, "dask", "--cluster", "local:2")
    assert here == dask
    assert said_here == said_dask


def _dying_survey(path, options, name):
    if path.name == "rank3.log":
        os._exit(1)  # the worker process dies, as when a machine is lost
    return megatron.survey_file(path, options, name)


def test_a_worker_that_dies_fails_the_run_with_one_error_and_no_output(tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    import dask

    from converters.builders import per_rank

    paths = logs(tmp_path)
    dying = PerRankFormat(_dying_survey, megatron.plan, megatron.build_file, megatron.merge)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with pytest.raises(InputError) as caught:
            per_rank.run(dying, paths, Options(cluster="local:2"), Diagnostics())
    # the first file (in the order given) whose work was on the lost worker is named
    assert re.fullmatch(rf"--cluster local:2: a worker was lost while reading {tmp_path}/logs/rank\d\.log "
                        r"\(KilledWorker\); nothing was written", str(caught.value))


def _survey_with_the_collector_off(path, options, name):
    if gc.isenabled():
        raise InputError(str(path), "the cyclic GC is on in this worker's survey")
    return megatron.survey_file(path, options, name)


def _build_with_the_collector_off(*args):
    if gc.isenabled():
        raise InputError(None, "the cyclic GC is on in this worker's build")
    return megatron.build_file(*args)


def test_dask_workers_survey_and_build_with_the_collector_paused(tmp_path):
    # as local workers do (forked from a process that paused it): with it on, a profiler
    # trace's survey spent 40% of its time in the collector
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    paths = write_run(tmp_path / "logs", stages=2, tp=1, microbatches=2)
    fmt = PerRankFormat(_survey_with_the_collector_off, megatron.plan, _build_with_the_collector_off, megatron.merge)
    trace = per_rank.run(fmt, paths, Options(cluster="local:1"), Diagnostics())
    assert sorted(trace.ranks) == [0, 1] and all(rank.nodes for rank in trace.ranks.values())


# ---------------------------------------------------------------- Chakra sets written by the workers

def clean_logs(tmp_path: Path) -> list[Path]:
    """8 ranks with nothing the gate reports: the workers write the rank files."""
    return write_run(tmp_path / "clean", stages=4, tp=2, microbatches=4)


def chakra_set(tmp_path: Path, paths: list[Path], name: str, *extra: str) -> tuple[dict[str, bytes], str]:
    out = tmp_path / name
    result = run_cli(*paths, "--to", "chakra", "-o", out / "w", *extra)
    assert result.code == 0, result.stderr
    return outputs(out), result.stderr


@pytest.mark.parametrize("where", [["--jobs", "2"], ["--cluster", "local:2"]], ids=["jobs", "cluster"])
@pytest.mark.parametrize("logs_of", ["sample", "synthetic"])
def test_workers_write_the_rank_files_of_a_clean_set_with_the_local_bytes(tmp_path, monkeypatch, where, logs_of):
    if where[0] == "--cluster":
        pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    from converters.writers import chakra

    # 4 ranks (TP 1, PP 2, DP 2) / 8 ranks (TP 2, PP 4, DP 1): collectives of one member in both
    paths = sorted((SAMPLES / "megatron_tp1_pp2_dp2").glob("*.log")) if logs_of == "sample" else clean_logs(tmp_path)
    here, said_here = chakra_set(tmp_path, paths, "here", "-v")
    there, said_there = chakra_set(tmp_path, paths, "there", "-v", *where)
    assert len(here) == len(paths) + 1 and here == there
    assert said_here == said_there
    assert "one-member groups kept as compute" in said_here  # counted across the workers' ranks
    # the same through the API: the workers wrote the ranks (no local fallback); this process
    # holds only their communication skeletons
    taken = []
    real = chakra.finish_set
    monkeypatch.setattr(chakra, "finish_set", lambda *a: taken.append(1) or real(*a))
    option = {"jobs": 2} if where[0] == "--jobs" else {"cluster": "local:2"}
    trace = etc.convert(paths, tmp_path / "api" / "w", to="chakra", diagnostics=Diagnostics(), **option)
    assert taken == [1]
    assert outputs(tmp_path / "api") == here
    assert all(n.kind is not NodeKind.COMPUTE for rank in trace.ranks.values() for n in rank.nodes)


@pytest.mark.parametrize("where", [["--jobs", "2"], ["--cluster", "local:2"]], ids=["jobs", "cluster"])
def test_workers_write_a_partial_set_of_logs_with_the_local_bytes_and_warning(tmp_path, monkeypatch, where):
    # logs of 4 of a job's 8 ranks: the gate notes it (I024) and warns (W025); the workers'
    # files are kept (before, every rank came back here to be gated and written again)
    if where[0] == "--cluster":
        pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    from converters.writers import chakra

    paths = clean_logs(tmp_path)[:4]
    here, said_here = chakra_set(tmp_path, paths, "here")
    there, said_there = chakra_set(tmp_path, paths, "there", *where)
    assert len(here) == 5 and here == there
    assert said_here == said_there
    assert "partial Chakra set: writing a Chakra set of ranks 0-3 of 8" in said_here
    taken = []
    real = chakra.finish_set
    monkeypatch.setattr(chakra, "finish_set", lambda *a: taken.append(1) or real(*a))
    option = {"jobs": 2} if where[0] == "--jobs" else {"cluster": "local:2"}
    diagnostics = Diagnostics()
    etc.convert(paths, tmp_path / "api" / "w", to="chakra", diagnostics=diagnostics, **option)
    assert taken == [1]  # written by the workers: no local fallback
    assert outputs(tmp_path / "api") == here
    assert [m for m in diagnostics.messages() if "partial Chakra set" in m]
    # short of memory: each rank's file written in the step that checks it, then its metadata
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 0)
    monkeypatch.setattr(per_rank, "REREAD_MEMORY_SHARE", 0)
    short = Diagnostics()
    etc.convert(paths, tmp_path / "short" / "w", to="chakra", diagnostics=short, **option)
    assert taken == [1, 1]
    assert outputs(tmp_path / "short") == here
    assert short.messages() == diagnostics.messages()


def test_a_set_the_gate_reports_on_is_gated_and_written_as_a_local_run_does(tmp_path):
    paths = clean_logs(tmp_path)
    lines = paths[2].read_text().splitlines()
    lost = next(i for i, line in enumerate(lines) if "send_forward" in line)
    paths[2].write_text("\n".join(lines[:lost] + lines[lost + 1:]) + "\n")  # a send its receiver waits for
    here = run_cli(*paths, "--to", "chakra", "-o", tmp_path / "here" / "w")
    there = run_cli(*paths, "--to", "chakra", "--jobs", "2", "-o", tmp_path / "there" / "w")
    assert here.code == there.code == 2
    assert "refusing to write a Chakra set" in here.stderr and here.stderr == there.stderr
    assert not (tmp_path / "there").exists()


def _dying_writer(rank, job):
    if rank.rank == 5:
        os._exit(1)  # the worker process dies after writing some ranks' files
    return _real_writer(rank, job)


_real_writer = None


def test_a_jobs_worker_that_dies_while_writing_leaves_no_set(tmp_path, monkeypatch):
    from converters.writers import chakra

    global _real_writer
    _real_writer = chakra.write_rank_file
    paths = clean_logs(tmp_path)
    monkeypatch.setattr(chakra, "write_rank_file", _dying_writer)  # the workers are forked with it
    out = tmp_path / "out"
    with pytest.raises(InputError) as caught:
        etc.convert(paths, out / "w", to="chakra", diagnostics=Diagnostics(), jobs=2)
    assert re.fullmatch(rf"a worker process died while writing {tmp_path}/clean/rank\d\.log or a file after it: "
                        r"it exited with code 1", str(caught.value))
    assert not out.exists()


def _full_disk(path, chunks):
    raise OSError(28, "No space left on device", str(path))


def test_a_worker_that_cannot_write_its_rank_file_fails_the_run_with_one_error_and_no_set(tmp_path, monkeypatch):
    from converters.writers import chakra

    paths = clean_logs(tmp_path)
    monkeypatch.setattr(chakra, "write_file", _full_disk)  # the workers are forked with it
    out = tmp_path / "out"
    with pytest.raises(InputError) as caught:
        etc.convert(paths, out / "w", to="chakra", diagnostics=Diagnostics(), jobs=2)
    assert re.fullmatch(rf"{out}/w: cannot write rank [0246]'s file on a worker: No space left on device "
                        r"\(the output folder must be writable by every worker under this path\)", str(caught.value))
    assert not out.exists()


def test_a_local_cluster_says_nothing_when_another_dask_holds_its_default_port(tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    import socket

    with socket.socket() as other:  # another Dask's scheduler on this machine (8787 is its default)
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            other.bind(("0.0.0.0", 8787))
            other.listen(1)
        except OSError:
            pass  # someone already holds it: the same situation
        result = run_cli(*logs(tmp_path)[:2], "--cluster", "local:1", "-o", tmp_path / "t.json", "-q")
    assert (result.code, result.stderr) == (0, "")


# ---------------------------------------------------------------- workers that let go of nodes

def test_a_worker_holds_its_files_while_they_fit_and_never_lets_go_of_just_one():
    assert per_rank.files_to_hold([10, 10, 10], 30) == [True, True, True]
    assert per_rank.files_to_hold([10, 10, 10, 10], 20) == [True, True, False, False]
    assert per_rank.files_to_hold([10, 30, 5], 20) == [True, False, False]  # in order: no file skipped ahead
    # one file let go would be built alone at each step, as much as keeping it: kept
    assert per_rank.files_to_hold([10, 10, 10], 20) == [True, True, True]
    assert per_rank.files_to_hold([100], 0) == [True]
    assert per_rank.files_to_hold([], 0) == []
    # all or none: a Chakra set's workers (rank_files.py)
    assert per_rank.files_to_hold([10, 10, 10, 10], 20, all_or_none=True) == [False] * 4
    assert per_rank.files_to_hold([10, 10, 10], 30, all_or_none=True) == [True] * 3
    assert per_rank.files_to_hold([10, 10, 10], 20, all_or_none=True) == [True] * 3  # (never just one let go)


def test_the_workers_of_a_chakra_set_keep_every_file_or_none_and_write_the_local_bytes(tmp_path, monkeypatch):
    """A budget of about two of a worker's four logs: a timeline's workers keep two, a Chakra
    set's none (its ranks are built only twice); the set's bytes are the local run's."""
    paths = clean_logs(tmp_path)
    local = etc.convert(paths, tmp_path / "here" / "w", to="chakra", diagnostics=Diagnostics(), jobs=1)
    holds = []
    spied = per_rank.files_to_hold
    monkeypatch.setattr(per_rank, "files_to_hold", lambda *args, **kw: holds.append(spied(*args, **kw)) or holds[-1])
    two = sum(sorted(p.stat().st_size for p in paths)[-2:])
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", two)
    monkeypatch.setattr(per_rank, "available_memory", lambda: 1 << 40)  # (not short of memory)
    etc.convert(paths, tmp_path / "t.json", diagnostics=Diagnostics(), jobs=2)
    assert holds == [[True, True, False, False]] * 2
    holds.clear()
    steps = []
    started = per_rank.ProcessWorkers.start
    monkeypatch.setattr(per_rank.ProcessWorkers, "start",
                        lambda self, step, arg, doing: steps.append(doing) or started(self, step, arg, doing))
    there = etc.convert(paths, tmp_path / "there" / "w", to="chakra", diagnostics=Diagnostics(), jobs=2)
    assert holds == [[False] * 4] * 2
    # none kept: each rank is built once to be checked and written (its file then gets the
    # metadata every rank carries, known only once all are checked: source.ranks, sha256...)
    assert steps == ["building", "finishing", "checking"]
    assert there.metadata == local.metadata
    assert outputs(tmp_path / "there") == outputs(tmp_path / "here")
    # all kept: checked, then written while this process checks the set
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 1 << 30)
    steps.clear()
    etc.convert(paths, tmp_path / "kept" / "w", to="chakra", diagnostics=Diagnostics(), jobs=2)
    assert steps == ["building", "finishing", "checking", "writing"]
    assert outputs(tmp_path / "kept") == outputs(tmp_path / "here")


@pytest.mark.parametrize("kernel_copy", [True, False], ids=["copy_file_range", "buffer"])
def test_rank_files_written_before_the_set_was_known_get_its_metadata(tmp_path, monkeypatch, kernel_copy):
    # what the workers write in the checking step when memory is short: each rank's file with
    # the metadata known then (no ranks, no sha256, no assumption of the one-member pass yet)
    import os
    from dataclasses import replace

    from converters.writers import chakra

    trace = etc.read(clean_logs(tmp_path), diagnostics=Diagnostics())
    assert trace.assumptions and trace.ranks and trace.source.sha256  # (what the early job lacks)
    etc.write(trace, tmp_path / "here" / "w", "chakra", diagnostics=Diagnostics())
    early = replace(trace, ranks={}, assumptions=trace.assumptions[:1], source=replace(trace.source, sha256=""))
    tmpdir = tmp_path / "there"
    tmpdir.mkdir()
    job = chakra.rank_file_job(early, tmpdir / "w", tmpdir)
    for rank in trace.ranks.values():
        chakra.write_rank_file(rank, job)
    assert (tmpdir / "w.0.et").read_bytes() != (tmp_path / "here" / "w.0.et").read_bytes()
    if not kernel_copy:
        def refused(*args):
            raise OSError(18, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", refused)
    chakra.rewrite_common_metadata(trace, tmpdir, "w", job)
    here = {name: data for name, data in outputs(tmp_path / "here").items() if name.endswith(".et")}
    assert outputs(tmpdir) == here and len(here) == len(trace.ranks)


def test_a_format_that_reads_its_files_again_keeps_a_share_of_the_memory():
    from converters.builders import kineto

    gib = 1 << 30
    assert per_rank.hold_budget(megatron.MEGATRON, 16 * gib) == per_rank.HOLD_BYTES_PER_WORKER  # builds from records
    assert per_rank.hold_budget(kineto.KINETO, 16 * gib) == 2 * gib  # profiler traces: an eighth
    assert per_rank.hold_budget(kineto.KINETO, 0) == per_rank.HOLD_BYTES_PER_WORKER  # memory unknown
    # short of memory, a worker of logs keeps none of its files: it builds each rank again per step
    assert per_rank.hold_budget(megatron.MEGATRON, 16 * gib, short=True) == 0
    assert per_rank.hold_budget(kineto.KINETO, 16 * gib, short=True) == 2 * gib  # its budget is already a share
    assert per_rank.available_memory() > 0


def _kept_as(fmt, options, kept, _):
    return kept, type(kept).__name__


@pytest.mark.parametrize("budget, held", [(None, "list"), (0, "LetGo")], ids=["default", "nothing"])
@pytest.mark.parametrize("logs_of", ["megatron", "profiler"])
def test_workers_keep_their_finished_ranks_or_build_them_again_for_each_step(tmp_path, monkeypatch, budget, held,
                                                                             logs_of):
    from converters.builders import kineto

    # 8 logs of about 60 KB, or 4 profiler traces: 2 or more files per worker
    fmt, paths = ((megatron.MEGATRON, clean_logs(tmp_path)) if logs_of == "megatron"
                  else (kineto.KINETO, sorted((FIXTURES / "kineto_nccl").iterdir())))
    if budget is not None:
        monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", budget)
        monkeypatch.setattr(per_rank, "REREAD_MEMORY_SHARE", 0)
    with per_rank.start_workers(fmt, paths, Options(jobs=2), streaming=True) as workers:
        workers.keep_parts(Diagnostics())
        assert workers.step(_kept_as, None, "probing") == [held] * len(paths)
        ranks = workers.each_rank(per_rank_whole, None, "sending")
    assert [rank.rank for rank in ranks] == list(range(len(paths))) and all(rank.nodes for rank in ranks)


def per_rank_whole(rank, _):
    return rank


@pytest.mark.parametrize("where", [["--jobs", "2"], ["--cluster", "local:2"]], ids=["jobs", "cluster"])
@pytest.mark.parametrize("logs_of", ["megatron", "profiler"])
def test_workers_that_let_go_of_every_file_write_the_local_bytes(tmp_path, monkeypatch, where, logs_of):
    if where[0] == "--cluster":
        pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    # every file is built again for each step (4 times for a timeline, 3 for a Chakra set), from
    # its records (Megatron logs) or read again (profiler traces): the same bytes, and the
    # one-member collectives turned into compute on each building
    paths = clean_logs(tmp_path) if logs_of == "megatron" else sorted((FIXTURES / "kineto_nccl").iterdir())
    option = {"jobs": 2} if where[0] == "--jobs" else {"cluster": "local:2"}
    local = {name: etc.convert(paths, tmp_path / "here" / name, **to, diagnostics=Diagnostics(), jobs=1)
             for name, to in (("t.json", {}), ("t.pftrace", {}), ("set/w", {"to": "chakra"}))}
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 0)  # decided here, before the workers start
    monkeypatch.setattr(per_rank, "REREAD_MEMORY_SHARE", 0)
    said = Diagnostics()
    for name, to in (("t.json", {}), ("t.pftrace", {}), ("set/w", {"to": "chakra"})):
        trace = etc.convert(paths, tmp_path / "there" / name, **to, diagnostics=said, **option)
        assert all(not rank.nodes or name == "set/w" for rank in trace.ranks.values())  # drawn on the workers
        assert trace.metadata == local[name].metadata
    assert outputs(tmp_path / "there") == outputs(tmp_path / "here")


def test_a_set_the_gate_reports_on_is_written_with_force_from_let_go_ranks_as_a_local_run_does(tmp_path, monkeypatch):
    # the gate's finding brings every rank to this process (`whole`): built again from records,
    # with the one-member collectives turned into compute again
    paths = clean_logs(tmp_path)
    lines = paths[2].read_text().splitlines()
    lost = next(i for i, line in enumerate(lines) if "send_forward" in line)
    paths[2].write_text("\n".join(lines[:lost] + lines[lost + 1:]) + "\n")  # a send its receiver waits for
    etc.convert(paths, tmp_path / "here" / "w", to="chakra", diagnostics=Diagnostics(), jobs=1, force=True)
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 0)
    trace = etc.convert(paths, tmp_path / "there" / "w", to="chakra", diagnostics=Diagnostics(), jobs=2, force=True)
    assert all(rank.nodes for rank in trace.ranks.values())  # brought here whole
    assert outputs(tmp_path / "there") == outputs(tmp_path / "here")


def test_fewer_files_than_workers_are_shared_among_them_when_big_or_on_a_cluster(tmp_path, monkeypatch):
    from converters.builders import kineto

    one, two = [tmp_path / "a.log"], [tmp_path / "a.log", tmp_path / "b.log"]
    for path in two:
        path.write_bytes(b"x" * 1000)
    Unit, units_of = per_rank.Unit, per_rank.units_of
    shared = [Unit(one[0], (0, 2)), Unit(one[0], (1, 2))]
    assert units_of(megatron.MEGATRON, one, 2, True) == [Unit(one[0])]  # small: read once, as fast
    assert units_of(megatron.MEGATRON, one, 2, True, cluster=True) == shared
    monkeypatch.setattr(per_rank, "SHARED_FILES_MIN_BYTES", 1000)
    assert units_of(megatron.MEGATRON, one, 2, True) == shared
    assert units_of(megatron.MEGATRON, one, 2, False) == [Unit(one[0])]  # the parts come here anyway
    assert units_of(megatron.MEGATRON, two, 2, True) == [Unit(two[0]), Unit(two[1])]
    assert units_of(megatron.MEGATRON, two, 5, True) == [Unit(p, (k, 2)) for p in two for k in (0, 1)]
    assert units_of(kineto.KINETO, one, 2, True) == [Unit(one[0])]  # a profiler trace is one rank
    assert units_of(megatron.MEGATRON, one, 1, True) == [Unit(one[0])]
    # a share let go of alone (built a rank at a time) saves memory: only when memory is short
    assert per_rank.files_to_hold([10, 10, 10], 20, [False, False, True]) == [True, True, False]
    assert per_rank.files_to_hold([10, 10, 10], 20, [False, False, False]) == [True, True, True]
    monkeypatch.setattr(per_rank, "available_memory", lambda: 1 << 30)
    assert per_rank.let_go_alone(shared, one) == [False, False]
    monkeypatch.setattr(per_rank, "available_memory", lambda: 11_000)  # less than twice 6 x 1000 bytes
    assert per_rank.let_go_alone(shared, one) == [True, True]
    assert per_rank.let_go_alone([Unit(one[0])], one) == [False]
    # a cluster's workers: their memory decides, not this machine's
    assert per_rank.let_go_alone(shared, one, 1 << 30) == [False, False]
    monkeypatch.setattr(per_rank, "available_memory", lambda: 1 << 30)
    assert per_rank.let_go_alone(shared, one, 11_000) == [True, True]


def test_a_cluster_lets_go_of_a_share_when_its_workers_memory_is_short_not_this_machine_s(tmp_path, monkeypatch):
    pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'et-convert[cluster]')")
    from types import SimpleNamespace

    from converters.builders import cluster

    log = tmp_path / "a.log"
    log.write_bytes(b"x" * 1000)
    units = [per_rank.Unit(log, (0, 2)), per_rank.Unit(log, (1, 2))]
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 400)  # 2 workers: 800 bytes hold the first share
    dask = SimpleNamespace(fmt=megatron.MEGATRON, paths=[log, log])
    # short of memory, a worker of logs keeps none: both shares let go of (`hold_budget`)
    for client, worker, held in ((11_000, 1 << 30, [True, True]), (1 << 30, 11_000, [False, False])):
        monkeypatch.setattr(per_rank, "available_memory", lambda: client)
        workers = [{"memory_limit": worker}, {"memory_limit": worker}]
        assert cluster.DaskWorkers._hold(dask, units, workers, True) == held
    # a cluster whose workers say no limit: this machine's memory decides, as before
    monkeypatch.setattr(per_rank, "available_memory", lambda: 11_000)
    assert cluster.DaskWorkers._hold(dask, units, [{"memory_limit": 0}] * 2, True) == [False, False]
    monkeypatch.setattr(per_rank, "available_memory", lambda: 1 << 30)
    assert cluster.DaskWorkers._hold(dask, units, [{"memory_limit": 0}] * 2, True) == [True, True]
    # a Chakra set's: every file or none (per_rank.files_to_hold)
    monkeypatch.setattr(per_rank, "HOLD_BYTES_PER_WORKER", 1000)  # 2 workers: 2 of the 4 files
    logs = [per_rank.Unit(log, None)] * 4
    four = SimpleNamespace(fmt=megatron.MEGATRON, paths=[log] * 4)
    assert cluster.DaskWorkers._hold(four, logs, [{"memory_limit": 0}] * 2, True) == [True, True, False, False]
    assert cluster.DaskWorkers._hold(four, logs, [{"memory_limit": 0}] * 2, True, all_or_none=True) == [False] * 4


class _Watched:
    """A step's result whose life on the worker a test follows."""


_WATCHED: list = []  # on each worker: weak references to the results it sent


def _send_watched(fmt, options, kept, _):
    result = _Watched()
    _WATCHED.append(weakref.ref(result))
    return kept, result


def _results_still_held(fmt, options, kept, _):
    gc.collect()
    return kept, sum(ref() is not None for ref in _WATCHED)


def test_a_worker_does_not_hold_a_result_it_has_sent(tmp_path):
    # a step's result can be big (the comm slices of a file's drawn ranks); the worker held the
    # last one through the next step
    with per_rank.start_workers(megatron.MEGATRON, clean_logs(tmp_path), Options(jobs=2), streaming=True) as workers:
        workers.keep_parts(Diagnostics())
        assert all(isinstance(result, _Watched) for result in workers.step(_send_watched, None, "sending"))
        assert workers.step(_results_still_held, None, "looking") == [0] * 8


def _let_go_of(fmt, options, kept, _):
    return kept, isinstance(kept, per_rank.LetGo)


@pytest.mark.parametrize("memory, let_go", [(1 << 40, False), (1000, True)], ids=["plenty", "short"])
def test_short_of_memory_the_workers_of_logs_keep_none_of_their_files(tmp_path, monkeypatch, memory, let_go):
    # each file is small beside the 32 MB a worker keeps; short of memory (here the machine's,
    # as under --memory) each is let go of and built again for each step, its output the same
    monkeypatch.setattr(per_rank, "available_memory", lambda: memory)
    with per_rank.start_workers(megatron.MEGATRON, clean_logs(tmp_path), Options(jobs=2), streaming=True) as workers:
        workers.keep_parts(Diagnostics())
        assert workers.step(_let_go_of, None, "looking") == [let_go] * 8


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the workers route needs 2 cores without --jobs")
def test_a_big_set_of_logs_goes_to_chakra_through_the_workers_without_jobs(tmp_path, monkeypatch):
    # one process would hold every node; the workers route holds skeletons and one rank at a time
    from converters import api
    from converters.model import Node
    from converters.rank_files import SkeletonNode

    paths = clean_logs(tmp_path)
    size = sum(p.stat().st_size for p in paths)
    monkeypatch.setattr(api, "WORKERS_MIN_BYTES", size + 1)
    here = etc.convert(paths, tmp_path / "here" / "w", to="chakra", diagnostics=Diagnostics())
    monkeypatch.setattr(api, "WORKERS_MIN_BYTES", size)
    there = etc.convert(paths, tmp_path / "there" / "w", to="chakra", diagnostics=Diagnostics())
    assert {type(node) for rank in here.ranks.values() for node in rank.nodes} == {Node}
    assert {type(node) for rank in there.ranks.values() for node in rank.nodes} == {SkeletonNode}
    assert outputs(tmp_path / "there") == outputs(tmp_path / "here")


def _one_dies_the_other_writes_late(fmt, options, kept, folder):
    # the first worker here kills itself; the other writes a file a while later, as a worker
    # printing its part into the caller's temporary folder would
    try:
        os.close(os.open(os.path.join(folder, "dead"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        time.sleep(1.5)
        Path(folder, f"late.{os.getpid()}").write_text("after the run failed")
        return kept, None
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_dead_worker_stops_the_others_before_the_error_arrives(tmp_path):
    # (CI once found a Chrome run's temporary folder left behind: removed while a worker still printed into it)
    folder = tmp_path / "parts"
    folder.mkdir()
    with per_rank.start_workers(megatron.MEGATRON, clean_logs(tmp_path), Options(jobs=2), streaming=True) as workers:
        workers.keep_parts(Diagnostics())
        with pytest.raises(InputError, match="a worker process died while printing .* killed by SIGKILL"):
            workers.step(_one_dies_the_other_writes_late, str(folder), "printing")
        time.sleep(2.5)
        assert sorted(p.name for p in folder.iterdir()) == ["dead"]
