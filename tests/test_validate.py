"""The validator on hand-built models: clean ones give nothing, each mutation its code and text."""

from __future__ import annotations

import re

import orjson
import pytest

from converters.diagnostics import Diagnostics, InputError
from converters.model import CollType, ExecutionTrace, Group, Node, NodeKind, Rank, WireAttr
from converters.options import Options
from converters.validate import CODES, gate, run_checks, validate_trace
from converters.validate.findings import format_ranks
from validate_cases import codes, drop_node, find, only, pipeline_model, wire_attrs


# ---------------------------------------------------------------- clean inputs


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("tp,dp,pp,mb", [(2, 2, 2, 2), (4, 1, 4, 6), (1, 1, 1, 3)])
def test_clean_models_have_no_findings(shared, tp, dp, pp, mb):
    trace = pipeline_model(tp, dp, pp, mb, shared=shared)
    report = validate_trace(trace)
    assert report.findings == []
    assert "deadlock" in report.checks and "collectives" in report.checks


def test_clean_model_with_chakra_attributes_has_no_findings():
    trace = pipeline_model(tp=2, dp=1, pp=2)
    for rank in trace.ranks.values():
        for node in rank.nodes:
            node.attrs = wire_attrs(node, rank.rank)
    assert run_checks(trace) == []


# ---------------------------------------------------------------- collectives across ranks


def test_drop_one_collective_on_one_rank():
    trace = pipeline_model(tp=4, dp=1, pp=2)
    drop_node(trace, 5, "tp all_reduce bwd mb0")
    findings = run_checks(trace)
    e040 = only(findings, "E040")
    assert e040.ranks == [5]
    assert e040.group["members"] == [4, 5, 6, 7]
    # stage 1 of 2 runs F0 B0 F1 B1: the dropped all-reduce was rank 5's second
    assert "seq 1 · rank 5 lacks the ALL_REDUCE 4194304 B that ranks 4,6,7 issue (3 collectives, not 4)" in e040.text()
    assert 'node 4 "tp all_reduce bwd mb0"' in e040.text()
    deadlock = only(findings, "E046")
    assert "rank 4 waits in tp#" in deadlock.message and "for rank 5" in deadlock.message


def test_several_missing_collectives_are_located_by_their_names():
    trace = pipeline_model(tp=4, dp=1, pp=2)
    # rank 5 (stage 1: F0 B0 F1 B1) loses microbatch 0's two all-reduces; by type and size alone
    # its sequence looks like the others' with the last two missing
    drop_node(trace, 5, "tp all_reduce fwd mb0")
    drop_node(trace, 5, "tp all_reduce bwd mb0")
    e040 = only(run_checks(trace), "E040")
    assert e040.ranks == [5]
    assert e040.message == ("seqs 0-1 · rank 5 lacks 2 collectives that ranks 4,6,7 issue: "
                            "ALL_REDUCE 2097152 B, ALL_REDUCE 4194304 B (2 collectives, not 4)")
    assert e040.node["name"] == "tp all_reduce fwd mb0"


def test_several_extra_collectives_name_the_minority():
    trace = pipeline_model(tp=4, dp=1, pp=1, microbatches=1)
    nodes = trace.ranks[2].nodes
    tp = find(trace, 2, "tp all_reduce fwd mb0").group
    nodes += [Node(100 + i, f"extra {i}", NodeKind.COLLECTIVE, deps=[99 + i] if i else [len(nodes) - 1],
                   coll=CollType.ALL_GATHER, size=8, group=tp) for i in range(3)]
    e040 = only(run_checks(trace), "E040")
    assert e040.ranks == [2]
    assert e040.message == ("seqs 2-4 · rank 2 issues 3 extra collectives that ranks 0,1,3 do not: "
                            "3 × ALL_GATHER 8 B (5 collectives, not 2)")
    assert e040.node["name"] == "extra 0"


