"""SimAI/AICB workloads: per-stage graphs (default) and SimAI's own reading (--mode simai)."""

from __future__ import annotations

import pytest

from conftest import SAMPLES
from converters.builders.pipeline import gpipe, one_f_one_b
from converters.model import CollType, NodeKind
from test_workload import check_model, check_pairing, load, small_simai

SAMPLE = SAMPLES / "simai_tp8_pp16_1024gpu.txt"
TP_GROUP_100 = tuple(range(96, 104))
DP_GROUP_100 = tuple(range(68, 125, 8))
PP_GROUP_100 = tuple(range(36, 1024, 64))


@pytest.fixture(scope="module")
def sample():
    return load("simai", SAMPLE)


def members_used(trace, rank, kind):
    """Members of the groups of `kind` that `rank`'s collectives run in."""
    r = trace.ranks[rank]
    found = {trace.groups[r.group_of(n)].members for n in r.nodes
             if n.kind == NodeKind.COLLECTIVE and trace.groups[r.group_of(n)].kind == kind}
    return found


def test_rank_100_sits_where_megatron_puts_it(sample):
    trace, _ = sample
    assert len(trace.ranks) == 1024
    assert trace.ranks[100].coords == {"tp": 4, "dp": 4, "pp": 1}
    assert members_used(trace, 100, "tp") == {TP_GROUP_100}
    assert members_used(trace, 100, "dp") == {DP_GROUP_100}
    assert members_used(trace, 100, "embedding") == set()  # stage 1 holds no embedding
    assert members_used(trace, 36, "embedding") == {(36, 996)}
    pp_groups = [g.members for g in trace.groups.values() if g.kind == "pp" and 100 in g.members]
    assert pp_groups == [PP_GROUP_100]
    p = trace.parallel
    assert (p.world, p.tp, p.dp, p.pp, p.ep, p.microbatches) == (1024, 8, 8, 16, 1, 16)


def test_ranks_of_a_stage_share_one_node_list_with_their_own_groups_and_peers(sample):
    trace, _ = sample
    rep, r100 = trace.ranks[64], trace.ranks[100]
    assert r100.nodes is rep.nodes and rep.group_map is None
    assert trace.ranks[36].nodes is not rep.nodes
    recv = next(n for n in r100.nodes if n.kind == NodeKind.RECV)
    assert (rep.peer_of(recv), r100.peer_of(recv)) == (0, 36)
    send = next(n for n in r100.nodes if n.kind == NodeKind.SEND)
    assert (rep.peer_of(send), r100.peer_of(send)) == (128, 164)


def test_node_counts_per_stage(sample):
    # Per microbatch, a stage's 8 layers (32 rows) give 64 forward nodes (compute + TP collective)
    # and 80 backward nodes (ig compute, wg compute, and the ig ALLGATHER of the 16 *_row rows;
    # the *_column ig REDUCESCATTERs have size 0). Stage 0 adds the embedding (fwd compute,
    # ALLREDUCE, wg compute) and 2 p2p; the last stage final_column (4 nodes) and 2 p2p; middle
    # stages 4 p2p. Once per iteration: RS, 4 optimizer ALLREDUCEs, optimizer compute, AG (7),
    # + embedding_grads on the first and last stage, + 3 cross_entropy on the last.
    trace, _ = sample
    expected = {0: 16 * (144 + 3 + 2) + 8, 15: 16 * (144 + 4 + 2) + 11}
    for stage in range(16):
        for rank in (stage * 64, stage * 64 + 63):
            assert len(trace.ranks[rank].nodes) == expected.get(stage, 16 * (144 + 4) + 7), (stage, rank)


def steps(nodes):
    """The stage's order of forward/backward microbatches, read from its compute nodes."""
    order = []
    for n in nodes:
        if n.kind == NodeKind.COMPUTE and n.microbatch is not None:
            step = ("F" if n.name.endswith(" fwd") else "B", n.microbatch)
            if not order or order[-1] != step:
                order.append(step)
    return order


@pytest.mark.parametrize("stage", [0, 1, 7, 15])
def test_microbatches_run_in_1f1b_order(sample, stage):
    trace, _ = sample
    assert steps(trace.ranks[stage * 64].nodes) == one_f_one_b(16, stage, 16)


