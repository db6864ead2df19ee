"""Chrome JSON and .pftrace written by forked workers (`writers/forked.py`) are the same bytes as by one process.

Also what the workers' machinery promises: a worker's exception arrives whole, a killed worker
fails the run with one error and leaves no output, workers ignore Ctrl-C, blocks are contiguous
and balanced.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from converters.api import read
from converters.diagnostics import Diagnostics, InputError
from converters.options import Options
from converters.writers import chrome, forked, layout_chrome, perfetto
from helpers.megatron_synth import write_run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"

# inputs with flows of every kind: TP pairs and send/recv (log sets), a single log with TP 2 and
# stages, Kineto traces, a scheduled SimAI table (shared layouts per stage), a Chakra set,
# OptimusPrime's modelled pipeline
CASES = {
    "megatron_tp2_pp2_dp1": (["megatron_tp2_pp2_dp1"], {"tp": 2, "pp": 2}),
    "megatron_tp1_pp2_dp2": (["megatron_tp1_pp2_dp2"], {"tp": 1, "pp": 2}),
    "megatron_rank4_pp_tp2": (["megatron_rank4_pp_tp2.log"], {}),
    "pytorch_gloo_4rank": (["pytorch_gloo_4rank"], {}),
    "simai": (["simai_tp8_pp16_1024gpu.txt"], {"ranks": "0-40,1000-1023"}),
    "chakra_data": (["chakra_data"], {}),
    "optimusprime": (["optimusprime_llama1b_pp8.log"], {}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    names, values = CASES[request.param]
    options = Options(**values)
    trace = read([SAMPLES / n for n in names], options=options, diagnostics=Diagnostics())
    return trace, values


def written(trace, values: dict, path: Path, jobs: int) -> bytes:
    chrome.write(trace, path, Options(**values, jobs=jobs), Diagnostics())
    return path.read_bytes()


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_any_number_of_workers_writes_the_same_bytes(case, tmp_path, suffix):
    trace, values = case
    serial = written(trace, values, tmp_path / f"one{suffix}", 1)
    for jobs in (2, 3, 5):
        assert written(trace, values, tmp_path / f"many{suffix}", jobs) == serial, jobs
    if suffix == ".json.gz":
        serial = gzip.decompress(serial)
    assert serial.startswith(b'{"traceEvents":[') and serial.endswith(b"}\n")
    assert sorted(os.listdir(tmp_path)) == [f"many{suffix}", f"one{suffix}"]  # no temporary left


def test_any_number_of_workers_writes_the_same_pftrace(case, tmp_path):
    trace, values = case
    serial_path = tmp_path / "one.pftrace"
    perfetto.write(trace, serial_path, Options(**values, jobs=1), Diagnostics())
    serial = serial_path.read_bytes()
    for jobs in (2, 3, 5):
        perfetto.write(trace, tmp_path / "many.pftrace", Options(**values, jobs=jobs), Diagnostics())
        assert (tmp_path / "many.pftrace").read_bytes() == serial, jobs
    packets = perfetto.pb.Trace.FromString(serial).packet
    processes = {p.track_descriptor.process.pid for p in packets if p.track_descriptor.HasField("process")}
    sequences = {p.trusted_packet_sequence_id for p in packets if p.HasField("track_event")}
    assert sequences == {perfetto.sequence_id(pid) for pid in processes}  # every process drew its slices
    assert sorted(os.listdir(tmp_path)) == ["many.pftrace", "one.pftrace"]


def test_a_killed_pftrace_worker_fails_the_run_and_leaves_no_output(tmp_path, monkeypatch):
    trace = read(SAMPLES / "megatron_tp2_pp2_dp1", options=Options(tp=2, pp=2), diagnostics=Diagnostics())
    target = tmp_path / "out.pftrace"
    target.write_bytes(b"older output")
    killed = _kill_in_worker(os.getpid(), lambda: os.kill(os.getpid(), signal.SIGKILL), perfetto)
    monkeypatch.setattr(perfetto, "process_encoder", killed)
    with pytest.raises(forked.WorkerFailed, match="killed by SIGKILL"):
        perfetto.write(trace, target, Options(tp=2, pp=2, jobs=2), Diagnostics())
    assert target.read_bytes() == b"older output"
    assert os.listdir(tmp_path) == ["out.pftrace"]


def test_more_workers_than_processes(tmp_path):
    trace = read(SAMPLES / "megatron_rank4_pp_tp2.log", diagnostics=Diagnostics())
    serial = written(trace, {}, tmp_path / "one.json", 1)
    assert written(trace, {}, tmp_path / "many.json", 64) == serial


def test_big_traces_use_every_core_by_default(monkeypatch):
    from converters import memory

    monkeypatch.setattr(memory, "available", lambda: 1 << 40)  # (whatever this machine has)
    assert forked.workers_for(Options(), forked.PARALLEL_MIN_NODES - 1) == 1
    assert forked.workers_for(Options(), forked.PARALLEL_MIN_NODES) == (os.cpu_count() or 1)
    assert forked.workers_for(Options(jobs=3), 0) == 3
    assert forked.workers_for(Options(jobs=0), 10**9) == 1
    assert forked.workers_for(None, 0) == 1


def test_big_traces_fork_only_as_many_workers_as_memory_holds_copies_of_this_process(monkeypatch):
    # a forked worker comes to copy the pages of the model it reads: in a 600 MiB job, benchmark 6
    # to Chakra with 2 workers was killed (850 MB together); in one process it takes 393 MB
    from converters import memory

    big = forked.PARALLEL_MIN_NODES
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(memory, "resident", lambda: 300 << 20)
    for available, jobs in ((64 << 30, 4), (700 << 20, 2), (899 << 20, 2), (900 << 20, 3), (200 << 20, 1)):
        monkeypatch.setattr(memory, "available", lambda: available)
        assert forked.workers_for(Options(), big) == jobs
    assert forked.workers_for(Options(jobs=3), big) == 3  # asked for: as asked
    monkeypatch.setattr(memory, "available", lambda: 0)  # not known: every core
    assert forked.workers_for(Options(), big) == 4
    monkeypatch.setattr(memory, "available", lambda: 200 << 20)
    monkeypatch.setattr(memory, "resident", lambda: 0)
    assert forked.workers_for(Options(), big) == 4
    # --memory: the user's limit less this process, when tighter than the machine
    monkeypatch.setattr(memory, "available", lambda: 64 << 30)
    monkeypatch.setattr(memory, "resident", lambda: 300 << 20)
    for limit, jobs in ((None, 4), (8 << 30, 4), (900 << 20, 2), (1200 << 20, 3), (400 << 20, 1), (100 << 20, 1)):
        assert forked.workers_for(Options(memory=limit), big) == jobs


def _kill_in_worker(parent: int, how, writer=chrome):
    """A `writer.process_encoder` whose workers (not this process) fail with `how()`."""
    real = writer.process_encoder

    def make(processes, encoder=None):
        encode = real(processes, encoder)

        def failing(process):
            if os.getpid() != parent:
                how()
            return encode(process)

        return failing

    return make


def test_a_killed_worker_fails_the_run_and_leaves_no_output(tmp_path, monkeypatch):
    trace = read(SAMPLES / "megatron_tp2_pp2_dp1", options=Options(tp=2, pp=2), diagnostics=Diagnostics())
    target = tmp_path / "out.json"
    target.write_bytes(b"older output")
    monkeypatch.setattr(chrome, "process_encoder", _kill_in_worker(os.getpid(), lambda: os.kill(os.getpid(), signal.SIGKILL)))
    with pytest.raises(forked.WorkerFailed, match="killed by SIGKILL") as failure:
        chrome.write(trace, target, Options(tp=2, pp=2, jobs=2), Diagnostics())
    assert isinstance(failure.value, InputError)  # the command prints one error line, exit code 2
    assert target.read_bytes() == b"older output"
    assert os.listdir(tmp_path) == ["out.json"]


def test_a_worker_killed_while_placing_fails_the_run(tmp_path, monkeypatch):
    trace = read(SAMPLES / "megatron_tp2_pp2_dp1", options=Options(tp=2, pp=2), diagnostics=Diagnostics())
    parent, real = os.getpid(), layout_chrome._Planner.place_rank

    def place_rank(self, rank):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, rank)

    monkeypatch.setattr(layout_chrome._Planner, "place_rank", place_rank)
    with pytest.raises(forked.WorkerFailed, match=r"a worker drawing the timeline \(process \d+\) was killed by SIGKILL"):
        chrome.write(trace, tmp_path / "out.json", Options(tp=2, pp=2, jobs=3), Diagnostics())
    assert os.listdir(tmp_path) == []


def test_write_processes_in_blocks_writes_the_same_bytes(tmp_path):
    trace = read(SAMPLES / "megatron_tp2_pp2_dp1", options=Options(tp=2, pp=2), diagnostics=Diagnostics())
    texts = []
    for jobs in (1, 2, 3):
        plan = layout_chrome.plan_trace(trace, Options(tp=2, pp=2), Diagnostics())
        with open(tmp_path / f"{jobs}.json", "wb") as out:
            chrome.write_plan(plan, out, jobs, tmp_path)
        texts.append((tmp_path / f"{jobs}.json").read_bytes())
    assert texts[0] == texts[1] == texts[2]


def test_a_worker_error_arrives_whole(tmp_path, monkeypatch):
    trace = read(SAMPLES / "megatron_tp2_pp2_dp1", options=Options(tp=2, pp=2), diagnostics=Diagnostics())

    def fail():
        raise InputError("somewhere", "bad thing")

    monkeypatch.setattr(chrome, "process_encoder", _kill_in_worker(os.getpid(), fail))
    with pytest.raises(InputError, match="somewhere: bad thing"):
        chrome.write(trace, tmp_path / "out.json", Options(tp=2, pp=2, jobs=3), Diagnostics())
    assert os.listdir(tmp_path) == []


# `python -c` this, then "kill" or a marker file's path, then the command's arguments: its workers
# (not the parent) are killed, or write the marker and stall
_RUN_WITH_A_FAILING_WORKER = """
import os, signal, sys, time
from pathlib import Path
from converters import cli
from converters.writers import chrome
real, parent, how = chrome.process_encoder, os.getpid(), sys.argv.pop(1)
def make(processes, encoder=None):
    encode = real(processes, encoder)
    def failing(process):
        if os.getpid() != parent:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            Path(how).write_text("worker encoding")
            time.sleep(60)
        return encode(process)
    return failing