def test_change_one_size_names_culprit_and_node():
    trace = pipeline_model(tp=4, dp=1, pp=2)
    find(trace, 5, "tp all_reduce bwd mb0").size = 123
    e042 = only(run_checks(trace), "E042")
    assert e042.ranks == [5]
    label = trace.groups[find(trace, 5, "tp all_reduce bwd mb0").group].label
    assert e042.text().startswith(
        f"E042 collective size mismatch · group {label} [4..7] · seq 1 · rank 5: ALL_REDUCE 123 B, ranks 4,6,7: 4194304 B")
    assert e042.text().endswith('· microbatch 0 · node 4 "tp all_reduce bwd mb0" · w.txt:14')
    assert e042.node == {"id": 4, "name": "tp all_reduce bwd mb0"}


def test_change_one_type():
    trace = pipeline_model(tp=4, dp=1, pp=2)
    find(trace, 6, "tp all_reduce fwd mb1").coll = CollType.ALL_GATHER
    e041 = only(run_checks(trace), "E041")
    assert e041.ranks == [6]
    assert "rank 6: ALL_GATHER 2097152 B, ranks 4,5,7: ALL_REDUCE" in e041.message
    assert e041.node["name"] == "tp all_reduce fwd mb1"


def test_reorder_two_collectives():
    trace = pipeline_model(tp=4, dp=1, pp=2, microbatches=2)
    # stage 0 runs F0 F1 B0 B1: swap the fwd mb1 and bwd mb0 all-reduces on rank 2
    a, b = find(trace, 2, "tp all_reduce fwd mb1"), find(trace, 2, "tp all_reduce bwd mb0")
    a.size, b.size = b.size, a.size
    findings = run_checks(trace)
    e044 = only(findings, "E044")
    assert e044.ranks == [2]
    assert "seq 1 · rank 2: ALL_REDUCE 4194304 B then ALL_REDUCE 2097152 B; ranks 0,1,3: the other order" in e044.message


def test_majority_vote_names_the_minority():
    trace = pipeline_model(tp=4, dp=1, pp=1, microbatches=1)
    for r in (1, 2):
        find(trace, r, "tp all_reduce fwd mb0").size = 7
    e042 = only(run_checks(trace), "E042")
    assert e042.ranks == [1, 2]
    assert "ranks 1,2: ALL_REDUCE 7 B, ranks 0,3: 2097152 B" in e042.message
    assert "no majority" in e042.message  # 2 against 2


def test_member_that_never_issues_is_named():
    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=1)
    for name in ("tp all_reduce fwd mb0", "tp all_reduce bwd mb0"):
        drop_node(trace, 1, name)
    e043 = only(run_checks(trace), "E043")
    assert e043.ranks == [1]
    assert e043.message.startswith(
        "rank 1 never issues any of the 2 collectives that rank 0 issues, first ALL_REDUCE 2097152 B")


def test_unsupported_collective_type():
    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=1)
    for r in (0, 1):
        find(trace, r, "tp all_reduce fwd mb0").coll = CollType.REDUCE
    e013 = only(run_checks(trace), "E013")
    assert "REDUCE on 1 node; ASTRA-sim simulates only" in e013.message
    assert "E041" not in codes(run_checks(trace))


# ---------------------------------------------------------------- send / receive


def test_wrong_tag_gives_unmatched_send_and_recv():
    trace = pipeline_model(tp=1, dp=1, pp=2, microbatches=2)
    find(trace, 0, "send act mb1").tag = 99
    findings = run_checks(trace)
    e034, e035 = only(findings, "E034"), only(findings, "E035")
    assert e034.message.startswith("rank 0 (stage 0) -> rank 1 (stage 1) · no recv on rank 1 with tag 99")
    assert e034.node["name"] == "send act mb1" and e034.ranks == [0, 1]
    assert "no send on rank 0 with tag 2" in e035.message and e035.node["name"] == "recv act mb1"


def test_drop_a_receive():
    trace = pipeline_model(tp=1, dp=1, pp=2, microbatches=2)
    drop_node(trace, 0, "recv grad mb1")
    findings = run_checks(trace)
    e034 = only(findings, "E034")
    assert e034.ranks == [0, 1] and e034.node["name"] == "send grad mb1"
    assert "rank 1 (stage 1) -> rank 0 (stage 0) · no recv on rank 0 with tag 3 (1048576 B)" in e034.message
    assert "E035" not in codes(findings)


