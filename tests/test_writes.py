"""Nothing half-written: failed and interrupted runs leave earlier output as it was, and the
same input gives byte-identical output across runs and --jobs values."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, run_cli
from converters.diagnostics import InputError
from converters.formats import expand_inputs, output_format, refuse_overwriting_inputs
from converters.writers.atomic import atomic_file, atomic_set, remove_stale_temporaries

SIMAI = SAMPLES / "simai_tp8_pp16_1024gpu.txt"
MEGATRON = SAMPLES / "megatron_rank4_pp_tp2.log"


def snapshot(directory: Path) -> dict[str, str]:
    """Every entry of `directory` (hidden ones too) -> sha256 of its bytes ("dir" for directories)."""
    return {
        p.name: "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
    }


def dead_pid() -> int:
    """The id of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture(scope="module")
def old_set(tmp_path_factory) -> Path:
    """A small earlier Chakra set `w.*.et` (4 ranks from samples/chakra_data), to be kept intact."""
    directory = tmp_path_factory.mktemp("old")
    result = run_cli(SAMPLES / "chakra_data", "--to", "chakra", "-o", directory / "w")
    assert result.code == 0, result.stderr
    return directory


def copy_of(old: Path, into: Path) -> Path:
    into.mkdir()
    for p in old.iterdir():
        (into / p.name).write_bytes(p.read_bytes())
    return into


# ------------------------------------------------------------------------------------ failed runs


def test_failed_conversion_leaves_an_earlier_chrome_trace_untouched(tmp_path):
    out = tmp_path / "o.json"
    assert run_cli(MEGATRON, "-o", out).code == 0
    before = snapshot(tmp_path)
    bad = tmp_path / "bad.log"
    bad.write_text(MEGATRON.read_text().replace("duration=420.45", "duration=x"))
    result = run_cli(bad, "-o", out)
    assert result.code == 2
    assert snapshot(tmp_path) == {**before, "bad.log": snapshot(tmp_path)["bad.log"]}


def test_failed_conversion_leaves_an_earlier_chakra_set_untouched(old_set, tmp_path):
    target = copy_of(old_set, tmp_path / "out")
    before = snapshot(target)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(SIMAI.read_bytes().replace(b"\n557\n", b"\n558\n"))
    result = run_cli(bad, "--to", "chakra", "-o", target / "w")
    assert result.code == 2
    assert snapshot(target) == before


def test_a_writer_failing_midway_leaves_the_earlier_set_and_no_temporary(old_set, tmp_path):
    target = copy_of(old_set, tmp_path / "out")
    before = snapshot(target)
    with pytest.raises(RuntimeError):
        with atomic_set(target / "w") as tmpdir:
            (tmpdir / "w.0.et").write_bytes(b"new rank 0")
            (tmpdir / "w.1.et").write_bytes(b"new rank 1")
            raise RuntimeError("disk full")
    assert snapshot(target) == before


def test_a_failed_single_file_write_leaves_the_earlier_file(tmp_path):
    out = tmp_path / "o.json"
    out.write_bytes(b"earlier")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(out) as f:
            f.write(b"half of a new tr")
            raise KeyboardInterrupt
    assert snapshot(tmp_path) == {"o.json": hashlib.sha256(b"earlier").hexdigest()}


def test_a_smaller_new_set_replaces_every_rank_of_a_larger_one(old_set, tmp_path):
    target = copy_of(old_set, tmp_path / "out")
    with atomic_set(target / "w") as tmpdir:
        (tmpdir / "w.0.et").write_bytes(b"only rank")
    assert sorted(p.name for p in target.glob("w.*.et")) == ["w.0.et"]


def test_a_new_set_without_groups_removes_the_old_sets_comm_group_json(tmp_path):
    target = tmp_path / "mix"
    assert run_cli(SAMPLES / "workloads" / "astra_data.txt", "--num-npus", "8", "--to", "chakra", "-o", target / "w").code == 0
    assert (target / "w.comm_group.json").exists()
    (target / "other.comm_group.json").write_text("{}")  # another prefix's file is not ours to remove
    result = run_cli(SAMPLES / "chakra_data", "--to", "chakra", "-o", target / "w")
    assert result.code == 0, result.stderr
    assert sorted(p.name for p in target.iterdir()) == ["other.comm_group.json", "w.0.et", "w.1.et", "w.2.et", "w.3.et"]
    validated = run_cli("validate", target / "w.0.et", target / "w.1.et", target / "w.2.et", target / "w.3.et")
    assert (validated.code, "E023" in validated.stdout) == (0, False), validated.stdout


