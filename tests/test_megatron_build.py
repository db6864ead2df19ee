"""Megatron op logs -> the model: samples, the synthetic 1F1B run, fused exchanges, layouts."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

import converters as etc
from conftest import SAMPLES
from converters.diagnostics import Diagnostics, InputError
from converters.model import CollType, NodeKind
from converters.validate import run_checks
from helpers.megatron_synth import chain, drop_op, replace_in_op, run_lines, write_run

RANK4 = SAMPLES / "megatron_rank4_pp_tp2.log"
MOE = SAMPLES / "megatron_rank2_moe_scaling.log"
MS = 1_000_000


def read(inputs, diagnostics=None, **options):
    return etc.read(inputs, "megatron-log", diagnostics=diagnostics or Diagnostics(), **options)


def top_level(rank):
    return [n for n in rank.nodes if n.parent is None]


def end(node):
    return node.start_ns + node.duration_ns


# ---------------------------------------------------------------- the real single-rank sample

def test_rank4_sample_converts_through_auto_detection():
    diagnostics = Diagnostics()
    trace = etc.read(RANK4, diagnostics=diagnostics)
    assert trace.source.format == "megatron-log"
    assert list(trace.ranks) == [4]
    # its stage pins tp*dp = 2; tp 2 rather than dp 2 comes from the TP sub-operations alone, which is said
    assert diagnostics.messages() == [
        f"{RANK4}: layout guessed as tp=2, dp=1, pp=4: tp 2 read from the TP sub-operations, which tp=1 runs "
        "also log; give --tp/--dp/--pp to state it"
    ]


def test_rank4_sample_model():
    trace = read(RANK4)
    assert list(trace.ranks) == [4]
    rank = trace.ranks[4]
    assert rank.coords == {"tp": 0, "dp": 0, "pp": 2, "ep": 0}
    p = trace.parallel
    assert (p.world, p.tp, p.dp, p.pp, p.microbatches) == (8, 2, 1, 4, 1)
    assert len(rank.nodes) == 8 + 40
    kinds = Counter(n.kind for n in rank.nodes)
    # DP 1: the gradient all-reduce of the one-member DP group is kept as compute (issue 17)
    assert kinds == {NodeKind.COMPUTE: 4, NodeKind.SEND: 2, NodeKind.RECV: 2, NodeKind.COLLECTIVE: 40}
    assert trace.timing == "measured"
    assert all(n.start_ns is not None and n.start_ns >= 0 for n in rank.nodes)
    assert min(n.start_ns for n in rank.nodes) == 0
    assert trace.time_origin_ns == 4_509_232_210_480_000 - 420_450_000
    names = [n.name for n in top_level(rank)]
    assert names == [
        "recv_forward mb0", "forward_step mb0", "send_forward mb0", "recv_backward mb0",
        "backward_step mb0", "send_backward mb0", "dp_allreduce", "optimizer_step",
    ]
    assert all(n.source == f"{RANK4}:{i + 1}" for i, n in enumerate(top_level(rank)))


def test_rank4_p2p_peers_tags_and_sizes():
    rank = read(RANK4).ranks[4]
    p2p = {n.name: n for n in rank.nodes if n.kind in (NodeKind.SEND, NodeKind.RECV)}
    activation = 2048 * 2 * 5120 * 4
    assert {name: (n.kind, n.peer, n.tag, n.size) for name, n in p2p.items()} == {
        "recv_forward mb0": (NodeKind.RECV, 2, 0, activation),
        "send_forward mb0": (NodeKind.SEND, 6, 0, activation),
        "recv_backward mb0": (NodeKind.RECV, 6, 1, activation),
        "send_backward mb0": (NodeKind.SEND, 2, 1, activation),
    }
    assert p2p["send_forward mb0"].args["peer_stage"] == 3


def test_rank4_collectives_and_groups():
    trace = read(RANK4)
    rank = trace.ranks[4]
    dp = next(n for n in rank.nodes if n.name == "dp_allreduce")
    # a one-member DP group (dp = 1): kept as compute with its measured time, saying what it was
    assert (dp.kind, dp.coll, dp.group, dp.duration_ns) == (NodeKind.COMPUTE, None, None, 11_050_000)
    assert (dp.args["one_rank_collective"], dp.args["bytes"]) == ("ALL_REDUCE", 1_573_350_400 * 4)
    dp_group = next(g for g in trace.groups.values() if g.label == dp.args["group"])
    assert dp_group.kind == "dp" and dp_group.members == (4,)
    subs = [n for n in rank.nodes if n.parent is not None]
    assert len(subs) == 40
    assert all(trace.groups[n.group].members == (4, 5) and trace.groups[n.group].kind == "tp" for n in subs)
    assert all(n.size == 4096 * 5120 * 4 and n.coll == CollType.ALL_REDUCE for n in subs)


def test_rank4_end_time_reading_leaves_small_gaps():
    rank = read(RANK4).ranks[4]
    ops = top_level(rank)
    gaps = [b.start_ns - end(a) for a, b in zip(ops, ops[1:])]
    assert min(gaps) == pytest.approx(0.06 * MS, abs=1) and max(gaps) == pytest.approx(0.82 * MS, abs=1)
    assert all(0 < g < MS for g in gaps)


def test_rank4_sub_operations_nest_inside_their_step():
    trace = read(RANK4)
    rank = trace.ranks[4]
    by_id = {n.id: n for n in rank.nodes}
    subs = [n for n in rank.nodes if n.parent is not None]
    parents = Counter(by_id[n.parent].name for n in subs)
    assert parents == {"forward_step mb0": 20, "backward_step mb0": 20}
    for sub in subs:
        parent = by_id[sub.parent]
        assert parent.start_ns <= sub.start_ns and end(sub) <= end(parent)
    assert trace.metadata["subop_timestamps"] == {"megatron_rank4_pp_tp2.log": "end"}
    assert any("read as end times in megatron_rank4_pp_tp2.log" in a for a in trace.assumptions)


def test_rank4_dependencies_follow_program_order():
    rank = read(RANK4).ranks[4]
    ops = top_level(rank)
    assert ops[0].deps == []
    for previous, node in zip(ops, ops[1:]):
        assert node.deps == [previous.id]
    forward = ops[1]
    subs = [n for n in rank.nodes if n.parent == forward.id]
    assert subs[0].deps == forward.deps  # starts with its step
    assert [s.deps for s in subs[1:]] == [[s.id] for s in subs[:-1]]


def test_rank4_receive_waits_are_estimated_without_the_sender():
    trace = read(RANK4)
    recv = next(n for n in trace.ranks[4].nodes if n.name == "recv_forward mb0")
    assert recv.args["wait_ns"] == 420_450_000 - 560_000  # minus the fastest same-size send
    assert recv.args["wait_basis"].startswith("estimate")
    assert trace.metadata["absent_peers"] == [2, 6]
    assert any("ranks 2, 6" in a for a in trace.assumptions)


def test_layout_options_override_inference():
    trace = read(RANK4, tp=2, dp=1, pp=8)
    assert (trace.parallel.pp, trace.parallel.world) == (8, 16)
    assert not any(a.startswith("layout") for a in trace.assumptions)
    with pytest.raises(InputError) as caught:
        read(RANK4, tp=2, dp=2)
    assert str(caught.value) == (
        f"{RANK4}:1: rank 4 logs stage_id 2, which no layout with --tp 2 --dp 2 allows "
        "(Megatron order: stage = rank // (tp*dp))"
    )


def test_layout_with_only_dp_given():
    trace = read(RANK4, dp=2)
    assert (trace.parallel.tp, trace.parallel.dp, trace.parallel.pp) == (1, 2, 4)


def test_huge_rank_numbers_are_refused_quickly(tmp_path):
    line = (RANK4.read_text().splitlines()[2]).replace("rank:4:", "rank:99999999999:")
    path = tmp_path / "big.log"
    path.write_text(line + "\n")
    with pytest.raises(InputError) as caught:
        read(path)
    assert str(caught.value) == f"{path}:1: rank 99999999999 / stage_id 2 is beyond the 1048576 ranks et-convert handles"


# ---------------------------------------------------------------- scaling mode

def test_moe_scaling_sample():
    diagnostics = Diagnostics()
    trace = read(MOE, diagnostics)
    rank = trace.ranks[2]
    assert len(rank.nodes) == 6 + 20
    assert trace.metadata["scaling_mode"] is True
    assert "meaningless" in trace.metadata["cross_rank_timing"]
    assert trace.timing == "measured" and min(n.start_ns for n in rank.nodes) == 0
    assert [m for m in diagnostics.messages() if "scaling-mode" in m] == [
        f"{MOE}:1: scaling-mode log (description=simulation): ranks ran one after another, so communication "
        "times are not measurements and ranks' timestamps are not on one timeline; to re-time it with the "
        "scheduler (--retime), give the logs of every rank (missing ranks 0, 1)"
    ]
    colls = Counter((n.coll, trace.group_kind(n.group)) for n in rank.nodes if n.kind == NodeKind.COLLECTIVE)
    assert colls == {
        (CollType.ALL_GATHER, "ep"): 4, (CollType.ALL_TO_ALL, "ep"): 16,
        (CollType.ALL_REDUCE, "dp"): 1,
    }
    # the expert-data-parallel group has one member here: its all-reduce is kept as compute
    (kept,) = [n for n in rank.nodes if n.args.get("one_rank_collective")]
    assert kept.kind == NodeKind.COMPUTE and kept.args["group"].startswith("dp_ep#")


def test_scaling_retime_hands_timing_to_the_scheduler(tmp_path):
    write_run(tmp_path, stages=2, tp=2, microbatches=2, scaling=True)
    trace = read(tmp_path, retime=True)
    assert trace.timing == "none"
    assert all(n.start_ns is None for r in trace.ranks.values() for n in r.nodes)
    assert any("--retime" in a for a in trace.assumptions)
    with pytest.raises(InputError) as caught:
        read(MOE, retime=True)
    assert "missing ranks 0, 1" in str(caught.value)


def test_complete_scaling_set_suggests_retime(tmp_path):
    write_run(tmp_path, stages=2, tp=2, microbatches=2, scaling=True)
    diagnostics = Diagnostics()
    read(tmp_path, diagnostics)
    assert [m for m in diagnostics.messages() if "scaling-mode" in m] == [
        f"{tmp_path / 'rank0.log'}:1: scaling-mode log (description=simulation): ranks ran one after another, so "
        "communication times are not measurements and ranks' timestamps are not on one timeline; use --retime to "
        "re-time it with the scheduler"
    ]


def test_scaling_mode_ranks_each_start_at_zero(tmp_path):
    lines = run_lines(stages=2, tp=1, microbatches=2, scaling=True)
    write_run(tmp_path, stages=2, tp=1, microbatches=2, scaling=True)
    trace = read(tmp_path)
    first_start = {r: _log_start_ns(ls[0]) for r, ls in lines.items()}
    last_end = {r: _log_end_ns(ls[-1]) for r, ls in lines.items()}
    assert first_start[1] > last_end[0]  # the helper ran rank 1 after rank 0: one shared origin would show that
    assert trace.metadata["rank_time_origins_ns"] == {"0": first_start[0], "1": first_start[1]}
    for r, rank in trace.ranks.items():
        assert min(n.start_ns for n in rank.nodes) == 0
        assert max(end(n) for n in rank.nodes) == last_end[r] - first_start[r]
    assert "wait_ns" not in str([n.args for r in trace.ranks.values() for n in r.nodes])


def _log_field_ns(line: str, key: str) -> int:
    value = line.split(f",{key}=", 1)[1].split(",", 1)[0]
    return round(float(value) * MS)


def _log_start_ns(line: str) -> int:
    return _log_field_ns(line, "timestamp") - _log_field_ns(line, "duration")


def _log_end_ns(line: str) -> int:
    return _log_field_ns(line, "timestamp")


# ---------------------------------------------------------------- the synthetic 1F1B run

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    directory = tmp_path_factory.mktemp("synth")
    write_run(directory, stages=4, tp=2, microbatches=4)
    return read(directory)


def test_synthetic_run_layout_and_counts(synthetic):
    p = synthetic.parallel
    assert (p.world, p.tp, p.dp, p.pp, p.microbatches) == (8, 2, 1, 4, 4)
    assert sorted(synthetic.ranks) == list(range(8))
    for rank in synthetic.sorted_ranks():
        stage = rank.stage
        ops = Counter(n.args["op"] for n in top_level(rank))
        assert ops["forward_step"] == ops["backward_step"] == 4
        assert ops["send_forward"] == ops["recv_backward"] == (4 if stage < 3 else 0)
        assert ops["recv_forward"] == ops["send_backward"] == (4 if stage > 0 else 0)
        assert ops["get_batch"] == (4 if stage in (0, 3) else 0)
        assert ops["ep_allreduce"] == (1 if stage in (0, 3) else 0)
        assert len([n for n in rank.nodes if n.parent is not None]) == 8 * 4  # 2 layers x 2 all-reduces


def test_synthetic_every_send_has_exactly_one_receive(synthetic):
    sends, recvs = Counter(), Counter()
    for rank in synthetic.sorted_ranks():
        for n in rank.nodes:
            if n.kind == NodeKind.SEND:
                sends[(rank.rank, rank.peer_of(n), n.tag, n.size)] += 1
            elif n.kind == NodeKind.RECV:
                recvs[(rank.peer_of(n), rank.rank, n.tag, n.size)] += 1
    assert sends == recvs
    assert len(sends) == 2 * 3 * 4 * 2  # tp columns x stage boundaries x microbatches x directions
    assert set(sends.values()) == {1}
    assert "absent_peers" not in synthetic.metadata


def test_synthetic_collective_sequences_match_across_members(synthetic):
    sequences = defaultdict(dict)
    for rank in synthetic.sorted_ranks():
        for n in rank.nodes:
            if n.kind == NodeKind.COLLECTIVE:
                sequences[rank.group_of(n)].setdefault(rank.rank, []).append((n.coll, n.size))
    kinds = Counter(synthetic.groups[g].kind for g in sequences)
    assert kinds == {"tp": 4, "embedding": 2}  # dp = 1: the gradient all-reduces are compute (issue 17)
    assert all(n.kind == NodeKind.COMPUTE for r in synthetic.sorted_ranks() for n in r.nodes if n.name == "dp_allreduce")
    for gid, by_member in sequences.items():
        group = synthetic.groups[gid]
        assert sorted(by_member) == list(group.members)
        assert len({tuple(seq) for seq in by_member.values()}) == 1, group.label
    embedding = [g for g in synthetic.groups.values() if g.kind == "embedding"]
    assert sorted(g.members for g in embedding) == [(0, 6), (1, 7)]


def test_synthetic_fused_exchanges_are_sibling_send_and_recv(synthetic):
    rank = synthetic.ranks[2]  # stage 1: fused exchanges both ways
    ops = top_level(rank)
    fused = [n for n in ops if "fused" in n.args]
    assert Counter(n.args["fused"] for n in fused) == {
        "send_forward_recv_backward": 2 * 2, "send_backward_recv_forward": 2 * 1,
    }
    for a, b in zip(fused[::2], fused[1::2]):
        assert {a.kind, b.kind} == {NodeKind.SEND, NodeKind.RECV}
        assert a.deps == b.deps and a.id not in b.deps and b.id not in a.deps
        assert (a.start_ns, a.duration_ns) == (b.start_ns, b.duration_ns)
        after = ops[ops.index(b) + 1]
        assert sorted(after.deps) == sorted([a.id, b.id])


def test_synthetic_receive_waits_use_the_matching_send(synthetic):
    recv = next(n for n in synthetic.ranks[6].nodes if n.name == "recv_forward mb0")
    send = next(n for n in synthetic.ranks[4].nodes if n.name == "send_forward mb0")
    assert recv.args["wait_ns"] == send.start_ns - recv.start_ns > 30 * MS
    assert recv.args["wait_basis"] == "start of the matching send"


def test_one_concatenated_file_gives_the_same_model(tmp_path, synthetic):
    [path] = write_run(tmp_path, stages=4, tp=2, microbatches=4, one_file=True)
    trace = read(path)
    assert sorted(trace.ranks) == sorted(synthetic.ranks)
    for r, rank in trace.ranks.items():
        other = synthetic.ranks[r]
        assert [(n.name, n.kind, n.start_ns, n.duration_ns, n.peer, n.tag, n.size, n.deps) for n in rank.nodes] == [
            (n.name, n.kind, n.start_ns, n.duration_ns, n.peer, n.tag, n.size, n.deps) for n in other.nodes
        ]


def test_sub_operation_start_stamps_are_detected(tmp_path):
    write_run(tmp_path / "end", stages=2, tp=2, microbatches=2, subop_stamp="end")
    write_run(tmp_path / "start", stages=2, tp=2, microbatches=2, subop_stamp="start")
    a, b = read(tmp_path / "end"), read(tmp_path / "start")
    assert set(a.metadata["subop_timestamps"].values()) == {"end"}
    assert set(b.metadata["subop_timestamps"].values()) == {"start"}
    times = lambda t: [(n.start_ns, n.duration_ns) for r in t.sorted_ranks() for n in r.nodes]  # noqa: E731
    assert times(a) == times(b)


def test_two_iterations_get_distinct_tags(tmp_path):
    write_run(tmp_path, stages=2, tp=1, microbatches=2, iterations=2)
    trace = read(tmp_path)
    tags = [n.tag for n in trace.ranks[0].nodes if n.kind == NodeKind.SEND]
    assert len(tags) == len(set(tags)) == 4
    assert [n.args["iteration"] for n in top_level(trace.ranks[0]) if n.name == "optimizer_step"] == [0, 1]


def test_dropped_receive_leaves_its_send_unpaired(tmp_path):
    write_run(tmp_path, stages=2, tp=1, microbatches=2, edit=drop_op(1, "recv_forward", 1))
    trace = read(tmp_path)
    recvs = [n.name for n in trace.ranks[1].nodes if n.kind == NodeKind.RECV]
    assert "recv_forward mb1" not in recvs and "recv_forward mb0" in recvs


def test_edits_change_sizes(tmp_path):
    write_run(tmp_path, stages=2, tp=1, microbatches=2, edit=chain(
        replace_in_op(0, "send_forward", 1, "[512, 1, 1024]", "[256, 1, 1024]"), drop_op(1, "optimizer_step"),
    ))
    trace = read(tmp_path)
    sizes = [n.size for n in trace.ranks[0].nodes if n.name.startswith("send_forward")]
    assert sizes == [512 * 1024 * 4, 256 * 1024 * 4]
    assert not any(n.name == "optimizer_step" for n in trace.ranks[1].nodes)


def test_rank_changing_stage_is_an_error(tmp_path):
    lines = run_lines(stages=2, tp=1, microbatches=1)
    path = tmp_path / "r.log"
    bad = lines[1][1].replace("stage_id=1", "stage_id=0")
    path.write_text("\n".join([lines[1][0], bad] + lines[1][2:]) + "\n")
    with pytest.raises(InputError) as caught:
        read(path)
    assert str(caught.value) == f"{path}:2: rank 1 logs stage_id 0 here but stage_id 1 at {path}:1"


def test_rank_in_two_files_is_an_error(tmp_path):
    [path] = write_run(tmp_path / "a", stages=1, tp=1, microbatches=1)
    copy = tmp_path / "b.log"
    copy.write_bytes(path.read_bytes())
    with pytest.raises(InputError) as caught:
        read([path, copy])
    assert str(caught.value) == f"{copy}:1: rank 0 also appears in {path} (line 1); give each rank's log once"


def test_cut_off_last_line_of_one_rank(tmp_path):
    lines = run_lines(stages=2, tp=1, microbatches=1)
    paths = write_run(tmp_path, stages=2, tp=1, microbatches=1, cut_last={1: 50})
    diagnostics = Diagnostics()
    trace = read(tmp_path, diagnostics)
    assert len(top_level(trace.ranks[1])) == len(lines[1]) - 1
    assert diagnostics.messages() == [
        f"{paths[1]}:{len(lines[1])}: last line is cut off; converted the {len(lines[1]) - 1} complete lines before it"
    ]
    with pytest.raises(InputError):
        read(tmp_path, strict=True)


def test_data_parallel_groups_stride_tp(tmp_path):
    write_run(tmp_path, stages=2, tp=2, dp=2, microbatches=2)
    trace = read(tmp_path)
    p = trace.parallel
    assert (p.world, p.tp, p.dp, p.pp) == (8, 2, 2, 2)
    assert trace.ranks[5].coords == {"tp": 1, "dp": 0, "pp": 1, "ep": 0}
    dp_groups = sorted(g.members for g in trace.groups.values() if g.kind == "dp")
    assert dp_groups == [(0, 2), (1, 3), (4, 6), (5, 7)]
    send = next(n for n in trace.ranks[2].nodes if n.kind == NodeKind.SEND)
    assert send.peer == 6  # same (tp, dp) on the next stage


# ---------------------------------------------------------------- layout from some ranks' logs

@pytest.fixture(scope="module")
def tp2_run(tmp_path_factory):
    """A 4-stage TP=2 run of 4 microbatches: rank r of stage r // 2."""
    directory = tmp_path_factory.mktemp("tp2")
    write_run(directory, stages=4, tp=2, microbatches=4)
    return directory