def test_p2p_size_mismatch():
    trace = pipeline_model(tp=1, dp=1, pp=2, microbatches=1)
    find(trace, 1, "recv act mb0").size = 10
    e036 = only(run_checks(trace), "E036")
    assert "send of 1048576 B, receive on rank 1 of 10 B" in e036.message


def test_p2p_mismatch_on_a_shared_list_is_reported_for_each_rank_that_runs_it():
    trace = pipeline_model(tp=2, dp=2, pp=2, microbatches=1, shared=True)
    find(trace, 4, "recv act mb0").size = 10  # stage 1's shared list: ranks 4-7 (rank 4's peer is 0)
    e036 = [f for f in run_checks(trace) if f.code == "E036"]
    assert sorted(f.ranks for f in e036) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def two_peers_that_are_one(recv_sizes: list[int]) -> ExecutionTrace:
    """Rank 3 runs rank 0's list, whose two peers 1 and 2 are both rank 1 for rank 3."""
    trace = ExecutionTrace()
    sends = [Node(0, "s8", NodeKind.SEND, peer=1, tag=5, size=8), Node(1, "s16", NodeKind.SEND, deps=[0], peer=2, tag=5, size=16)]
    trace.ranks[0] = Rank(0, sends)
    trace.ranks[3] = Rank(3, sends, peer_map={2: 1})
    trace.ranks[1] = Rank(1, [Node(0, "r", NodeKind.RECV, peer=0, tag=5, size=8)] + [
        Node(i + 1, "r", NodeKind.RECV, deps=[i], peer=3, tag=5, size=size) for i, size in enumerate(recv_sizes)])
    trace.ranks[2] = Rank(2, [Node(0, "r", NodeKind.RECV, peer=0, tag=5, size=16)])
    return trace


def test_sends_of_a_shared_list_to_one_peer_pair_in_issue_order():
    assert [f for f in run_checks(two_peers_that_are_one([8, 16])) if f.check == "p2p"] == []
    swapped = [f for f in run_checks(two_peers_that_are_one([16, 8])) if f.check == "p2p"]
    assert codes(swapped) == ["E036", "E036"] and all(f.ranks == [1, 3] for f in swapped)


def test_send_without_tag():
    trace = pipeline_model(tp=1, dp=1, pp=2, microbatches=1)
    find(trace, 0, "send act mb0").tag = None
    e015 = only(run_checks(trace), "E015")
    assert "send without a tag" in e015.message


# ---------------------------------------------------------------- per-rank graph


def test_dangling_dependency():
    trace = pipeline_model(tp=1, dp=1, pp=1, microbatches=2)
    find(trace, 0, "backward mb0").deps = [77]
    findings = run_checks(trace)
    e002 = only(findings, "E002")
    assert e002.message == "rank 0: node 1 depends on node 77, which is not in the file"
    assert e002.node["name"] == "backward mb0"
    e005 = only(findings, "E005")
    assert e005.message.startswith("rank 0: 3 nodes can never run")


def test_cycle_is_found_iteratively_and_printed():
    trace = pipeline_model(tp=1, dp=1, pp=1, microbatches=2)
    find(trace, 0, "forward mb0").deps = [find(trace, 0, "backward mb0").id]
    e004 = only(run_checks(trace), "E004")
    # one stage of one rank (no collectives) runs F0 B0 F1 B1: nodes 0 forward, 1 backward mb0
    assert e004.message == 'rank 0: dependency cycle 0 "forward mb0" -> 1 "backward mb0" -> 0 "forward mb0"'


def test_long_chain_cycle_has_no_recursion_limit():
    n = 50_000
    nodes = [Node(i, f"n{i}", NodeKind.COMPUTE, duration_ns=1, deps=[(i - 1) % n]) for i in range(n)]
    trace = ExecutionTrace(ranks={0: Rank(0, nodes)})
    e004 = only(run_checks(trace), "E004")
    assert e004.message == 'rank 0: dependency cycle 0 "n0" -> 1 "n1" -> 2 "n2" -> 3 "n3" -> 4 "n4" -> 5 "n5" -> ... (50000 nodes) -> 0 "n0"'