def test_a_new_set_with_groups_replaces_the_old_comm_group_json(old_set, tmp_path):
    target = copy_of(old_set, tmp_path / "out")
    (target / "w.comm_group.json").write_text('{"9": [0, 1]}')
    with atomic_set(target / "w") as tmpdir:
        (tmpdir / "w.0.et").write_bytes(b"only rank")
        (tmpdir / "w.comm_group.json").write_text('{"1": [0]}')
    assert (target / "w.comm_group.json").read_text() == '{"1": [0]}'


# ------------------------------------------------------------------------------------ interrupted runs


def start_conversion(target: Path) -> subprocess.Popen:
    """The 1024-rank SimAI sample -> a Chakra set `target/w`, in its own process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "converters.cli", str(SIMAI), "--to", "chakra", "--jobs", "2", "-o", str(target / "w")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def wait_until_writing(process: subprocess.Popen, target: Path, files: int = 20, timeout: float = 60) -> Path:
    """The temporary set directory, once it holds `files` rank files (the run is mid-write)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for tmp in target.glob(".w.*.tmp"):
            try:
                if sum(1 for _ in tmp.glob("w.*.et")) >= files:
                    return tmp
            except FileNotFoundError:
                pass
        assert process.poll() is None, "the run ended before it was interrupted"
        time.sleep(0.005)
    raise AssertionError("the run never started writing")


RANK_FILES = 1024  # of the SimAI sample's set


def signalled_mid_write(old_set: Path, target: Path, signum: int, attempts: int = 3) -> tuple[subprocess.Popen, Path]:
    """A conversion into `target` (a copy of `old_set`) that gets `signum`, sent to its whole
    group as Ctrl-C is, while its rank files are being written; and its temporary set directory.

    The group is stopped first and signalled only if its rank files are still incomplete: on a
    loaded machine a run can finish between the look and the signal (it then exits 0, or dies
    of the signal while shutting down). Such a run is started again."""
    for _ in range(attempts):
        copy_of(old_set, target)
        process = start_conversion(target)
        tmp = wait_until_writing(process, target)
        os.killpg(process.pid, signal.SIGSTOP)
        mid_write = tmp.exists() and sum(1 for _ in tmp.glob("w.*.et")) < RANK_FILES
        if mid_write:
            os.killpg(process.pid, signum)  # pending until the group goes on (SIGKILL: at once)
        os.killpg(process.pid, signal.SIGCONT)
        if mid_write:
            return process, tmp
        process.communicate(timeout=60)
        shutil.rmtree(target)
    raise AssertionError(f"every one of {attempts} runs finished before it could be signalled")