def layout_of(trace):
    p = trace.parallel
    return p.world, p.tp, p.dp, p.pp


def test_lone_first_rank_of_tp_run_gets_tp_from_its_sub_operations(tp2_run):
    diagnostics = Diagnostics()
    trace = read(tp2_run / "rank0.log", diagnostics)
    assert layout_of(trace) == (8, 2, 1, 4)  # pp 4 from 1F1B: 4 forwards before its first backward
    rank = trace.ranks[0]
    sends = {n.peer for n in rank.nodes if n.kind == NodeKind.SEND}
    assert sends == {2}  # the same TP position on stage 1
    tp_groups = {trace.groups[n.group].members for n in rank.nodes if n.parent is not None}
    assert tp_groups == {(0, 1)}
    embedding = {trace.groups[n.group].members for n in rank.nodes if n.name == "ep_allreduce"}
    assert embedding == {(0, 6)}
    assert diagnostics.messages() == [
        f"{tp2_run / 'rank0.log'}: layout guessed as tp=2, dp=1, pp=4: the ranks given only show tp*dp >= 2; "
        "tp 2 read from the TP sub-operations, which tp=1 runs also log; pp 4 read from rank 0's 4 forwards before its first backward (non-interleaved 1F1B warmup); "
        "pp could be more than 4 (no rank of the last stage is given); give --tp/--dp/--pp to state it"
    ]