def test_ordering_edges_only_in_ctrl_deps_are_a_warning():
    trace = pipeline_model(tp=1, dp=1, pp=1, microbatches=2)
    nodes = trace.ranks[0].nodes
    nodes[2].ctrl_deps, nodes[2].deps = [0, 1], [1]  # edge 1 in both lists: fine; edge 0 only in ctrl_deps
    nodes[4].ctrl_deps, nodes[4].deps = [3], []
    findings = run_checks(trace)
    assert codes(findings) == ["W006"]
    assert findings[0].message == (
        "rank 0: node 2 waits for node 0 only through ctrl_deps, which ASTRA-sim's old feeder ignores "
        "(and 1 more nodes); `et-convert SET --from chakra --to chakra` rewrites them into data_deps")
    assert findings[0].node["name"] == nodes[2].name
    nodes[2].deps, nodes[4].deps = [0, 1], [3]  # the same edges also in data_deps: nothing to say
    assert run_checks(trace) == []


def test_self_dependency_and_duplicate_id():
    trace = pipeline_model(tp=1, dp=1, pp=1, microbatches=2)
    nodes = trace.ranks[0].nodes
    nodes[2].deps = [2]
    nodes[3].id = 1
    found = codes(run_checks(trace))
    assert "E003" in found and "E001" in found


def test_shared_graph_is_reported_once_for_all_its_ranks():
    trace = pipeline_model(tp=2, dp=2, pp=2, shared=True)
    trace.ranks[0].nodes[3].deps = [999]  # stage 0's list is shared by ranks 0-3
    e002 = [f for f in run_checks(trace) if f.code == "E002"]
    assert len(e002) == 1
    assert e002[0].ranks == [0, 1, 2, 3]
    assert e002[0].message.startswith("ranks 0-3 (one shared graph): node 3 depends on node 999")


def test_shared_graph_groups_resolve_per_rank():
    trace = pipeline_model(tp=2, dp=2, pp=2, shared=True)
    rank3 = trace.ranks[3]
    assert rank3.nodes is trace.ranks[0].nodes
    trace.ranks[3] = Rank(3, [Node(n.id, n.name, n.kind, n.duration_ns, list(n.deps), coll=n.coll, size=n.size,
                                   group=rank3.group_of(n), peer=rank3.peer_of(n), tag=n.tag) for n in rank3.nodes],
                          coords=rank3.coords)
    find(trace, 3, "tp all_reduce fwd mb0").size = 5  # rank 3's own copy now differs from its TP peer rank 2
    e042 = only(run_checks(trace), "E042")
    assert e042.ranks == [3] and e042.group["members"] == [2, 3]


# ---------------------------------------------------------------- attributes


def test_comm_size_stored_as_uint64():
    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=1)
    for rank in trace.ranks.values():
        for node in rank.nodes:
            node.attrs = wire_attrs(node, rank.rank)
    node = find(trace, 1, "tp all_reduce fwd mb0")
    node.attrs = [WireAttr(a.name, "uint64_val", a.value) if a.name == "comm_size" else a for a in node.attrs]
    e010 = only(run_checks(trace), "E010")
    assert e010.ranks == [1]
    assert e010.message == "rank 1: comm_size is stored as uint64_val on 1 node; ASTRA-sim reads only int64_val and sees 0"
    assert e010.node["name"] == "tp all_reduce fwd mb0"


def test_missing_attribute_and_wrong_src():
    trace = pipeline_model(tp=1, dp=2, pp=2, microbatches=1)
    for rank in trace.ranks.values():
        for node in rank.nodes:
            node.attrs = wire_attrs(node, rank.rank)
    send = find(trace, 0, "send act mb0")
    send.attrs = [WireAttr("comm_src", "int32_val", 1) if a.name == "comm_src" else a for a in send.attrs]
    coll = find(trace, 1, "dp all_reduce")
    coll.attrs = [a for a in coll.attrs if a.name != "comm_type"]
    findings = run_checks(trace)
    assert "send has comm_src=1, not its own rank" in only(findings, "E016").message
    assert "COLLECTIVE node has no comm_type attribute" in only(findings, "E011").message