def test_gpipe_schedule_on_request(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=4, gpus=8, ga=4))
    trace, _ = load("simai", path, schedule="gpipe")
    assert steps(trace.ranks[2].nodes) == gpipe(4, 1, 4)
    assert "GPIPE order" in " ".join(trace.assumptions)


def test_fused_exchange_is_a_sibling_send_and_recv(sample):
    trace, _ = sample
    nodes = trace.ranks[64].nodes  # stage 1: steady state has send_forward + recv_backward
    i = next(i for i, n in enumerate(nodes) if n.name == "send_forward mb14")
    send, recv, after = nodes[i], nodes[i + 1], nodes[i + 2]
    assert (send.kind, recv.kind, recv.name) == (NodeKind.SEND, NodeKind.RECV, "recv_backward mb0")
    assert send.deps == recv.deps and send.id not in recv.deps
    assert {send.id, recv.id} <= set(after.deps)


def test_send_recv_pairs_and_sizes(sample):
    trace, _ = sample
    assert check_pairing(trace) == 64 * 15 * 16 * 2
    p2p = [n for n in trace.ranks[100].nodes if n.kind in (NodeKind.SEND, NodeKind.RECV)]
    assert {n.size for n in p2p} == {134217728 // 8}
    assert len({(n.kind, n.tag) for n in p2p}) == len(p2p) == 64
    assert any("16777216 bytes per microbatch" in a and "sequence parallelism" in a for a in trace.assumptions)


def test_all_gather_sizes_are_divided_by_the_group_size(sample):
    trace, _ = sample
    nodes = trace.ranks[100].nodes
    sizes = {(n.name, n.coll, n.size) for n in nodes if n.kind == NodeKind.COLLECTIVE}
    assert ("attention_column fwd ALLGATHER", CollType.ALL_GATHER, 134217728 // 8) in sizes
    assert ("attention_row fwd REDUCESCATTER", CollType.REDUCE_SCATTER, 134217728) in sizes
    assert ("grad_gather wg ALLGATHER", CollType.ALL_GATHER, 6401032192 // 8) in sizes
    assert ("grad_param_comm wg REDUCESCATTER", CollType.REDUCE_SCATTER, 12802064384) in sizes
    assert "divided by the group size" in trace.units["all_gather_size"]


def test_iteration_ends_with_the_finalize_rows_in_megatron_order(sample):
    trace, _ = sample
    tail = [n.name for n in trace.ranks[1023].nodes[-11:]]
    assert tail == [
        "cross_entropy1 fwd ALLREDUCE", "cross_entropy2 fwd ALLREDUCE", "cross_entropy3 fwd ALLREDUCE",
        "embedding_grads ig ALLREDUCE", "grad_param_comm wg REDUCESCATTER",
        "optimizer1 fwd ALLREDUCE", "optimizer2 fwd ALLREDUCE", "optimizer3 fwd ALLREDUCE",
        "optimizer4 fwd ALLREDUCE", "grad_param_compute ig", "grad_gather wg ALLGATHER",
    ]
    first_finalize = trace.ranks[1023].nodes[-11]
    last_backward = max(n.id for n in trace.ranks[1023].nodes if n.microbatch is not None)
    assert last_backward in first_finalize.deps


def test_known_generator_defects_are_warned_once_each(sample):
    _, diagnostics = sample
    name = str(SAMPLE)
    assert diagnostics.messages() == [
        f"{name}: skipped 274 collectives of size 0 (1 ALLGATHER_DP_EP in the wg column of moe_grad_norm1; "
        "1 REDUCESCATTER_DP_EP in the wg column of moe_grad_norm2; 272 REDUCESCATTER in the ig column of "
        "attention_column, mlp_column, final_column; first at line 7)",
        f"{name}: 33 compute times are the placeholder 1 ns (not measured); left them out (first at line 3)",
        f"{name}: 15 microbatch blocks give embedding_layer another wg_compute than the first block "
        f"(2864860 vs 1879040 at line 9); used each block's own value (first at line 43)",
        f"{name}: assumed: ALL_GATHER sizes are the per-rank input, as ASTRA-sim reads them: the input's total "
        "gathered bytes divided by the group size.",
        f"{name}:1: assumed: Activations and gradients between stages are 16777216 bytes per microbatch: the "
        "block's TP collectives move the whole activation (2*mbs*seq*hidden = 134217728 bytes), and under "
        "sequence parallelism (ALLGATHER/REDUCESCATTER in the forward) each rank holds 1/8 of it.",
    ]


def test_every_choice_is_in_the_metadata(sample):
    trace, _ = sample
    text = " ".join(trace.assumptions)
    for phrase in ("embedding_layer only on stage 0", "size 0 are left out", "placeholder", "1F1B",
                   "No activation recompute", "ALL_GATHER sizes are the per-rank input", "embedding group"):
        assert phrase in text, phrase
    assert trace.units["compute"].startswith("ns")
    assert trace.metadata["pipeline.p2p_bytes"] == 16777216


def test_small_pipelines_run_to_the_end(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=3, gpus=12, ga=5))
    trace, _ = load("simai", path)
    check_model(trace)
    assert len(trace.ranks) == 12 and trace.parallel.dp == 2


def test_pp_comm_from_the_header_and_p2p_bytes_option(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=2, gpus=4, ga=2, extra=" pp_comm: 8388608.0"))
    trace, _ = load("simai", path)
    assert {n.size for n in trace.ranks[0].nodes if n.kind == NodeKind.SEND} == {8388608}
    trace, _ = load("simai", path, p2p_bytes=1000)
    assert {n.size for n in trace.ranks[0].nodes if n.kind == NodeKind.SEND} == {1000}


def test_expert_parallel_rows_use_ep_and_dp_ep_groups(tmp_path):
    rows = "\n".join([
        "grad_param_comm\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER_DP_EP\t4096\t100",
        "embedding_layer\t-1\t100\tALLREDUCE\t4096\t1\tNONE\t0\t100\tNONE\t0\t100",
        "moe_route\t-1\t100\tALLTOALL_EP\t8192\t100\tALLTOALL_EP\t8192\t100\tNONE\t0\t100",
        "final_column\t-1\t100\tALLGATHER\t4096\t100\tNONE\t0\t100\tNONE\t0\t100",
        "optimizer1\t-1\t0\tALLREDUCE\t4\t0\tNONE\t0\t0\tNONE\t0\t100",
    ])
    path = tmp_path / "moe.txt"
    path.write_text(small_simai(tp=2, pp=1, gpus=8, ga=1, rows=rows).replace("ep: 1", "ep: 2"))
    trace, _ = load("simai", path)
    check_model(trace)
    # rank 5 = (tp 1, dp 2): EP carved out of DP -> ep 0, dpe 1
    assert members_used(trace, 5, "ep") == {(5, 7)}
    assert members_used(trace, 5, "dp_ep") == {(1, 5)}
    assert trace.ranks[5].coords == {"tp": 1, "dp": 2, "pp": 0, "ep": 0}


def test_simai_mode_reads_the_file_as_simai_does(tmp_path):
    trace, diagnostics = load("simai", SAMPLE, mode="simai")
    nodes = trace.ranks[0].nodes
    assert all(r.nodes is nodes for r in trace.ranks.values())
    assert not any(n.kind in (NodeKind.SEND, NodeKind.RECV) for n in nodes)
    assert members_used(trace, 100, "dp") == {tuple(range(4, 1024, 8))}  # DP of all_gpus/TP = 128
    assert members_used(trace, 100, "tp") == {TP_GROUP_100}
    assert {n.size for n in nodes if n.name.startswith("optimizer")} == {4096}  # SimAI raises them
    assert len(nodes) == 2427
    assert any("--mode simai reproduces SimAI's reading" in m and "pp 16 ignored" in m for m in diagnostics.messages())
    assert (trace.parallel.pp, trace.parallel.dp) == (1, 128)
    small = tmp_path / "w.txt"
    small.write_text(small_simai(tp=2, pp=2, gpus=8, ga=2))
    check_model(load("simai", small, mode="simai")[0])


def test_building_the_sample_is_fast():
    import time

    start = time.perf_counter()
    load("simai", SAMPLE)
    assert time.perf_counter() - start < 3.0  # ~0.3 s on one core; generous for a shared machine


def test_chakra_set_of_a_pipeline_is_read_back_by_mlc_chakra(tmp_path):
    """The whole 1024-rank sample goes through the CLI in test_e2e_samples; here a small
    pipeline is read back completely: ASTRA-sim's rules, pairing and group sequences."""
    from collections import Counter

    from chakra_ref import check_astra_rules, collective_sequence, p2p_keys, read_groups, read_rank
    from converters.api import write

    source = tmp_path / "w.txt"
    source.write_text(small_simai(tp=2, pp=4, gpus=16, ga=4))
    trace, _ = load("simai", source)
    write(trace, tmp_path / "w", to="chakra")
    groups = read_groups(tmp_path / "w")
    ranks = {r: read_rank(tmp_path / f"w.{r}.et") for r in range(16)}
    for r, rank in ranks.items():
        check_astra_rules(r, rank, groups)
        assert len(rank.nodes) == len(trace.ranks[r].nodes)
    sends = Counter(k for rank in ranks.values() for k in p2p_keys(rank, 5))
    recvs = Counter(k for rank in ranks.values() for k in p2p_keys(rank, 6))
    assert sends == recvs and sum(sends.values()) == 4 * 3 * 4 * 2  # columns x boundaries x mb x directions
    for pg, members in groups.items():
        sequences = [collective_sequence(ranks[m], pg) for m in members]
        assert all(seq == sequences[0] for seq in sequences), pg
    tp_of_5 = next(pg for pg, members in groups.items() if members == [4, 5])
    assert (2, 65536 // 2) in collective_sequence(ranks[5], tp_of_5)  # ALL_GATHER per-rank input


def test_vpp_and_a_zero_pp_comm_are_warned_not_guessed(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=2, gpus=8, ga=2, extra=" vpp: 2 pp_comm: 0"))
    trace, diagnostics = load("simai", path)
    assert diagnostics.messages() == [
        f"{path}: skipped 6 collectives of size 0 (6 REDUCESCATTER in the ig column of attention_column, "
        "final_column; first at line 8)",
        f"{path}: 13 compute times are the placeholder 1 ns (not measured); left them out (first at line 3)",
        f"{path}:1: vpp 2: interleaved 1F1B is not modelled; each stage runs its block once per microbatch in "
        "non-interleaved 1F1B order",
        f"{path}: assumed: ALL_GATHER sizes are the per-rank input, as ASTRA-sim reads them: the input's total "
        "gathered bytes divided by the group size.",
        f"{path}:1: pp_comm is 0; derived the activation size instead",
        f"{path}:1: assumed: Activations and gradients between stages are 32768 bytes per microbatch: the "
        "block's TP collectives move the whole activation (2*mbs*seq*hidden = 65536 bytes), and under sequence "
        "parallelism (ALLGATHER/REDUCESCATTER in the forward) each rank holds 1/2 of it.",
    ]
    assert {n.size for n in trace.ranks[0].nodes if n.kind == NodeKind.SEND} == {65536 // 2}
    assert trace.parallel.vpp == 2
    assert "vpp 2 (interleaved 1F1B) is not modelled: non-interleaved 1F1B with one model chunk per stage." \
        in trace.assumptions
    assert steps(trace.ranks[0].nodes) == one_f_one_b(2, 0, 2)  # one chunk per stage, not two


def validation_errors(trace):
    from converters.api import validate

    return [f.text() for f in validate(trace) if f.severity == "error"]


def recomputed_lines(nodes):
    """(microbatch, source line) of each recomputed row, in program order, once per row."""
    found = [(n.microbatch, int(n.source.rsplit(":", 1)[1])) for n in nodes if " recompute" in n.name]
    return list(dict.fromkeys(found))


def test_recompute_indices_name_the_same_layer_rows_on_every_stage(tmp_path):
    # Block lines (small_simai, 2 layers): 7 embedding_layer, 8-11 layer rows 0-3, 12 final_column;
    # the second microbatch's block is lines 13-18. Initiator 3 with checkpoint 0: before layer row
    # 3's input gradient, layer rows 0..2 run their forward again, on the first and the last stage.
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=2, gpus=4, ga=2, recompute="checkpoints: 1 0 checkpoint_initiates: 1 3"))
    trace, _ = load("simai", path)
    for rank in (0, 1, 2, 3):
        nodes = trace.ranks[rank].nodes
        assert recomputed_lines(nodes) == [(0, 8), (0, 9), (0, 10), (1, 14), (1, 15), (1, 16)], rank
        recompute = [n for n in nodes if " recompute" in n.name]
        assert [n.name for n in recompute if n.kind == NodeKind.COLLECTIVE] == [
            "attention_column recompute ALLGATHER", "attention_row recompute REDUCESCATTER",
            "attention_column recompute ALLGATHER"] * 2
        # the first microbatch's 3 recomputed rows (compute + collective each), then row 3's backward
        after = nodes[recompute[5].id + 1]
        assert (after.name, after.source) == ("attention_row ig", f"{path}:11")
    check_model(trace)  # the recompute collectives are the same on every member of each TP group
    assert validation_errors(trace) == []
    assert any("before layer row 3's input gradient (attention_row), layer rows 0..2 (attention_column to "
               "attention_column) run their forward again" in a for a in trace.assumptions)


