"""The program ends without freeing the model it read (converters/exiting.py), and loses nothing by it.

Each case runs a fresh interpreter: what is checked is how that process ends.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from converters import api, exiting

from conftest import ROOT, SAMPLES

# Runs `stats --json` on the sample Chakra set through ENTRY (cli.main, or cli.run as code that
# embeds the CLI calls it), leaving a file for each of: an exit handler ran, the model read was
# freed, os._exit ended the process.
_SCRIPT = """
import atexit, os, sys, threading, time, weakref
from pathlib import Path
from converters import api, cli

tmp = Path(sys.argv[1])
atexit.register(lambda: (tmp / "exit handler ran").write_text("yes"))
real_read = api.read
def read(*args, **kwargs):
    trace = real_read(*args, **kwargs)
    read.watch = weakref.ref(trace, lambda _: (tmp / "model freed").write_text("yes"))
    return trace
api.read = read
real_exit = os._exit
def ended(code):
    (tmp / f"os._exit({code})").write_text("yes")
    real_exit(code)
os._exit = ended
if sys.argv[2] == "thread":  # a thread Python waits for at exit, still running when the command ends
    threading.Thread(target=lambda: (time.sleep(0.3), (tmp / "thread done").write_text("yes"))).start()
sys.argv = ["et-convert", "stats", "--json", SET]
cli.ENTRY()
"""


def run_program(tmp_path, entry: str, thread: bool = False) -> subprocess.CompletedProcess:
    script = _SCRIPT.replace("SET", repr(str(SAMPLES / "chakra_data"))).replace("ENTRY", entry)
    return subprocess.run([sys.executable, "-c", script, str(tmp_path), "thread" if thread else "-"],
                          capture_output=True, text=True, cwd=ROOT)


def left(tmp_path) -> set[str]:
    return {p.name for p in tmp_path.iterdir()}


def test_the_program_runs_exit_handlers_flushes_its_output_and_does_not_free_the_model(tmp_path):
    done = run_program(tmp_path, "main")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)  # the whole output arrived: os._exit came after the flush
    assert stats["world"] == 4 and stats["iteration_time_ns"] > 0
    assert left(tmp_path) == {"exit handler ran", "os._exit(0)"}


def test_code_that_calls_run_gets_its_system_exit_and_the_model_is_freed(tmp_path):
    done = run_program(tmp_path, "run")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["world"] == 4
    assert left(tmp_path) == {"exit handler ran", "model freed"}


def test_a_thread_python_would_wait_for_makes_the_program_exit_as_usual(tmp_path):
    done = run_program(tmp_path, "main", thread=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["world"] == 4
    # sys.exit instead of os._exit: Python waits for the thread; the model is freed before it
    assert left(tmp_path) == {"exit handler ran", "thread done", "model freed"}


@pytest.mark.parametrize("args, code", [(["stats", "no such set"], 2), (["--version"], 0)])
def test_the_program_exits_with_the_command_s_code(args, code):
    done = subprocess.run([sys.executable, "-m", "converters.cli", *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == code
    assert done.stderr == ("et-convert: error: no such set: no such file or directory\n" if code else "")
    assert done.stdout.startswith("et-convert") if not code else done.stdout == ""


def test_a_library_user_s_models_are_not_kept():
    assert exiting._kept is None  # pytest never runs cli.main
    trace = api.read(SAMPLES / "chakra_data")
    assert trace.ranks and exiting._kept is None


def test_a_run_on_a_dask_cluster_ends_cleanly_through_the_program(tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "out.json"
    args = [str(SAMPLES / "megatron_tp2_pp2_dp1"), "--tp", "2", "--pp", "2", "-o", str(out)]
    done = subprocess.run([sys.executable, "-m", "converters.cli", *args, "--cluster", "local:1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    # Dask's exit handlers ran (else it warns of a cluster left open), nothing else was said
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(out.read_bytes())["traceEvents"]