def test_lone_middle_rank_gets_pp_from_its_warmup(tp2_run):
    diagnostics = Diagnostics()
    trace = read(tp2_run / "rank2.log", diagnostics)
    assert layout_of(trace) == (8, 2, 1, 4)  # 3 forwards before the first backward of 4: pp = 1 + 3
    assert {n.peer for n in trace.ranks[2].nodes if n.kind == NodeKind.SEND} == {0, 4}
    # stage 1 pins tp*dp = 2; the warmup gives pp only under non-interleaved 1F1B, which is said
    assert diagnostics.messages() == [
        f"{tp2_run / 'rank2.log'}: layout guessed as tp=2, dp=1, pp=4: tp 2 read from the TP sub-operations, which "
        "tp=1 runs also log; pp 4 read from rank 2's 3 forwards before "
        "its first backward (non-interleaved 1F1B warmup); give --tp/--dp/--pp to state it"
    ]
    assert [f.code for f in run_checks(trace) if f.code.startswith(("W05", "E05"))] == []


def test_lone_first_rank_passes_the_1f1b_check(tp2_run):
    trace = read(tp2_run / "rank0.log")
    assert [f.code for f in run_checks(trace) if f.code.startswith(("W05", "E05"))] == []


def test_stated_layout_is_not_warned_about(tp2_run):
    diagnostics = Diagnostics()
    trace = read(tp2_run / "rank0.log", diagnostics, tp=2, dp=1, pp=4)
    assert layout_of(trace) == (8, 2, 1, 4)
    assert diagnostics.messages() == []