def test_nodes_of_two_kinds_sharing_one_attrs_list_are_each_checked_for_their_kind():
    # the Chakra reader gives the nodes of one message tail one attrs list; what it lacks is
    # found once per list and kind
    trace = pipeline_model(tp=1, dp=2, pp=2, microbatches=1)
    for rank in trace.ranks.values():
        for node in rank.nodes:
            node.attrs = wire_attrs(node, rank.rank)
    coll, send = find(trace, 1, "dp all_reduce"), find(trace, 1, "send act mb0")
    coll.attrs = send.attrs = [a for a in coll.attrs if a.name != "comm_type"]
    messages = sorted(f.message for f in run_checks(trace) if f.code == "E011")
    assert messages == ["rank 1: COLLECTIVE node has no comm_type attribute on 1 node; ASTRA-sim reads 0",
                        "rank 1: SEND node has no comm_dst attribute on 1 node; ASTRA-sim reads 0",
                        "rank 1: SEND node has no comm_src attribute on 1 node; ASTRA-sim reads 0",
                        "rank 1: SEND node has no comm_tag attribute on 1 node; ASTRA-sim reads 0"]


def test_zero_duration_compute_only_matters_for_chakra_input():
    trace = pipeline_model(tp=1, dp=1, pp=1, microbatches=1)
    find(trace, 0, "forward mb0").duration_ns = 0
    assert run_checks(trace) == []  # the writer rounds up to 1 µs
    for node in trace.ranks[0].nodes:
        node.attrs = wire_attrs(node, 0)
    assert codes(run_checks(trace)) == ["W019"]


# ---------------------------------------------------------------- groups and the rank set


def test_pg_name_missing_from_group_file():
    trace = pipeline_model(tp=2, dp=2, pp=2)
    gid = find(trace, 0, "dp all_reduce").group
    del trace.groups[gid]
    e020 = only(run_checks(trace), "E020")
    assert e020.message == f"ranks 0,2 communicate in pg_name {gid} (2 nodes), but the group file does not define it"


def test_pg_name_without_any_group_file_suggests_the_groups_option():
    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=1)
    trace.groups = {}
    e020 = only(run_checks(trace), "E020")
    assert e020.message == ("ranks 0,1 communicate in pg_name 1 (4 nodes), but there is no comm_group.json beside "
                            "the set (name one with `et-convert validate --groups FILE`)")


def test_zero_size_and_untyped_collectives():
    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=1)
    for r in trace.ranks:  # on every member, so that only the nodes check has something to say
        find(trace, r, "tp all_reduce fwd mb0").size = 0
        find(trace, r, "tp all_reduce bwd mb0").coll = None
    findings = run_checks(trace)
    assert codes(findings) == ["E012", "E018", "E012", "E018"]
    assert findings[0].message == "rank 0: collective of size 0 B on 1 node; sizes must be > 0"
    assert findings[1].message == "rank 0: collective without a type on 1 node"
    assert findings[1].node["name"] == "tp all_reduce bwd mb0"


def test_rank_not_member_of_its_group():
    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=1)
    gid = find(trace, 0, "tp all_reduce fwd mb0").group
    trace.groups[gid] = Group(gid, "tp", (0, 5), "tp#1")
    e021 = only(run_checks(trace), "E021")
    assert e021.ranks == [1] and e021.message == "rank 1 communicates in tp#1 but is not a member"


def test_missing_rank():
    trace = pipeline_model(tp=2, dp=2, pp=2)
    trace.ranks[0].source = "out/w.0.et"
    del trace.ranks[5]
    e023 = only(run_checks(trace), "E023")
    assert e023.message.startswith("rank 5 is missing (no w.5.et); present: 0-4,6,7;")
    assert "tp#" in e023.message
    # the scheduler cannot run a group that names an absent rank: the dry run says so
    i047 = only(run_checks(trace), "I047")
    assert i047.message.endswith("group tp#9 names rank 5, which is not in the trace")


def test_world_inconsistent_with_parallel_sizes():
    trace = pipeline_model(tp=2, dp=2, pp=2)
    trace.parallel.dp = 3
    e022 = [f for f in run_checks(trace) if f.code == "E022"]
    assert e022 and e022[0].message == "world 8 ≠ tp 2 · dp 3 · pp 2 = 12"


