"""The OptimusPrime log through the command line: modelled Chrome timeline and Chakra set."""

from __future__ import annotations

import json
from collections import Counter

from chakra_ref import check_astra_rules, p2p_keys, rank_files, read_groups, read_rank
from conftest import SAMPLES, run_cli

SAMPLE = SAMPLES / "optimusprime_llama1b_pp8.log"


def test_chrome_timeline_with_labelled_model(tmp_path):
    out = tmp_path / "op.json"
    result = run_cli(SAMPLE, "--step", "7", "--schedule", "gpipe", "--bwd-factor", "2.5", "-o", out)
    assert result.code == 0, result.stderr
    trace = json.loads(out.read_text())
    meta = trace["metadata"]
    assert meta["source.format"] == "optimus-log"
    assert meta["details"]["step"] == 7 and meta["details"]["schedule"] == "gpipe"
    assert meta["details"]["measured_ms_per_batch"] == 1580.74
    assert meta["details"]["modelled_iteration_ms"] > 0
    assert any("backward time = 2.5 x forward" in a for a in meta["assumptions"])
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    waits = [e for e in slices if e["name"].startswith("waiting for rank")]  # receives' waiting parts
    assert waits and all("bind_id" not in e for e in waits)
    slices = [e for e in slices if not e["name"].startswith("waiting for rank")]
    per_pid = Counter(e["pid"] for e in slices)
    # stage 7 has 4 layers, no 2nd neighbour; pid 9: the measured vs modelled iteration
    assert per_pid == {1: 256, **{pid: 320 for pid in range(2, 9)}, 9: 3}
    assert meta["timing"] == "modelled"
    flows = Counter(e["bind_id"] for e in slices if "bind_id" in e)
    assert len(flows) == 7 * 32 * 2 and set(flows.values()) == {2}
    backward = next(e for e in slices if e["name"] == "layer[0] bwd mb0")
    assert backward["args"]["time_basis"] == "assumed: 2.5 x forward (no backward times in the log)"


def test_chakra_set_pairs_every_transfer(tmp_path):
    prefix = tmp_path / "op"
    result = run_cli(SAMPLE, "--to", "chakra", "-o", prefix)
    assert result.code == 0, result.stderr
    files = rank_files(prefix)
    assert list(files) == list(range(8))
    ranks = {r: read_rank(p) for r, p in files.items()}
    for r, rank in ranks.items():
        check_astra_rules(r, rank, read_groups(prefix))
    sends = Counter(k for rank in ranks.values() for k in p2p_keys(rank, 5))
    recvs = Counter(k for rank in ranks.values() for k in p2p_keys(rank, 6))
    assert sends == recvs and len(sends) == 7 * 32 * 2 and set(sends.values()) == {1}


def test_unknown_step_is_an_error(tmp_path):
    result = run_cli(SAMPLE, "--step", "0", "-o", tmp_path / "x.json")
    assert result.code == 2
    assert result.stderr == f"et-convert: error: {SAMPLE}: --step 0: the log has forward times for steps 1-20\n"