def test_ambiguous_split_of_tp_and_dp_is_warned_about(tmp_path):
    write_run(tmp_path, stages=2, tp=4, microbatches=2)
    diagnostics = Diagnostics()
    trace = read(tmp_path, diagnostics)
    assert layout_of(trace) == (8, 2, 2, 2)  # the smallest tp the sub-operations allow
    assert diagnostics.messages() == [
        f"{tmp_path / 'rank0.log'}: layout guessed as tp=2, dp=2, pp=2: tp 2 read from the TP sub-operations, which "
        "tp=1 runs also log; tp*dp = 4 could also be tp=4, dp=1; "
        "give --tp/--dp/--pp to state it"
    ]
    assert any(a.startswith("layout tp=2, dp=2, pp=2, ep=1: tp, dp, pp inferred") for a in trace.assumptions)
    stated = Diagnostics()
    trace = read(tmp_path, stated, tp=4)
    assert layout_of(trace) == (8, 4, 1, 2)
    assert {trace.groups[n.group].members for n in trace.ranks[0].nodes if n.parent is not None} == {(0, 1, 2, 3)}
    assert stated.messages() == []


def test_complete_tp2_run_is_warned_that_tp_came_from_its_sub_operations(tp2_run):
    diagnostics = Diagnostics()
    assert layout_of(read(tp2_run, diagnostics)) == (8, 2, 1, 4)
    assert diagnostics.messages() == [
        f"{tp2_run / 'rank0.log'}: layout guessed as tp=2, dp=1, pp=4: tp 2 read from the TP sub-operations, which "
        "tp=1 runs also log; give --tp/--dp/--pp to state it"
    ]