# ---------------------------------------------------------------- deadlock dry run


def test_cross_group_order_deadlock_found_by_dry_run_only():
    # Each group's sequences agree, but rank 0 waits in g1 while rank 1 waits in g2.
    trace = ExecutionTrace()
    g1 = trace.add_group("tp", [0, 1], "tp#1")
    g2 = trace.add_group("dp", [0, 1], "dp#2")

    def program(first, second):
        return [Node(0, "c", NodeKind.COMPUTE, duration_ns=10),
                Node(1, f"ar {first.name}", NodeKind.COLLECTIVE, deps=[0], coll=CollType.ALL_REDUCE, size=64, group=first.id),
                Node(2, f"ar {second.name}", NodeKind.COLLECTIVE, deps=[1], coll=CollType.ALL_REDUCE, size=64, group=second.id)]

    trace.ranks = {0: Rank(0, program(g1, g2)), 1: Rank(1, program(g2, g1))}
    findings = run_checks(trace)
    assert codes(findings) == ["E046"]
    assert "rank 0 waits in tp#1" in findings[0].message and "(cycle)" in findings[0].message


# ---------------------------------------------------------------- report, gate, command


def test_every_code_has_a_title_and_the_docstring_lists_it():
    import importlib

    v = importlib.import_module("converters.validate")  # the package; `converters.validate` is the API function

    for code, title in CODES.items():
        assert re.fullmatch(r"[EWI]\d{3}", code) and title
        assert code in v.__doc__


def test_every_code_in_the_table_is_asserted_by_some_test():
    """A code no test produces is dead or untested (E089 is the fallback for a Chrome rule
    without a code of its own; every rule has one today)."""
    from pathlib import Path

    tests = "".join(path.read_text() for path in sorted(Path(__file__).parent.glob("*.py")))
    unasserted = [code for code in CODES if code != "E089" and code not in tests]
    assert unasserted == []


def test_text_report_groups_by_check_caps_and_summarises():
    trace = pipeline_model(tp=1, dp=1, pp=1, microbatches=1)
    for i in range(5):
        trace.ranks[i + 1] = Rank(i + 1, [Node(0, "x", NodeKind.COMPUTE, deps=[9])])
    report = validate_trace(trace)
    text = report.text(max_per_check=2)
    lines = text.splitlines()
    assert lines[0] == "graph: 5 findings"
    assert lines[3] == "  ... 3 more (E002); raise --max-per-check to see them"
    assert lines[4] == "deadlock: 1 finding"  # the dry run stalls on the missing dependencies too
    assert re.fullmatch(r"validate: 6 errors, 0 warnings · 6 ranks · \d+ checks · \d+\.\d s", lines[-1])
    document = orjson.loads(report.json(max_per_check=2))
    assert document["summary"]["errors"] == 6 and document["summary"]["not_shown"] == {"graph": 3}
    assert [f["code"] for f in document["findings"]] == ["E002", "E002", "E046"]
    assert document["findings"][0]["code"] == "E002" and document["findings"][0]["severity"] == "error"
    assert document["findings"][0]["node"] == {"id": 0, "name": "x"}


def test_gate_refuses_errors_unless_forced():
    trace = pipeline_model(tp=4, dp=1, pp=1, microbatches=1)
    find(trace, 3, "tp all_reduce fwd mb0").size = 1
    with pytest.raises(InputError) as caught:
        gate(trace, Options(), Diagnostics())
    assert "refusing to write a Chakra set" in str(caught.value) and "E042" in str(caught.value)
    diagnostics = Diagnostics()
    findings = gate(trace, Options(force=True), diagnostics)
    assert "E042" in codes(findings)
    assert any("E042" in m and "--force" in m for m in diagnostics.messages())
    assert gate(pipeline_model(), Options(), Diagnostics()) == []


def test_format_ranks():
    assert format_ranks([96, 97, 98, 99, 100, 101, 102, 103], "..") == "96..103"
    assert format_ranks([0, 1, 2, 3, 4, 6, 7]) == "0-4,6,7"
    assert format_ranks(range(68, 125, 8)) == "68..124 step 8"
    assert format_ranks([]) == "none"