def test_ctrl_c_mid_write_leaves_the_earlier_set_and_no_temporary(old_set, tmp_path):
    target = tmp_path / "out"
    before = snapshot(old_set)
    process, _ = signalled_mid_write(old_set, target, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr.endswith("et-convert: interrupted; earlier output left as it was\n")
    assert "Traceback" not in stderr
    assert snapshot(target) == before


_SECOND_CTRL_C = """
import builtins, signal, sys
from converters import api, cli

def interrupted(*args, **kwargs):
    raise KeyboardInterrupt

def print_and_press_again(*args, **kwargs):  # Ctrl-C again while the first one is being reported
    signal.raise_signal(signal.SIGINT)
    builtins.print(*args, **kwargs)

api.convert = interrupted
cli.print = print_and_press_again
sys.argv = ["et-convert", *sys.argv[1:]]
cli.run()
"""


def test_a_second_ctrl_c_while_the_first_is_reported_changes_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-c", _SECOND_CTRL_C, str(SAMPLES / "chakra_data"), "-o", str(tmp_path / "t.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert (done.returncode, done.stderr) == (130, "et-convert: interrupted; earlier output left as it was\n")


_CTRL_C_IN_A_STRING_EXEC = """
import sys
from converters import api, cli

def interrupted(*args, **kwargs):
    exec("raise KeyboardInterrupt")  # as when Ctrl-C lands while a dataclass is being made

api.convert = interrupted
sys.argv = ["et-convert", *sys.argv[1:]]
cli.run()
"""


def test_ctrl_c_inside_a_string_exec_still_exits_130_under_python_m(tmp_path):
    # CPython marks such a KeyboardInterrupt as unhandled and, under `python -m`, would exit by
    # SIGINT after our message (seen under load: 1 run in 7 of the test above)
    (tmp_path / "ctrl_c_main.py").write_text(_CTRL_C_IN_A_STRING_EXEC)
    done = subprocess.run([sys.executable, "-m", "ctrl_c_main", str(SAMPLES / "chakra_data"), "-o", str(tmp_path / "t.json")],
                          capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stderr) == (130, "et-convert: interrupted; earlier output left as it was\n")


def test_kill_mid_write_leaves_the_earlier_set_and_the_next_run_cleans_up(old_set, tmp_path):
    target = tmp_path / "out"
    before = snapshot(old_set)
    process, tmp = signalled_mid_write(old_set, target, signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    # SIGKILL cannot be caught: the hidden temporary stays, but no glob of the set sees it.
    assert {p.name for p in target.glob("w.*")} == {n for n in before if n.startswith("w.")}
    assert {n: h for n, h in snapshot(target).items() if not n.startswith(".")} == before
    assert tmp.exists()
    result = run_cli(SAMPLES / "chakra_data", "--to", "chakra", "-o", target / "w")
    assert result.code == 0, result.stderr
    assert snapshot(target) == before  # same content again, and the killed run's temporary is gone


def _ctrl_c_on_first_replace(monkeypatch, then=None):
    """os.replace in atomic.py that gets Ctrl-C on its first call (and runs `then()` after it)."""
    from converters.writers import atomic

    real, calls = os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)
            if then is not None:
                then()
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    return calls


def test_ctrl_c_while_a_set_is_moved_in_lets_it_finish_and_says_so(old_set, tmp_path, monkeypatch):
    from converters.diagnostics import InterruptedAfterWriting

    target = copy_of(old_set, tmp_path / "out")
    calls = _ctrl_c_on_first_replace(monkeypatch)
    with pytest.raises(InterruptedAfterWriting) as interrupted:
        with atomic_set(target / "w") as tmpdir:
            (tmpdir / "w.0.et").write_bytes(b"new rank 0")
            (tmpdir / "w.1.et").write_bytes(b"new rank 1")
    assert interrupted.value.written == str(target / "w") and len(calls) == 2
    assert snapshot(target) == {"w.0.et": hashlib.sha256(b"new rank 0").hexdigest(),
                                "w.1.et": hashlib.sha256(b"new rank 1").hexdigest()}  # whole, no temporary
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_then_a_failure_while_moving_is_a_plain_interruption(old_set, tmp_path, monkeypatch):
    from converters.diagnostics import InterruptedAfterWriting

    def fail():
        raise PermissionError(13, "Permission denied")

    target = copy_of(old_set, tmp_path / "out")
    _ctrl_c_on_first_replace(monkeypatch, then=fail)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        with atomic_set(target / "w") as tmpdir:
            (tmpdir / "w.0.et").write_bytes(b"new rank 0")
    assert not isinstance(interrupted.value, InterruptedAfterWriting)


def test_the_command_says_which_output_an_interruption_let_finish(capsys):
    from converters.cli import _run
    from converters.diagnostics import InterruptedAfterWriting

    def action(diagnostics):
        raise InterruptedAfterWriting("out/w")

    assert _run(action, debug=False, quiet=True, verbose=False) == 130
    assert capsys.readouterr().err == (
        "et-convert: interrupted once out/w was written (its files were being moved into place)\n")


def test_stale_temporaries_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    dead, alive = dead_pid(), os.getpid()
    stale_dir = tmp_path / f".w.{dead}.k2j4_x.tmp"
    stale_dir.mkdir()
    (stale_dir / "w.0.et").write_bytes(b"half")
    stale_file = tmp_path / f".o.json.{dead}.abcd1234.tmp"
    stale_file.write_bytes(b"half")
    live = tmp_path / f".w.{alive}.zz9.tmp"
    live.mkdir()
    other = tmp_path / f".v.{dead}.q1.tmp"  # another target's: not ours to judge here
    other.mkdir()
    past = time.time() - 60
    for p in (stale_dir, stale_file, live, other):
        os.utime(p, (past, past))
    with atomic_set(tmp_path / "w") as tmpdir:
        (tmpdir / "w.0.et").write_bytes(b"new")
    assert not stale_dir.exists() and live.exists() and other.exists()
    with atomic_file(tmp_path / "o.json") as f:
        f.write(b"{}")
    assert not stale_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "o.json", "w.0.et"])