def test_tp1_set_that_logs_tp_sub_operations_is_warned_about_and_read_right_with_tp_1():
    """A TP 1 run logs its TP all-reduces too: read as TP 2 (no log line tells them apart), aloud."""
    diagnostics = Diagnostics()
    guessed = read(SAMPLES / "megatron_tp1_pp2_dp2", diagnostics)
    assert layout_of(guessed) == (4, 2, 1, 2)
    assert diagnostics.messages() == [
        f"{SAMPLES / 'megatron_tp1_pp2_dp2' / 'rank0.log'}: layout guessed as tp=2, dp=1, pp=2: tp 2 read from the TP "
        "sub-operations, which tp=1 runs also log; give --tp/--dp/--pp to state it"
    ]
    stated = Diagnostics()
    trace = read(SAMPLES / "megatron_tp1_pp2_dp2", stated, tp=1)
    assert layout_of(trace) == (4, 1, 2, 2)
    dp = next(n for n in trace.ranks[0].nodes if n.name == "dp_allreduce")
    assert trace.groups[dp.group].members == (0, 1)
    assert not any(m.startswith(f"{SAMPLES / 'megatron_tp1_pp2_dp2' / 'rank0.log'}: layout guessed") for m in stated.messages())


def test_a_complete_run_takes_pp_from_its_last_stage_not_from_a_long_warmup(tmp_path):
    """GPipe-like logs run every forward before the first backward; the last stage still decides pp."""
    write_run(tmp_path, stages=2, tp=1, microbatches=6)
    gpipe = tmp_path / "gpipe"
    gpipe.mkdir()
    for path in sorted(tmp_path.glob("rank*.log")):
        lines = path.read_text().splitlines()
        forwards = [line for line in lines if ":forward_step(" in line or ":send_forward(" in line
                    or ":recv_forward(" in line or ":get_batch(" in line]
        rest = [line for line in lines if line not in forwards]
        (gpipe / path.name).write_text("\n".join(forwards + rest) + "\n")
    diagnostics = Diagnostics()
    trace = read(gpipe, diagnostics)
    assert trace.parallel.pp == 2  # not 6, what 6 forwards before the first backward would say under 1F1B