def test_recompute_from_a_later_checkpoint_skips_the_rows_before_it(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=2, gpus=4, ga=1,
                                recompute="checkpoints: 2 0 2 checkpoint_initiates: 2 1 3"))
    trace, _ = load("simai", path)
    # initiator 3 recomputes layer row 2 (line 10); initiator 1 recomputes layer row 0 (line 8)
    assert recomputed_lines(trace.ranks[0].nodes) == [(0, 10), (0, 8)]
    assert recomputed_lines(trace.ranks[2].nodes) == [(0, 10), (0, 8)]


@pytest.mark.parametrize("mode, recompute, message", [
    ("stage", "checkpoints: 1 0 checkpoint_initiates: 1 99",
     "checkpoint row 99 is past the last layer row of the microbatch block (3; layer rows count from 0 without "
     "embedding_layer and final_column)"),
    ("stage", "checkpoints: 1 4 checkpoint_initiates: 1 3",
     "checkpoint row 4 is past the last layer row of the microbatch block (3; layer rows count from 0 without "
     "embedding_layer and final_column)"),
    ("simai", "checkpoints: 1 0 checkpoint_initiates: 1 18", "checkpoint row 18 is past the last row (17)"),
])
def test_recompute_indices_past_the_rows_are_an_error_on_the_header_line(tmp_path, mode, recompute, message):
    from converters.diagnostics import InputError

    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=2, gpus=4, ga=2, recompute=recompute))
    with pytest.raises(InputError) as e:
        load("simai", path, mode=mode)
    assert str(e.value) == f"{path}:1: {message}"


