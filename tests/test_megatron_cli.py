"""Megatron logs through the command line: Chrome flows, Chakra pairing, errors and warnings."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from chakra_ref import check_astra_rules, collective_sequence, p2p_keys, rank_files, read_groups, read_rank
from conftest import SAMPLES, run_cli
from helpers.megatron_synth import write_run

SEND, RECV = 5, 6


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mg_run")
    write_run(directory, stages=4, tp=2, microbatches=4)
    return directory


def test_synthetic_run_to_chrome_has_one_flow_per_pair_and_per_collective_instance(run_dir, tmp_path):
    out = tmp_path / "run.json"
    result = run_cli(run_dir, "-o", out)
    assert result.code == 0, result.stderr
    events = json.loads(out.read_text())["traceEvents"]
    flows = Counter(e["bind_id"] for e in events if "bind_id" in e)
    p2p_pairs = 2 * 3 * 4 * 2  # tp columns x stage boundaries x microbatches x directions
    tp_instances = 4 * 8 * 4  # tp groups x (4 forward + 4 backward steps) x 4 all-reduces
    embedding_instances = 2  # one per tp column; DP groups have one member: no flow
    assert len(flows) == p2p_pairs + tp_instances + embedding_instances
    ends = Counter(n for n in flows.values())
    assert ends == {2: len(flows)}  # every flow joins exactly two slices (pairs, two-member groups)
    pids = Counter(e["pid"] for e in events if e.get("ph") == "X")
    assert sorted(pids) == list(range(1, 9))


def test_p2p_flows_join_the_matching_send_and_receive(run_dir, tmp_path):
    out = tmp_path / "run.json"
    assert run_cli(run_dir, "-o", out).code == 0
    slices = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    ends = defaultdict(list)
    for e in slices:
        if "bind_id" in e:
            ends[e["bind_id"]].append(e)
    p2p = [pair for pair in ends.values() if all("tag" in e["args"] for e in pair)]
    assert len(p2p) == 2 * 3 * 4 * 2
    for pair in p2p:
        send, recv = sorted(pair, key=lambda e: not e["name"].startswith("send"))
        assert send["name"].startswith("send_") and recv["name"].startswith("recv_")
        assert send["args"]["tag"] == recv["args"]["tag"]
        assert send["args"]["microbatch"] == recv["args"]["microbatch"]
        assert (send["args"]["peer"], recv["args"]["peer"]) == (recv["pid"] - 1, send["pid"] - 1)
        first, second = sorted(pair, key=lambda e: (e["ts"], e["pid"]))
        assert first.get("flow_out") and second.get("flow_in")
    # one pair in full: rank 2 (stage 1) sends microbatch 1's activations to rank 4 (stage 2)
    send = next(e for e in slices if e["pid"] == 3 and e["name"].startswith("send_forward mb1"))
    [recv] = [e for e in ends[send["bind_id"]] if e is not send]
    assert (recv["pid"], recv["name"].split(" ")[:2], recv["tid"] // 1000) == (5, ["recv_forward", "mb1"], 5)
    assert recv["ts"] + recv["dur"] >= send["ts"]  # the receive waited for this send


def test_synthetic_run_to_chakra_pairs_every_send(run_dir, tmp_path):
    prefix = tmp_path / "w"
    result = run_cli(run_dir, "--to", "chakra", "-o", prefix)
    assert result.code == 0, result.stderr
    files = rank_files(prefix)
    assert list(files) == list(range(8))
    groups = read_groups(prefix)
    ranks = {r: read_rank(path) for r, path in files.items()}
    for r, rank in ranks.items():
        check_astra_rules(r, rank, groups)
    sends = Counter(k for rank in ranks.values() for k in p2p_keys(rank, SEND))
    recvs = Counter(k for rank in ranks.values() for k in p2p_keys(rank, RECV))
    assert sends == recvs and set(sends.values()) == {1} and len(sends) == 48
    for pg, members in groups.items():
        sequences = {tuple(collective_sequence(ranks[m], pg)) for m in members}
        assert len(sequences) == 1, f"group {pg} differs across members"


def test_rank4_sample_chrome_nests_sub_operations(tmp_path):
    out = tmp_path / "rank4.json"
    result = run_cli(SAMPLES / "megatron_rank4_pp_tp2.log", "-o", out)
    assert result.code == 0, result.stderr
    slices = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    waits = [e for e in slices if e["name"].startswith("waiting for rank")]
    assert len(slices) == 48 + len(waits) and len(waits) == 2  # the two receives' waiting parts
    slices = [e for e in slices if e not in waits]
    steps = {e["args"]["node"]: e for e in slices if e["name"] in ("forward_step mb0", "backward_step mb0")}
    subs = [e for e in slices if "sub_operation" in e["args"]]
    assert len(subs) == 40
    for sub in subs:
        parent = next(p for p in steps.values() if p["args"]["op"] == sub["args"]["step"])
        assert parent["ts"] <= sub["ts"] and sub["ts"] + sub["dur"] <= parent["ts"] + parent["dur"]
        assert sub["tid"] == parent["tid"]
    recv = next(e for e in slices if e["name"].startswith("recv_forward"))
    assert recv["args"]["wait_ns"] == 419_890_000


def test_cut_off_last_line_warns_and_strict_fails(tmp_path):
    lines = (SAMPLES / "megatron_rank4_pp_tp2.log").read_text().splitlines()
    log = tmp_path / "rank4.log"
    log.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:80])
    result = run_cli(log, "-o", tmp_path / "x.json")
    assert result.code == 0, result.stderr
    assert f"et-convert: warning: {log}:8: last line is cut off; converted the 7 complete lines before it" in result.stderr
    result = run_cli(log, "--strict", "-o", tmp_path / "y.json")
    assert result.code == 2
    assert result.stderr.strip().endswith(
        f"et-convert: error: {log}:8: last line is cut off (no closing ')'); the run may have crashed while writing it"
    )
    assert not (tmp_path / "y.json").exists()


def test_garbled_line_is_one_error_line(tmp_path):
    lines = (SAMPLES / "megatron_rank4_pp_tp2.log").read_text().splitlines()
    lines[2] = lines[2].replace("sub_operations=[]", "sub_operations=[oops")
    log = tmp_path / "rank4.log"
    log.write_text("\n".join(lines) + "\n")
    result = run_cli(log, "--from", "megatron-log", "-o", tmp_path / "x.json")
    assert result.code == 2
    assert result.stderr == (
        f"et-convert: error: {log}:3: cannot parse sub_operations: expected a list of quoted 'key=value,...' strings\n"
    )


def test_scaling_mode_draws_no_arrows_between_ranks(tmp_path):
    write_run(tmp_path / "logs", stages=2, tp=2, microbatches=2, scaling=True)
    out = tmp_path / "scaling.json"
    result = run_cli(tmp_path / "logs", "-o", out)
    assert result.code == 0, result.stderr
    trace = json.loads(out.read_text())
    assert [e for e in trace["traceEvents"] if "bind_id" in e] == []
    assert trace["metadata"]["flows"] == "none drawn: each rank was timed on its own clock (scaling-mode log)"
    sends = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("send_")]
    assert len(sends) == 2 * 2 * 2 and all("peer" in e["args"] for e in sends)  # the pairing stays in the args
    again = tmp_path / "retimed.json"
    assert run_cli(tmp_path / "logs", "--retime", "-o", again).code == 0
    retimed = json.loads(again.read_text())
    assert "flows" not in retimed["metadata"]  # one scheduled clock: arrows are back
    assert len({e["bind_id"] for e in retimed["traceEvents"] if "bind_id" in e}) > 0


def test_scaling_mode_retime(tmp_path):
    write_run(tmp_path / "logs", stages=2, tp=2, microbatches=2, scaling=True)
    out = tmp_path / "moe.json"
    result = run_cli(tmp_path / "logs", "--retime", "-o", out)
    assert result.code == 0, result.stderr
    meta = json.loads(out.read_text())["metadata"]
    assert meta["timing"] == "scheduled"
    assert meta["details"]["scaling_mode"] is True


def test_scaling_mode_retime_needs_every_rank(tmp_path):
    result = run_cli(SAMPLES / "megatron_rank2_moe_scaling.log", "--retime", "-o", tmp_path / "x.json")
    assert result.code == 2
    assert result.stderr.splitlines()[-1] == (
        "et-convert: error: --retime needs the logs of every rank the groups and transfers name; missing ranks 0, 1 "
        "(give all ranks' logs, or convert without --retime)"
    )
