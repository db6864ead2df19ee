"""Issue 17: collectives ASTRA-sim never completes, though NCCL does.

Megatron logs collectives in groups of one rank whenever TP or DP is 1; ASTRA-sim never completes
such a collective and every rank stalls. Converters keep them as compute (their measured time
kept); the validator calls a set that still has them an error, and its dry run stalls there as
ASTRA-sim would. The same holds for ALL_GATHERs of fewer bytes than members (the simulator runs
forever) and for messages a rank sends to itself (the simulator aborts).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest

import converters as etc
from chakra_ref import check_astra_rules, rank_files, read_groups, read_rank
from conftest import LOG_SETS, ROOT, SAMPLES, run_cli
from converters.diagnostics import Diagnostics
from converters.model import CollType, NodeKind
from converters.options import Options
from converters.writers import chakra as chakra_writer
from helpers.scheduler_synth import coll, compute, recv, send, trace_of

COMP, COLL = 4, 7
ASTRA_SIM = ROOT.parent / "shared" / "astra-sim" / "run"
MS = 1_000_000


def convert_set(tmp_path: Path, name: str) -> tuple[Path, str]:
    prefix = tmp_path / name / "w"
    result = run_cli(SAMPLES / name, *LOG_SETS[name], "--to", "chakra", "-o", prefix)
    assert result.code == 0, result.stderr
    return prefix, result.stderr


@pytest.mark.parametrize("name", sorted(LOG_SETS))
def test_log_sets_with_tp_or_dp_1_have_no_collective_in_a_one_member_group(tmp_path, name):
    prefix, stderr = convert_set(tmp_path, name)
    groups = read_groups(prefix)
    assert groups and all(len(members) > 1 for members in groups.values()), groups
    files = rank_files(prefix)
    assert list(files) == [0, 1, 2, 3]
    for r, path in files.items():
        check_astra_rules(r, read_rank(path), groups)  # asserts no one-member collective
    assert "collectives in one-member groups kept as compute" in stderr
    validated = run_cli("validate", prefix.parent)
    assert validated.code == 0, validated.stdout


def test_tp1_collectives_become_compute_nodes_with_their_measured_time(tmp_path):
    prefix, stderr = convert_set(tmp_path, "megatron_tp1_pp2_dp2")
    rank0 = read_rank(rank_files(prefix)[0])
    by_name = {}
    for node in rank0.nodes:
        by_name.setdefault(node.name, []).append(node)
    # TP 1: the 32 TP all-reduces inside the forward and backward steps are compute now
    tp_subops = [n for name, nodes in by_name.items() if name.endswith(" allreduce") for n in nodes]
    assert len(tp_subops) == 32 and all(n.type == COMP for n in tp_subops)
    assert {n.duration_micros for n in tp_subops} == {300}  # 0.3 ms each, as logged
    # DP 2: the gradient all-reduce stays a collective in its two-member group
    (dp,) = by_name["dp_allreduce"]
    (embedding,) = by_name["ep_allreduce"]  # first and last stage: two members
    assert dp.type == COLL and embedding.type == COLL
    assert "128 collectives in one-member groups kept as compute" in stderr
    meta = {a.name: a for a in rank0.metadata.attr}
    assert any("one-member groups are kept as compute" in v for v in meta["assumptions"].string_list.values)


def test_demoted_collectives_keep_the_measured_iteration_and_say_what_they_were():
    options = Options(tp=1, pp=2)
    trace = etc.read(SAMPLES / "megatron_tp1_pp2_dp2", options=options)
    node = next(n for n in trace.ranks[0].nodes if n.name == "linear_fwd allreduce")
    assert node.kind is NodeKind.COMPUTE and node.duration_ns == 300_000 and node.start_ns is not None
    assert node.args["one_rank_collective"] == "ALL_REDUCE" and node.args["group"].startswith("tp#")
    assert node.coll is None and node.group is None
    # The iteration stays what was measured: first start to last end over every rank.
    nodes = [n for rank in trace.ranks.values() for n in rank.nodes]
    measured = max(n.start_ns + n.duration_ns for n in nodes) - min(n.start_ns for n in nodes)
    stats = orjson.loads(run_cli("stats", SAMPLES / "megatron_tp1_pp2_dp2", "--tp", "1", "--pp", "2", "--json").stdout)
    assert stats["timing"] == "measured"
    assert stats["iteration_time_ns"] == measured == 194_620_000


# ------------------------------------------------------------------ sets that still carry them


def write_unchecked(tmp_path: Path, programs, groups: dict[str, list[int]]) -> Path:
    """A Chakra set written straight by the writer, as another tool could have made it."""
    trace = trace_of(programs)
    trace.parallel.dp = trace.parallel.world
    for kind, members in groups.items():
        trace.add_group(kind, members)
    prefix = tmp_path / "set" / "w"
    chakra_writer.write(trace, prefix, Options(), Diagnostics())
    return prefix


def one_member_set(tmp_path: Path) -> Path:
    # group 1 = [0] (one member), group 2 = [0, 1]
    programs = {
        0: [compute(0, 2 * MS), coll(1, CollType.ALL_REDUCE, 1 << 20, [0], group=1, name="tp allreduce"),
            coll(2, CollType.ALL_REDUCE, 1 << 20, [1], group=2, name="dp allreduce")],
        1: [compute(0, 2 * MS), coll(1, CollType.ALL_REDUCE, 1 << 20, [0], group=2, name="dp allreduce")],
    }
    for node in programs[0][1:2]:
        node.duration_ns = MS  # measured
    return write_unchecked(tmp_path, programs, {"tp": [0], "dp": [0, 1]})


def test_validate_calls_a_one_member_collective_an_error_and_the_dry_run_stalls_there(tmp_path):
    prefix = one_member_set(tmp_path)
    result = run_cli("validate", prefix.parent, "--format", "json")
    assert result.code == 1
    findings = orjson.loads(result.stdout)["findings"]
    codes = sorted(f["code"] for f in findings)
    assert codes == ["E026", "E046"], findings
    e026 = next(f for f in findings if f["code"] == "E026")
    assert e026["ranks"] == [0] and "one-member group tp#1" in e026["message"]
    e046 = next(f for f in findings if f["code"] == "E046")
    assert "rank 0 waits in ALL_REDUCE of 1048576 B in tp#1 (1 member), which ASTRA-sim never completes" in e046["message"]
    assert "2 of 2 ranks blocked" in e046["message"]  # rank 1 waits in the dp all-reduce for rank 0


def test_rewriting_such_a_set_keeps_the_collective_as_compute_and_validates_clean(tmp_path):
    prefix = one_member_set(tmp_path)
    again = tmp_path / "again" / "w"
    result = run_cli(prefix.parent, "--to", "chakra", "-o", again)
    assert result.code == 0, result.stderr
    assert "1 collectives in one-member groups kept as compute" in result.stderr
    rank0 = read_rank(rank_files(again)[0])
    assert [(n.name, n.type) for n in rank0.nodes] == [("compute 0", COMP), ("tp allreduce", COMP), ("dp allreduce", COLL)]
    assert rank0.nodes[1].duration_micros == 1000
    assert read_groups(again) == {"2": [0, 1]}
    assert run_cli("validate", again.parent).code == 0


def test_a_one_member_collective_that_took_no_time_is_removed_and_its_dependents_rewired():
    programs = {0: [compute(0, MS), coll(1, CollType.ALL_REDUCE, 64, [0], group=1), compute(2, MS, [1])]}
    trace = trace_of(programs)
    trace.add_group("tp", [0])
    from converters.builders.one_rank import demote_one_rank_collectives

    assert demote_one_rank_collectives(trace) == 1
    assert [(n.id, n.deps) for n in trace.ranks[0].nodes] == [(0, []), (2, [0])]


def test_validate_finds_an_all_gather_smaller_than_its_group(tmp_path):
    programs = {r: [coll(0, CollType.ALL_GATHER, 3, group=1, name="gather")] for r in range(4)}
    prefix = write_unchecked(tmp_path, programs, {"tp": [0, 1, 2, 3]})
    result = run_cli("validate", prefix.parent, "--format", "json")
    assert result.code == 1
    findings = {f["code"]: f for f in orjson.loads(result.stdout)["findings"]}
    assert "E027" in findings and findings["E027"]["ranks"] == [0, 1, 2, 3]
    assert "ALL_GATHER of 3 B in tp#1 of 4 members" in findings["E027"]["message"]
    assert "never completes" in findings["E046"]["message"]


def test_validate_finds_a_message_to_oneself(tmp_path):
    programs = {0: [send(0, 0, 1024, tag=1), recv(1, 0, 1024, tag=1)], 1: [compute(0, MS)]}
    prefix = write_unchecked(tmp_path, programs, {})
    result = run_cli("validate", prefix.parent, "--format", "json")
    assert result.code == 1
    e038 = [f for f in orjson.loads(result.stdout)["findings"] if f["code"] == "E038"]
    assert [f["message"].split(":")[1].strip().split(" ")[0] for f in e038] == ["send", "recv"]
    assert all(f["ranks"] == [0] for f in e038)


# ------------------------------------------------------------------ the simulator itself, when present


@pytest.mark.skipif(not os.access(ASTRA_SIM, os.X_OK), reason="ASTRA-sim is not beside the project (../shared/astra-sim)")
@pytest.mark.parametrize("name", sorted(LOG_SETS))
@pytest.mark.parametrize("build", ["legacy", "head"])
def test_astra_sim_runs_the_log_sets_to_the_end(tmp_path, name, build):
    prefix, _ = convert_set(tmp_path, name)
    done = subprocess.run([str(ASTRA_SIM), build, str(prefix), "4", f"{prefix}.comm_group.json"],
                          capture_output=True, text=True, timeout=300)
    if "needs libprotobuf" in done.stdout:
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0 and done.stdout.startswith(f"OK {build} ranks=4"), done.stdout


def test_a_negative_tag_beside_a_one_member_collective_is_reported_not_a_crash(tmp_path):
    # The dry run's stand-ins are receives with negative tags; a real one (E015) is not one of them.
    programs = {0: [recv(0, 1, 64, tag=-3), coll(1, CollType.ALL_REDUCE, 64, [0], group=1)],
                1: [send(0, 0, 64, tag=-3)]}
    prefix = write_unchecked(tmp_path, programs, {"tp": [0]})
    result = run_cli("validate", prefix.parent, "--format", "json")
    assert result.code == 1 and "Traceback" not in result.stderr, result.stderr
    codes = {f["code"] for f in orjson.loads(result.stdout)["findings"]}
    assert {"E015", "E026", "E046"} <= codes, codes