def test_stale_cleanup_leaves_a_temporary_made_after_the_run_started(tmp_path):
    newer = tmp_path / f".w.{dead_pid()}.new.tmp"
    newer.mkdir()
    future = time.time() + 60
    os.utime(newer, (future, future))
    assert remove_stale_temporaries(tmp_path, "w") == []
    assert newer.exists()


# ------------------------------------------------------------------------------------ determinism


def test_chakra_set_is_byte_identical_across_jobs(tmp_path):
    sets = {}
    for jobs in ("1", "2"):
        result = run_cli(SIMAI, "--to", "chakra", "--jobs", jobs, "-q", "-o", tmp_path / jobs / "w")
        assert result.code == 0, result.stderr
        sets[jobs] = snapshot(tmp_path / jobs)
    assert len(sets["1"]) == 1025  # 1024 ranks and the comm_group.json
    assert sets["1"] == sets["2"]


def test_chakra_set_is_byte_identical_across_runs(tmp_path):
    from helpers.megatron_synth import write_run

    logs = write_run(tmp_path / "logs", stages=4, tp=2, microbatches=4)
    for name in ("a", "b"):
        result = run_cli(*logs, "--to", "chakra", "--jobs", "2", "-o", tmp_path / name / "w")
        assert result.code == 0, result.stderr
    assert snapshot(tmp_path / "a") == snapshot(tmp_path / "b")
    assert len(snapshot(tmp_path / "a")) == 9