def test_dtype_mismatch_and_broadcast_and_cpu_comm():
    trace = pipeline_model(tp=4, dp=1, pp=1, microbatches=1)
    for r in range(4):
        find(trace, r, "tp all_reduce fwd mb0").args["dtype"] = "torch.bfloat16" if r == 2 else "torch.float32"
        find(trace, r, "tp all_reduce bwd mb0").coll = CollType.BROADCAST
    findings = run_checks(trace)
    e045 = only(findings, "E045")
    assert e045.ranks == [2]
    assert "rank 2: ALL_REDUCE 2097152 B torch.bfloat16, ranks 0,1,3: ALL_REDUCE 2097152 B torch.float32" in e045.message
    assert only(findings, "W014").message.startswith("rank 0: BROADCAST on 1 node; ASTRA-sim only replays")
    trace = pipeline_model(tp=1, dp=2, pp=1, microbatches=1)
    for rank in trace.ranks.values():
        for node in rank.nodes:
            node.attrs = wire_attrs(node, rank.rank)
    node = find(trace, 0, "dp all_reduce")
    node.attrs = [WireAttr("is_cpu_op", "bool_val", True) if a.name == "is_cpu_op" else a for a in node.attrs]
    e017 = only(run_checks(trace), "E017")
    assert e017.node["name"] == "dp all_reduce" and e017.ranks == [0]


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(tp=st.integers(3, 5), pp=st.integers(1, 3), mb=st.integers(1, 3), data=st.data())
def test_any_single_resized_collective_names_its_rank(tp, pp, mb, data):
    trace = pipeline_model(tp=tp, dp=1, pp=pp, microbatches=mb)
    rank = data.draw(st.integers(0, tp * pp - 1))
    colls = [n for n in trace.ranks[rank].nodes if n.kind == NodeKind.COLLECTIVE and n.name.startswith("tp")]
    victim = data.draw(st.sampled_from(colls))
    victim.size += data.draw(st.integers(1, 1000))
    findings = run_checks(trace)
    assert codes(findings) == ["E042"]
    assert findings[0].ranks == [rank] and findings[0].node["name"] == victim.name


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_per_node_checks_find_with_their_fast_paths_what_they_find_node_by_node(data):
    """check_nodes and check_attributes skip their node-by-node loops when C-level passes
    over the columns (or the shared attrs lists) show nothing to report. On nodes with random
    problems (types, sizes, durations, missing or cpu-marked attributes, lists shared by nodes
    of one kind or of several), their findings equal those with the loops always run."""
    from converters.validate import nodes as checks
    from converters.validate.context import build_context

    trace = pipeline_model(tp=2, dp=1, pp=1, microbatches=2)
    shared_lists = []
    for rank in trace.ranks.values():
        for node in rank.nodes:
            if data.draw(st.booleans()):
                attrs = wire_attrs(node, rank.rank)
                if data.draw(st.booleans()):
                    attrs = attrs[:data.draw(st.integers(0, len(attrs)))]
                if data.draw(st.integers(0, 5)) == 0:
                    attrs = [*attrs, WireAttr("is_cpu_op", "bool_val", True)]
                if shared_lists and data.draw(st.booleans()):
                    attrs = data.draw(st.sampled_from(shared_lists))  # (maybe another kind's list)
                shared_lists.append(attrs)
                node.attrs = attrs
            if node.kind == NodeKind.COLLECTIVE:
                node.coll = data.draw(st.sampled_from([node.coll, None, CollType.BROADCAST, CollType.GATHER]))
                node.size = data.draw(st.sampled_from([node.size, 0, -1]))
            node.duration_ns = data.draw(st.sampled_from([node.duration_ns, 0]))
    ctx = build_context(trace, Options())
    fast = (checks.check_nodes(ctx), checks.check_attributes(ctx))
    saved = checks._collectives_clean, checks._any_lacking
    checks._collectives_clean, checks._any_lacking = (lambda nodes, colls: False), (lambda found_for: True)
    try:
        slow = (checks.check_nodes(ctx), checks.check_attributes(ctx))
    finally:
        checks._collectives_clean, checks._any_lacking = saved
    assert fast == slow
