"""`et-convert simulate`: ASTRA-sim's configs, its run judged by the run script's rules, the report.

The simulator is replaced by tests/astra_sim/standin.py, which replays real transcripts of both
builds (recorded by tests/astra_sim/record.py, exit statuses in manifest.json). The last tests
run the real builds from ../shared/astra-sim when they are there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import converters
from conftest import ROOT, SAMPLES
from converters.options import Options
from converters.scheduler import load_network, schedule
from converters.simulate import astra_configs, flattened, judge

ASTRA = Path(__file__).parent / "astra_sim"
sys.path.insert(0, str(ASTRA))
from record import BINARY, make_set  # noqa: E402

STANDIN = ASTRA / "standin.py"
RING8 = SAMPLES / "network_astra_ring8.toml"
MANIFEST = json.loads((ASTRA / "manifest.json").read_text())
SHARED = ROOT.parent / "shared" / "astra-sim"
# what the recorded simai8 transcripts print (both builds agree)
SIMAI8_FINISH = {0: 269626, 1: 269626, 2: 269626, 3: 269626, 4: 267550, 5: 267550, 6: 267550, 7: 267550}


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    where = tmp_path_factory.mktemp("sets")
    return {name: make_set(name, where) for name in ("simai8", "data4_stall")}


def simulate(*args, case: str, record: Path | None = None, sleep: float = 0):
    env = {**os.environ, "ASTRA_STANDIN_CASE": case, "ASTRA_STANDIN_SLEEP": str(sleep)}
    if record is not None:
        env["ASTRA_STANDIN_RECORD"] = str(record)
    done = subprocess.run([sys.executable, "-m", "converters.cli", "simulate", *map(str, args), "--astra-sim", STANDIN],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    return done


def simulate_json(chakra: Path, case: str, *extra):
    done = simulate(chakra, "--network", RING8, "--json", *extra, case=case)
    return done, json.loads(done.stdout)


def predicted(chakra: Path, network: Path = RING8) -> dict[int, int]:
    """Our scheduler on the set, with [default] for every group, as simulate predicts it."""
    timeline = schedule(converters.read(chakra), network=flattened(load_network(network)))
    return {int(r): row["finish_ns"] for r, row in timeline.summary["ranks"].items()}


# ---------------------------------------------------------------- configuration files


def test_configs_for_the_calibration_network_are_the_run_scripts():
    """network_astra_ring8.toml is the network of ../shared/astra-sim/run: the same files come out."""
    configs = astra_configs(load_network(RING8), 8)
    assert configs["network.yml"] == ("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]  # GB/s\n"
                                      "latency: [ 500 ]  # ns per hop\n")
    assert json.loads(configs["system.json"]) == {
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
        "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["ring"],
        "collective-optimization": "localBWAware", "local-mem-bw": 1600, "boost-mode": 0, "roofline-enabled": 0,
        "peak-perf": 900}
    assert json.loads(configs["remote_memory.json"]) == {"memory-type": "NO_MEMORY_EXPANSION"}
    if (SHARED / "head" / "system.json").exists():
        assert json.loads(configs["system.json"]) == json.loads((SHARED / "head" / "system.json").read_text())


def test_configs_follow_the_default_table():
    network = load_network(None, {"bandwidth_gbps": "100", "latency_ns": "700", "chunks": "2", "algorithm": "direct",
                                  "endpoint_delay_ns": "0", "local_mem_gbps": "800"})
    configs = astra_configs(network, 16)
    assert "npus_count: [ 16 ]\nbandwidth: [ 100 ]  # GB/s\nlatency: [ 700 ]" in configs["network.yml"]
    system = json.loads(configs["system.json"])
    assert (system["preferred-dataset-splits"], system["endpoint-delay"], system["local-mem-bw"]) == (2, 0, 800)
    assert system["all-to-all-implementation"] == ["direct"]


def test_the_simulator_gets_the_configs_and_the_set(sets, tmp_path):
    done = simulate(sets["simai8"], "--network", RING8, case="legacy_simai8_finished", record=tmp_path)
    assert done.returncode == 0, done.stderr
    args = json.loads((tmp_path / "args.json").read_text())
    flags = dict(arg.split("=", 1) for arg in args)
    assert flags["--workload-configuration"] == str(sets["simai8"] / "w")
    assert flags["--comm-group-configuration"] == str(sets["simai8"] / "w.comm_group.json")
    assert sorted(flags) == ["--comm-group-configuration", "--network-configuration",
                             "--remote-memory-configuration", "--system-configuration", "--workload-configuration"]
    assert (tmp_path / "network.yml").read_text() == astra_configs(load_network(RING8), 8)["network.yml"]
    assert (tmp_path / "system.json").read_text() == astra_configs(load_network(RING8), 8)["system.json"]


# ---------------------------------------------------------------- runs judged


@pytest.mark.parametrize("case", ["head_simai8_finished", "legacy_simai8_finished"])
def test_every_rank_finished(sets, case):
    done, report = simulate_json(sets["simai8"], case)
    assert done.returncode == 0 and done.stderr == ""
    assert (report["verdict"], report["ok"], report["stuck"]) == ("finished", True, [])
    assert {int(r): v["astra_sim_ns"] for r, v in report["ranks"].items()} == SIMAI8_FINISH
    assert {int(r): v["et_convert_ns"] for r, v in report["ranks"].items()} == predicted(sets["simai8"])
    assert report["iteration"]["astra_sim_ns"] == 269626


def test_the_text_report(sets):
    done = simulate(sets["simai8"], "--network", RING8, case="head_simai8_finished")
    ours = predicted(sets["simai8"])
    lines = done.stdout.splitlines()
    assert lines[0] == "ASTRA-sim finished: every rank finished (8 ranks)"
    assert lines[2] == f"{'ranks':<12}{'ASTRA-sim ns':>16}{'et-convert ns':>16}{'difference':>12}"
    diff = 100 * (ours[0] - 269626) / 269626
    assert lines[3] == f"{'0-3':<12}{269626:>16}{ours[0]:>16}{f'{diff:+.3f} %':>12}"
    assert lines[4].startswith(f"{'4-7':<12}{267550:>16}")
    assert lines[5].startswith(f"{'iteration':<12}{269626:>16}")
    assert lines[-1] == ("network (network_astra_ring8.toml): 50 GB/s, 500 ns per step, 4 chunk(s), ring, "
                         "endpoint delay 10 ns, local memory 1600 GB/s")


def test_a_crash_at_exit_after_every_rank_finished_is_not_a_stall(sets):
    assert MANIFEST["head_simai8_crash_at_exit"]["exit_status"] == 134
    done, report = simulate_json(sets["simai8"], "head_simai8_crash_at_exit")
    assert done.returncode == 0
    assert (report["verdict"], report["exit_status"], report["stuck"]) == ("crashed at exit", 134, [])
    assert {int(r): v["astra_sim_ns"] for r, v in report["ranks"].items()} == SIMAI8_FINISH
    assert done.stderr == (
        "et-convert: warning: ASTRA-sim crashed at exit (exit status 134, SIGABRT) after every rank had finished; "
        "the finish times are the ones it printed (a known defect of the feeder_v3 build, not a stall)\n")


def test_a_crash_before_every_rank_finished_names_the_ranks(sets):
    done, report = simulate_json(sets["simai8"], "head_simai8_crash_midway")
    assert done.returncode == 1
    assert report["verdict"] == "crashed"
    assert report["stuck"] == [1, 2, 3]  # the transcript has finish lines for ranks 4-7 and 0 only
    assert report["reason"] == "ASTRA-sim crashed (exit status 134, SIGABRT) before 3 of 8 ranks finished: 1, 2, 3"
    assert (report["ranks"]["4"]["astra_sim_ns"], report["ranks"]["0"]["astra_sim_ns"]) == (267550, 269626)
    assert report["validator_errors"] == []  # nothing wrong with the set


def test_a_stall_on_the_legacy_build_exits_1_with_every_stuck_rank(sets):
    done, report = simulate_json(sets["data4_stall"], "legacy_data4_stall")
    assert (done.returncode, report["exit_status"]) == (1, 0)  # ASTRA-sim itself said 0
    assert report["verdict"] == "stuck"
    assert report["reason"] == "4 of 4 ranks did not finish: 0, 1, 2, 3"
    assert [line.split(" · ")[0] for line in report["validator_errors"]] == ["E042 collective size mismatch"]
    text = simulate(sets["data4_stall"], "--network", RING8, case="legacy_data4_stall").stdout
    assert text.splitlines()[0] == "ASTRA-sim stuck: 4 of 4 ranks did not finish: 0, 1, 2, 3"
    assert "0-3           did not finish" in text
    assert "et-convert validate finds:\n  E042 collective size mismatch · group dp#1 [0..3]" in text


def test_a_stall_on_the_head_build_counts_its_critical_lines(sets):
    done, report = simulate_json(sets["data4_stall"], "head_data4_stall")
    assert done.returncode == 1
    assert report["stuck"] == [0, 1, 2, 3]
    assert report["reason"].startswith("4 of 4 ranks did not finish: 0, 1, 2, 3; 8 line(s) with "
                                       "[critical]/terminate called, first: ")
    assert report["reason"].endswith("[HardwareResource] [critical] !!!Hardware Resource sys.id=0 has unreleased nodes!!!")


def test_the_run_scripts_rules():
    line = "[workload] [info] sys[{}] finished, {} cycles, exposed communication 0 cycles."
    twice = "\n".join([line.format(0, 10), line.format(1, 20), line.format(1, 20)])
    result = judge(twice, 0, 2)
    assert (result.verdict, result.repeated, result.reason()) == (
        "failed", [1], "ranks with more than one finish line: 1")
    beyond = judge("\n".join([line.format(0, 10), line.format(1, 10), line.format(2, 10)]), 0, 2)
    assert (beyond.verdict, beyond.reason()) == ("failed", "finish lines for ranks beyond the set: 2")
    colour = judge(f"\x1b[32m{line.format(0, 10)}\x1b[0m\nterminate called after throwing", 0, 1)
    assert (colour.finished, colour.verdict) == ({0: 10}, "stuck")
    assert judge(line.format(0, 10), 3, 1).reason() == "ASTRA-sim exited with status 3"
    segfault = judge(line.format(0, 10), 139, 1)
    assert (segfault.verdict, segfault.ok, segfault.crash_signal) == ("crashed at exit", True, "SIGSEGV")
    no_library = judge("AstraSim: error while loading shared libraries: libprotobuf.so.32", 127, 2)
    assert (no_library.verdict, no_library.reason()) == (
        "failed", "ASTRA-sim exited with status 127; 2 of 2 ranks did not finish: 0, 1")
    thrown = judge(f"{line.format(0, 10)}\nterminate called after throwing an instance of 'std::runtime_error'", 134, 1)
    assert (thrown.verdict, thrown.reason()) == (
        "crashed", "ASTRA-sim crashed (exit status 134, SIGABRT); 1 line(s) with [critical]/terminate called, first: "
                   "terminate called after throwing an instance of 'std::runtime_error'")


def test_a_simulator_that_does_not_end_is_stopped(sets):
    done = simulate(sets["simai8"], "--timeout", "0.5", "--json", case="legacy_simai8_finished", sleep=30)
    report = json.loads(done.stdout)
    assert (done.returncode, report["verdict"]) == (1, "timeout")
    assert report["reason"] == "ASTRA-sim did not end within 0.5 s; ranks without a finish line: 0, 1, 2, 3, 4, 5, 6, 7"


# ---------------------------------------------------------------- inputs and options


def test_a_workload_table_is_written_as_a_set_first_and_kept(sets, tmp_path):
    table = SAMPLES / "workloads" / "astra_data.txt"
    done = simulate(table, "--num-npus", "4", "--network", RING8, "--keep", tmp_path / "sim", "--json",
                    case="legacy_data4_stall")
    report = json.loads(done.stdout)
    assert report["set"] == str(tmp_path / "sim" / "set" / "workload")
    kept = sorted(p.name for p in (tmp_path / "sim").iterdir())
    assert kept == ["astra-sim.log", "network.yml", "remote_memory.json", "set", "system.json"]
    assert sorted(p.name for p in (tmp_path / "sim" / "set").iterdir()) == [
        "workload.0.et", "workload.1.et", "workload.2.et", "workload.3.et", "workload.comm_group.json"]
    assert (tmp_path / "sim" / "astra-sim.log").read_text() == (ASTRA / "transcripts" / "legacy_data4_stall.log").read_text()
    assert report["ranks"]["0"]["et_convert_ns"] == predicted(tmp_path / "sim" / "set")[0]


def test_group_settings_without_counterpart_are_named(sets):
    done, report = simulate_json(sets["simai8"], "legacy_simai8_finished")
    assert report["no_counterpart"] == []  # ring8 has only [default]
    done = simulate(sets["simai8"], "--json", "--net", "pp.latency_ns=900", "--net", "size.2.chunks=2",
                    case="legacy_simai8_finished")
    report = json.loads(done.stdout)
    assert report["no_counterpart"] == [
        "size.2.chunks=2 (ASTRA-sim: 1)", "pp.latency_ns=900 (ASTRA-sim: 5000)",
        "tp.bandwidth_gbps=200 (ASTRA-sim: 50)", "tp.latency_ns=1000 (ASTRA-sim: 5000)"]  # tp: the built-in NVLink
    assert done.stderr.startswith("et-convert: warning: ASTRA-sim's Ring has one bandwidth, latency, chunking and "
                                  "algorithm for every group; these settings have no counterpart, so both runs use "
                                  "[default] instead: size.2.chunks=2 (ASTRA-sim: 1), pp.latency_ns=900 (ASTRA-sim: "
                                  "5000), tp.bandwidth_gbps=200 (ASTRA-sim: 50), tp.latency_ns=1000 (ASTRA-sim: 5000)\n")


def test_unusable_inputs_exit_2(sets, tmp_path):
    done = subprocess.run([sys.executable, "-m", "converters.cli", "simulate", str(sets["simai8"]), "--astra-sim",
                           str(tmp_path / "nothing")], capture_output=True, text=True, cwd=ROOT)
    assert (done.returncode, done.stderr) == (2, f"et-convert: error: --astra-sim {tmp_path / 'nothing'}: no such file\n")
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("w.0.et", "w.2.et", "w.comm_group.json"):
        (partial / name).write_bytes((sets["simai8"] / name).read_bytes())
    done = simulate(partial, case="legacy_simai8_finished")
    assert done.returncode == 2
    assert done.stderr.endswith("et-convert: error: the set lacks ranks 1 of 3; ASTRA-sim needs a file for every "
                                "rank 0..2\n")


def test_the_library_call(sets):
    os.environ["ASTRA_STANDIN_CASE"] = "legacy_simai8_finished"
    try:
        result = converters.simulate(sets["simai8"], STANDIN, options=Options(network=RING8))
    finally:
        del os.environ["ASTRA_STANDIN_CASE"]
    assert (result.ok, result.verdict, result.finished) == (True, "finished", SIMAI8_FINISH)
    assert result.predicted == predicted(sets["simai8"])


# ---------------------------------------------------------------- the real builds, when present


def real_build(build: str) -> Path:
    binary = SHARED / build / BINARY
    if not binary.exists():
        pytest.skip(f"no ASTRA-sim build at {binary}")
    if b"not found" in subprocess.run(["ldd", str(binary)], capture_output=True).stdout:
        pytest.skip("ASTRA-sim needs libprotobuf.so.32")
    return binary


@pytest.mark.parametrize("build", ["legacy", "head"])
def test_the_real_simulator(sets, build):
    """The recorded finish times are what the real builds print for the same set (both are deterministic);
    head may crash at exit or midway (its heap corruption), which simulate must then say."""
    binary = real_build(build)
    done = subprocess.run([sys.executable, "-m", "converters.cli", "simulate", str(sets["simai8"]), "--astra-sim",
                           str(binary), "--network", str(RING8), "--json"], capture_output=True, text=True, cwd=ROOT)
    report = json.loads(done.stdout)
    if report["verdict"] == "crashed":
        assert done.returncode == 1 and build == "head"
        return
    assert report["verdict"] in ("finished", "crashed at exit") and done.returncode == 0
    assert {int(r): v["astra_sim_ns"] for r, v in report["ranks"].items()} == SIMAI8_FINISH
    stalled = subprocess.run([sys.executable, "-m", "converters.cli", "simulate", str(sets["data4_stall"]),
                              "--astra-sim", str(binary), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert (stalled.returncode, json.loads(stalled.stdout)["stuck"]) == (1, [0, 1, 2, 3])