def test_chrome_trace_is_byte_identical_across_runs(tmp_path):
    for name in ("a.json", "b.json"):
        assert run_cli(MEGATRON, "-o", tmp_path / name).code == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_running_out_of_memory_is_one_line_and_leaves_earlier_output(tmp_path, monkeypatch):
    """A MemoryError is no bug of the input nor a traceback: one line, earlier output kept."""
    from test_malformed import run_cli_here

    from converters.writers import chakra

    out = tmp_path / "o.json"
    out.write_bytes(b"earlier")

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(chakra, "write_ranks", exhausted)
    result = run_cli_here(MEGATRON, "--to", "chakra", "--jobs", "1", "-o", tmp_path / "w")
    assert (result.code, result.stderr) == (3, (
        "et-convert: error: out of memory; earlier output left as it was (draw fewer ranks with --ranks, or "
        "convert a part of the input)\n"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json"]


def test_ctrl_c_while_a_set_is_moved_into_place_waits_until_it_is_complete():
    from converters.diagnostics import InterruptedAfterWriting
    from converters.writers.atomic import _signals_held

    finished = False
    with pytest.raises(InterruptedAfterWriting):
        with _signals_held("w"):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a Ctrl-C here would otherwise stop the moves half way
            finished = True
        time.sleep(0.05)
    assert finished


# ------------------------------------------------------------------------------------ unwritable outputs


def test_an_output_under_a_file_is_one_line_and_exit_2(tmp_path):
    from test_malformed import run_cli_here

    (tmp_path / "afile").write_bytes(b"a file")
    for args, target in [(("-o",), "afile/out.json"), (("--to", "chakra", "-o"), "afile/sub/w")]:
        result = run_cli_here(MEGATRON, "-q", *args, tmp_path / target)
        assert (result.code, result.stderr) == (
            2, f"et-convert: error: {tmp_path / target}: cannot write: {tmp_path / 'afile'} is a file, not a directory\n")
    assert snapshot(tmp_path) == {"afile": hashlib.sha256(b"a file").hexdigest()}


def test_an_output_that_is_a_directory_is_one_line_and_exit_2(tmp_path):
    from test_malformed import run_cli_here

    (tmp_path / "isdir.json").mkdir()
    result = run_cli_here(MEGATRON, "--tp", "2", "-o", tmp_path / "isdir.json")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {tmp_path / 'isdir.json'}: cannot write: it is a directory\n")
    assert snapshot(tmp_path) == {"isdir.json": "dir"}


def test_a_directory_named_like_a_rank_file_refuses_the_set_and_keeps_the_old_one(old_set, tmp_path):
    from test_malformed import run_cli_here

    target = copy_of(old_set, tmp_path / "out")
    (target / "w.0.et").unlink()
    (target / "w.0.et").mkdir()
    before = snapshot(target)
    result = run_cli_here(SAMPLES / "chakra_data", "--to", "chakra", "-o", target / "w")
    assert (result.code, result.stderr) == (2, f"et-convert: error: {target / 'w.0.et'}: cannot write: it is a directory\n")
    assert snapshot(target) == before


def test_an_unwritable_directory_is_an_input_error_naming_the_output(tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", refused)
    with pytest.raises(InputError) as e:
        with atomic_file(tmp_path / "x.json"):
            pass
    assert str(e.value) == f"{tmp_path / 'x.json'}: cannot write: Permission denied"
    monkeypatch.setattr("tempfile.mkdtemp", refused)
    with pytest.raises(InputError) as e:
        with atomic_set(tmp_path / "w"):
            pass
    assert str(e.value) == f"{tmp_path / 'w'}: cannot write: Permission denied"


def test_a_full_disk_mid_write_is_an_input_error_and_keeps_the_earlier_file(tmp_path):
    out = tmp_path / "o.json"
    out.write_bytes(b"earlier")
    with pytest.raises(InputError) as e:
        with atomic_file(out) as f:
            f.write(b"half of a new tr")
            raise OSError(28, "No space left on device")
    assert str(e.value) == f"{out}: cannot write: No space left on device"
    assert snapshot(tmp_path) == {"o.json": hashlib.sha256(b"earlier").hexdigest()}


@pytest.mark.parametrize("inputs, output, to, replaced", [
    (["chakra_data"], "chakra_data/workload.0.et", "et-json", "chakra_data/workload.0.et"),
    (["chakra_data/workload.1.et"], "chakra_data/../chakra_data/workload", "chakra", "chakra_data/workload.1.et"),
    (["megatron_rank4_pp_tp2.log"], "./megatron_rank4_pp_tp2.log", "chrome", "megatron_rank4_pp_tp2.log"),
])
def test_an_output_that_would_replace_an_input_is_refused(inputs, output, to, replaced):
    with pytest.raises(InputError) as e:
        refuse_overwriting_inputs(expand_inputs([SAMPLES / i for i in inputs]), SAMPLES / output,
                                  output_format(to, SAMPLES / output))
    assert str(e.value) == f"{SAMPLES / output}: cannot write over the input {SAMPLES / replaced}; choose another output name"


def test_an_output_beside_the_inputs_is_allowed():
    for output, to in [("chakra_data/other", "chakra"), ("chakra_data/workload.json", "et-json")]:
        refuse_overwriting_inputs(expand_inputs([SAMPLES / "chakra_data"]), SAMPLES / output,
                                  output_format(to, SAMPLES / output))


def test_an_error_of_the_callers_own_code_is_not_blamed_on_the_output(tmp_path):
    """Only failures of writing the output become "cannot write"; a missing input stays itself."""
    missing = tmp_path / "nowhere" / "in.log"
    with pytest.raises(FileNotFoundError):
        with atomic_file(tmp_path / "out.json"):
            open(missing)
    with pytest.raises(FileNotFoundError):
        with atomic_set(tmp_path / "set" / "w") as folder:
            (folder / "w.0.et").write_bytes(b"x")
            open(missing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]
    assert list((tmp_path / "set").iterdir()) == []  # nothing half-written, no temporary left