def moe_simai(pp: int, gpus: int) -> str:
    """tp 2, ep 2, ga 2: a MoE block (embedding, an ALLTOALL_EP router, final) and nonzero
    expert-data-parallel prologue rows, in AICB's file order."""
    block = [
        "embedding_layer\t-1\t100\tALLREDUCE\t4096\t1\tNONE\t0\t100\tNONE\t0\t100",
        "moe_route\t-1\t100\tALLTOALL_EP\t8192\t100\tALLTOALL_EP\t8192\t100\tNONE\t0\t100",
        "final_column\t-1\t100\tALLGATHER\t4096\t100\tNONE\t0\t100\tNONE\t0\t100",
    ]
    rows = [
        "grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t1048576\t100",
        "grad_param_comm\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER\t2097152\t100",
        "grad_param_compute\t-1\t1\tNONE\t0\t40000\tNONE\t0\t1\tNONE\t0\t100",
        "embedding_grads\t-1\t1\tNONE\t0\t1\tALLREDUCE\t32768\t1\tNONE\t0\t100",
        "moe_grad_norm1\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER_DP_EP\t4096\t100",
        "moe_grad_norm2\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER_DP_EP\t8192\t100",
        *block, *block,
        "cross_entropy1\t-1\t0\tALLREDUCE\t1024\t0\tNONE\t0\t0\tNONE\t0\t100",
        "optimizer1\t-1\t0\tALLREDUCE\t4\t0\tNONE\t0\t0\tNONE\t0\t100",
    ]
    return small_simai(tp=2, pp=pp, gpus=gpus, ga=2, ep=2, rows="\n".join(rows))