chrome.process_encoder = make
sys.argv = ["et-convert", *sys.argv[1:]]
cli.run()
"""


def one_file_run(tmp_path: Path) -> list[str]:
    """A log of 4 ranks in one file: read here, the timeline drawn by forked workers."""
    (path,) = write_run(tmp_path / "run", stages=2, tp=2, microbatches=4, one_file=True)
    return [str(path)]


# The sample's per-rank files are read and drawn by --jobs workers (converters/rank_timelines.py).
PER_RANK_FILES = [str(SAMPLES / "megatron_tp2_pp2_dp1"), "--tp", "2", "--pp", "2"]


@pytest.mark.parametrize("per_rank", [False, True], ids=["one-file", "per-rank-files"])
def test_the_command_reports_a_killed_worker_in_one_line(tmp_path, per_rank):
    target = tmp_path / "out" / "out.json"
    inputs = PER_RANK_FILES if per_rank else one_file_run(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _RUN_WITH_A_FAILING_WORKER, "kill", *inputs, "--jobs", "2", "-o", str(target)],
        capture_output=True, text=True, cwd=SAMPLES.parent,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    if per_rank:
        assert re.fullmatch(f"et-convert: error: a worker process died while printing {SAMPLES}/megatron_tp2_pp2_dp1/"
                            r"rank[01]\.log or a file after it: it was killed by SIGKILL \(out of memory\?\)",
                            lines[-1])  # the first file of the worker seen dead: the kernel's out-of-memory killer sends SIGKILL
    else:
        assert lines[-1].startswith("et-convert: error: a worker drawing the timeline (process ")
        assert "was killed by SIGKILL" in lines[-1]
    assert os.listdir(target.parent) == []


@pytest.mark.parametrize("per_rank", [False, True], ids=["one-file", "per-rank-files"])
def test_ctrl_c_stops_the_workers_and_leaves_no_output(tmp_path, per_rank):
    target, marker = tmp_path / "out" / "out.json", tmp_path / "marker"
    inputs = PER_RANK_FILES if per_rank else one_file_run(tmp_path)
    run = subprocess.Popen(
        [sys.executable, "-c", _RUN_WITH_A_FAILING_WORKER, str(marker), *inputs, "--jobs", "2", "-o", str(target)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=SAMPLES.parent, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a shell's background jobs ignore it
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        assert marker.exists()
        os.killpg(run.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole group
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130 and err.strip() == "et-convert: interrupted; earlier output left as it was"
    with pytest.raises(ProcessLookupError):
        os.killpg(run.pid, 0)  # no worker left behind
    assert os.listdir(target.parent) == []


def test_workers_ignore_ctrl_c_and_results_come_in_order():
    def task(k):
        return k, signal.getsignal(signal.SIGINT) == signal.SIG_IGN, os.getpid()

    results = forked.run_forked(task, 4)
    assert [r[0] for r in results] == [0, 1, 2, 3]
    assert results[0][1] is False and results[0][2] == os.getpid()  # k = 0 runs here, Ctrl-C untouched
    assert all(ignores for _, ignores, _ in results[1:])
    assert len({pid for _, _, pid in results}) == 4


def test_a_failure_here_stops_the_workers():
    def task(k):
        if k == 0:
            raise KeyboardInterrupt  # as Ctrl-C would in this process
        time.sleep(60)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        forked.run_forked(task, 3)
    assert time.monotonic() - started < 30  # the sleeping workers were killed, not waited for


def test_children_run_every_task_while_this_process_runs_meanwhile_and_ticks():
    seen = []

    def task(k):
        time.sleep(0.5 if k == 1 else 0)
        return k, os.getpid(), signal.getsignal(signal.SIGINT) == signal.SIG_IGN

    def tick():
        seen.append("tick")
        return True

    results = forked.run_in_children(task, 3, "a test worker", meanwhile=lambda: seen.append("meanwhile"), tick=tick)
    assert [r[0] for r in results] == [0, 1, 2]
    assert os.getpid() not in {pid for _, pid, _ in results} and len({pid for _, pid, _ in results}) == 3
    assert all(ignores for _, _, ignores in results)
    assert seen[0] == "meanwhile" and seen.count("tick") >= 2  # every 0.2 s while worker 1 sleeps 0.5 s


def test_a_failing_meanwhile_kills_the_children_at_once():
    def meanwhile():
        raise InputError(None, "refused")

    started = time.monotonic()
    for _ in range(300):  # multiprocessing.Pool's terminate() hung about once in 200 of these
        with pytest.raises(InputError, match="refused"):
            forked.run_in_children(lambda k: time.sleep(60), 2, "a test worker", meanwhile)
    assert time.monotonic() - started < 60  # not waited for: killed


def test_a_child_error_arrives_whole_after_meanwhile():
    def task(k):
        if k == 1:
            raise InputError("x.log:3", "expected a rank")
        return k

    with pytest.raises(InputError, match=r"x\.log:3: expected a rank"):
        forked.run_in_children(task, 2, "a test worker")


@pytest.mark.parametrize("weights,parts", [
    ([1] * 10, 3), ([100, 1, 1, 1], 2), ([1, 1, 1, 100], 2), ([5], 4), ([], 2), ([3, 3, 3, 3], 4), ([0, 0, 7], 3),
])
def test_blocks_are_contiguous_non_empty_and_balanced(weights, parts):
    items = list(range(len(weights)))
    blocks = forked.split_blocks(items, parts, weights.__getitem__)
    assert [i for block in blocks for i in block] == items
    assert all(blocks) and len(blocks) <= max(1, min(parts, len(items)))
    if len(items) >= parts and all(w == 1 for w in weights):
        sizes = [len(b) for b in blocks]
        assert max(sizes) - min(sizes) <= 1


def test_copy_into_a_file_and_into_a_stream(tmp_path):
    source = (tmp_path / "source").open("w+b")
    source.write(b"x" * 3_000_000 + b"end")
    source.flush()
    with open(tmp_path / "out", "wb") as out:
        out.write(b"head")
        forked.copy_into(out, source)
        out.write(b"tail")
    assert (tmp_path / "out").read_bytes() == b"head" + b"x" * 3_000_000 + b"endtail"
    stream = io.BytesIO()
    forked.copy_into(stream, source)
    assert stream.getvalue() == b"x" * 3_000_000 + b"end"


def test_the_size_warning_and_result_line_are_the_same(case, tmp_path, monkeypatch):
    trace, values = case
    monkeypatch.setattr(chrome, "LARGE_JSON", 0)  # always warn: the message holds the size
    messages = []
    for jobs in (1, 2, 3):
        diagnostics = Diagnostics()
        chrome.write(trace, tmp_path / "out.json", Options(**values, jobs=jobs), diagnostics)
        messages.append(diagnostics.messages())
    size = (tmp_path / "out.json").stat().st_size
    assert any(f"{size / 1e9:.1f} GB of JSON" in m for m in messages[0])
    assert messages[0] == messages[1] == messages[2]


def test_a_scaling_mode_set_without_flows_writes_the_same_bytes(tmp_path):
    from helpers.megatron_synth import write_run

    write_run(tmp_path / "logs", stages=2, tp=2, microbatches=2, scaling=True)
    trace = read(tmp_path / "logs", diagnostics=Diagnostics())
    assert trace.metadata.get("scaling_mode") and len(trace.ranks) == 4
    serial = written(trace, {}, tmp_path / "one.json", 1)
    assert b"bind_id" not in serial
    for jobs in (2, 3):
        assert written(trace, {}, tmp_path / "many.json", jobs) == serial