def test_jitter_makes_every_rank_distinct_and_keeps_the_run_clean(tmp_path):
    plain = read(write_run(tmp_path / "plain", stages=2, tp=2, dp=2, microbatches=4))
    shaken = read(write_run(tmp_path / "jitter", stages=2, tp=2, dp=2, microbatches=4, jitter=5))

    def subs(rank):
        return [(n.start_ns, n.duration_ns, n.start_ns + n.duration_ns) for n in rank.nodes if n.parent is not None]

    # ranks 0-3 run stage 0: the same sub-operations without jitter, all different with it
    assert subs(plain.ranks[0]) == subs(plain.ranks[1]) == subs(plain.ranks[2])
    assert len({tuple(subs(rank)) for rank in shaken.sorted_ranks()}) == 8
    for before, after in zip(plain.sorted_ranks(), shaken.sorted_ranks()):
        old, new = subs(before), subs(after)
        assert [end for *_, end in new] == [end for *_, end in old]  # each ends as it did
        assert all(0 <= s1 - s0 <= 50_000 for (s0, *_), (s1, *_) in zip(old, new))  # up to 5 ticks of 0.01 ms later
        assert any(s1 != s0 for (s0, *_), (s1, *_) in zip(old, new))
    findings = run_checks(shaken)
    assert [f for f in findings if f.severity in ("error", "warning")] == []