def test_expert_gradients_are_reduced_before_the_optimizer_and_gathered_after(tmp_path):
    path = tmp_path / "moe.txt"
    path.write_text(moe_simai(pp=2, gpus=16))
    trace, _ = load("simai", path)
    tail = [n.name for n in trace.ranks[15].nodes[-8:]]  # last stage
    assert tail == [
        "cross_entropy1 fwd ALLREDUCE", "embedding_grads ig ALLREDUCE", "grad_param_comm wg REDUCESCATTER",
        "moe_grad_norm2 wg REDUCESCATTER_DP_EP", "optimizer1 fwd ALLREDUCE", "grad_param_compute ig",
        "grad_gather wg ALLGATHER", "moe_grad_norm1 wg ALLGATHER_DP_EP",
    ]
    sentence = next(a for a in trace.assumptions if a.startswith("Prologue and epilogue rows"))
    said = [sentence.index(name) for name in ("cross_entropy", "embedding_grads", "grad_param_comm", "moe_grad_norm2",
                                              "optimizer", "grad_param_compute", "grad_gather", "moe_grad_norm1")]
    assert said == sorted(said)  # the metadata names the order the graph runs


def test_expert_parallel_with_a_pipeline(tmp_path):
    path = tmp_path / "moe.txt"
    path.write_text(moe_simai(pp=2, gpus=16))
    trace, _ = load("simai", path)
    check_model(trace)
    assert validation_errors(trace) == []
    # rank 13 = tp 1 + 2 * (dp 2 + 4 * pp 1); dp 2 = ep 0 + 2 * dpe 1
    assert trace.ranks[13].coords == {"tp": 1, "dp": 2, "pp": 1, "ep": 0}
    assert members_used(trace, 13, "tp") == {(12, 13)}
    assert members_used(trace, 13, "ep") == {(13, 15)}
    assert members_used(trace, 13, "dp_ep") == {(9, 13)}
    assert members_used(trace, 13, "dp") == {(9, 11, 13, 15)}
    assert members_used(trace, 13, "embedding") == {(5, 13)}
    for rank in (5, 13):  # both stages run the router: forward and input-gradient, two microbatches
        a2a = [n for n in trace.ranks[rank].nodes if n.coll == CollType.ALL_TO_ALL]
        assert [(n.name, n.size, n.microbatch) for n in a2a] == [
            ("moe_route fwd ALLTOALL_EP", 8192, 0), ("moe_route fwd ALLTOALL_EP", 8192, 1),
            ("moe_route ig ALLTOALL_EP", 8192, 0), ("moe_route ig ALLTOALL_EP", 8192, 1),
        ] if rank == 5 else [
            ("moe_route fwd ALLTOALL_EP", 8192, 0), ("moe_route ig ALLTOALL_EP", 8192, 0),
            ("moe_route fwd ALLTOALL_EP", 8192, 1), ("moe_route ig ALLTOALL_EP", 8192, 1),
        ]
    assert check_pairing(trace) == 8 * 1 * 2 * 2  # columns x boundaries x microbatches x directions
    send = next(n for n in trace.ranks[5].nodes if n.kind == NodeKind.SEND)
    assert trace.ranks[5].peer_of(send) == 13


def test_pp_comm_without_a_colon_is_read(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=2, gpus=4, ga=2, extra=" pp_comm 8192"))
    trace, diagnostics = load("simai", path)
    assert {n.size for n in trace.ranks[0].nodes if n.kind in (NodeKind.SEND, NodeKind.RECV)} == {8192}
    assert "Activations and gradients between stages are 8192 bytes per microbatch (pp_comm in the header)." \
        in trace.assumptions
    assert not any("header key" in m for m in diagnostics.messages())
