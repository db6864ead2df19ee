"""ASTRA-sim 1.0 text workloads: every policy, groups, recompute, and the reference converter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from converters.api import write
from converters.diagnostics import UsageError
from converters.model import CollType, NodeKind
from test_workload import ASTRA_SAMPLES, WORKLOADS, check_model, load


def names(trace, rank=0):
    return [n.name for n in trace.ranks[rank].nodes]


def groups_of(trace, rank, prefix):
    """Members of the group of each collective of `rank` whose name starts with `prefix`."""
    r = trace.ranks[rank]
    return {trace.groups[r.group_of(n)].members for n in r.nodes
            if n.kind == NodeKind.COLLECTIVE and n.name.startswith(prefix)}


def test_num_npus_is_required():
    with pytest.raises(UsageError, match="ASTRA-sim text workloads carry no rank count: give --num-npus N"):
        load("astra-text", WORKLOADS / "astra_data.txt")


def test_data_runs_weight_gradients_over_everyone_and_next_pass_waits_for_them():
    trace, _ = load("astra-text", WORKLOADS / "astra_data.txt", num_npus=4, passes=2)
    assert names(trace)[:8] == ["conv1 fwd", "conv2 fwd", "fc1 fwd", "fc2 fwd", "fc2 wg", "fc2 wg ALLREDUCE",
                                "fc2 ig", "fc1 wg"]
    assert "conv1 ig" not in names(trace)  # row 0 has no input gradient
    assert groups_of(trace, 2, "conv") == {(0, 1, 2, 3)}
    nodes = trace.ranks[0].nodes
    second_conv2 = [n for n in nodes if n.name == "conv2 fwd"][1]
    conv2_comm = next(n for n in nodes if n.name == "conv2 wg ALLREDUCE")
    assert conv2_comm.id in second_conv2.deps
    fc1_wg = next(n for n in nodes if n.name == "fc1 wg")  # fc1's wg comm is NONE: wait for its compute
    assert fc1_wg.id in [n for n in nodes if n.name == "fc1 fwd"][1].deps


def test_hybrid_transformer_splits_tp_blocks_and_dp_stride():
    trace, diagnostics = load("astra-text", WORKLOADS / "astra_transformer.txt", num_npus=8)
    assert groups_of(trace, 5, "attn_col fwd") == {(4, 5, 6, 7)}
    assert groups_of(trace, 5, "attn_col wg") == {(1, 5)}
    sizes = {n.name: n.size for n in trace.ranks[0].nodes if n.kind == NodeKind.COLLECTIVE}
    assert sizes["attn_col fwd ALLGATHER"] == 65536  # ASTRA-sim 1.0 sizes are already the per-rank input
    assert sizes["attn_row fwd REDUCESCATTER"] == 65536
    assert "attn_col ig REDUCESCATTER" not in sizes  # no ig collective for row 0
    assert not any("row 0" in m for m in diagnostics.messages())  # ASTRA-sim's normal reading: an assumption
    assert any("row 0 under HYBRID_TRANSFORMER" in a for a in trace.assumptions)
    nodes = trace.ranks[0].nodes
    ig = next(n for n in nodes if n.name == "mlp_row ig")
    ig_comm = next(n for n in nodes if n.name == "mlp_row ig ALLGATHER")
    wg = next(n for n in nodes if n.name == "mlp_row wg")
    next_ig = next(n for n in nodes if n.name == "mlp_col ig")
    assert wg.deps == [ig.id]  # 1.0: the ig collective overlaps the weight gradient
    assert set(next_ig.deps) == {ig_comm.id, wg.id}


def test_model_data_is_the_reverse_split():
    trace, _ = load("astra-text", WORKLOADS / "astra_hybrid_model_data.txt", num_npus=8)
    assert groups_of(trace, 5, "l1 fwd") == {(1, 5)}  # 2 model-parallel members, stride 4
    assert groups_of(trace, 5, "l1 wg") == {(4, 5, 6, 7)}
    trace, _ = load("astra-text", WORKLOADS / "astra_hybrid_data_model.txt", num_npus=8)
    assert groups_of(trace, 5, "l1 fwd") == {(4, 5)}
    assert groups_of(trace, 5, "l1 wg") == {(1, 3, 5, 7)}


def test_model_group_size_comes_from_the_header_or_tp(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text((WORKLOADS / "astra_hybrid_data_model.txt").read_text().replace(" model_parallel_NPU_group: 2", ""))
    with pytest.raises(Exception, match=r"w.txt:1: HYBRID_DATA_MODEL needs the model-parallel group size: "
                                        r"the header has no 'model_parallel_NPU_group: T'; give --tp T"):
        load("astra-text", path, num_npus=8)
    trace, _ = load("astra-text", path, num_npus=8, tp=4)
    assert groups_of(trace, 5, "l1 fwd") == {(4, 5, 6, 7)}
    assert "Model-parallel group size 4 (--tp)." in trace.assumptions


def test_fwd_in_bckwd_recomputes_from_the_nearest_checkpoint():
    trace, _ = load("astra-text", WORKLOADS / "astra_transformer_recompute.txt", num_npus=8)
    order = [n for n in names(trace) if "recompute" in n or n.endswith(" ig")]
    # checkpoints 0, 2; initiators 1, 3: row 3 recomputes row 2, row 1 recomputes row 0
    assert order == ["mlp_col recompute", "mlp_col recompute ALLGATHER", "mlp_row ig", "mlp_col ig",
                     "attn_col recompute", "attn_col recompute ALLGATHER", "attn_row ig", "attn_col ig"]
    assert any("before row 3's input gradient, rows 2..2" in a for a in trace.assumptions)


def test_micro_repeats_row_0_weight_gradient_collective_per_pass():
    trace, _ = load("astra-text", WORKLOADS / "astra_micro.txt", num_npus=4, passes=3)
    nodes = trace.ranks[1].nodes
    assert [(n.kind, n.coll, n.size, n.deps) for n in nodes] == [(NodeKind.COLLECTIVE, CollType.ALL_REDUCE, 1048576, [])] * 3


def test_dlrm_top_mlp_waits_for_the_embedding_all_to_all():
    trace, _ = load("astra-text", WORKLOADS / "astra_dlrm.txt", num_npus=8)
    nodes = {n.name: n for n in trace.ranks[0].nodes}
    assert nodes["embedding fwd ALLTOALL"].id in nodes["top1 fwd"].deps
    assert nodes["embedding fwd ALLTOALL"].id not in nodes["bottom1 fwd"].deps
    assert nodes["embedding ig ALLTOALL"].deps == [nodes["top1 ig"].id]
    assert nodes["embedding ig ALLTOALL"].id in nodes["embedding wg"].deps
    assert groups_of(trace, 3, "embedding") == {tuple(range(8))}


def test_customized_rows_use_their_own_policy():
    trace, _ = load("astra-text", WORKLOADS / "astra_customized.txt", num_npus=8)
    assert groups_of(trace, 5, "emb wg") == {tuple(range(8))}  # DATA row
    assert groups_of(trace, 5, "l1 fwd") == {(4, 5)}  # HYBRID_DATA_MODEL row, T = 2
    assert groups_of(trace, 5, "l1 wg") == {(1, 3, 5, 7)}
    assert groups_of(trace, 5, "l2 fwd") == {tuple(range(8))}  # MODEL row
    assert not any(n.startswith("l2 wg ") for n in names(trace))


def test_distributed_inference_is_forward_only():
    trace, _ = load("astra-text", WORKLOADS / "astra_inference.txt", num_npus=8, passes=2)
    assert names(trace) == ["l0 fwd", "l0 fwd ALLREDUCE", "l1 fwd", "l1 fwd ALLGATHER", "l2 fwd", "l2 fwd ALLREDUCE"] * 2
    assert groups_of(trace, 6, "l1") == {(4, 5, 6, 7)}


def test_tick_ns_scales_compute():
    trace, _ = load("astra-text", WORKLOADS / "astra_data.txt", num_npus=2, tick_ns=2.5)
    assert trace.ranks[0].nodes[0].duration_ns == 2500
    assert "ticks x 2.5 ns" in trace.units["compute"]


@pytest.mark.parametrize("sample", ASTRA_SAMPLES)
def test_every_policy_becomes_a_chakra_set_mlc_chakra_reads(sample, tmp_path):
    from chakra_ref import check_astra_rules, read_groups, read_rank

    trace, _ = load("astra-text", WORKLOADS / sample, num_npus=8, passes=2)
    check_model(trace)
    prefix = tmp_path / "w"
    write(trace, prefix, to="chakra")
    groups = read_groups(prefix)
    for r in range(8):
        rank = read_rank(tmp_path / f"w.{r}.et")
        check_astra_rules(r, rank, groups)
        assert len(rank.nodes) == len(trace.ranks[r].nodes)


def reference_graph(path: Path):
    """(type, comm_type, comm_size, duration, deps by position) per node of a Chakra file,
    with the reference's size-0 ALL_REDUCEs (its reading of NONE) contracted away."""
    from chakra_ref import read_rank

    rank = read_rank(path)
    index, kept, dropped = {}, [], {}
    for node in rank.nodes:
        attrs = rank.attrs(node)
        deps = set()
        for d in node.data_deps:
            deps |= dropped.get(d, {d})
        if node.type == 7 and attrs["comm_size"][1] == 0:
            dropped[node.id] = deps
            continue
        index[node.id] = len(kept)
        kept.append((node.type, attrs.get("comm_type", (None, None))[1], attrs.get("comm_size", (None, None))[1],
                     node.duration_micros, deps))
    return [(t, c, s, d, sorted(index[x] for x in deps)) for t, c, s, d, deps in kept]


@pytest.mark.parametrize("source, nodes", [(WORKLOADS / "astra_data.txt", 28), (WORKLOADS / "astra_model.txt", 28)])
def test_chakra_converter_text_gives_the_same_graphs_minus_its_none_all_reduces(tmp_path, source, nodes):
    ref = tmp_path / "ref"
    subprocess.run([str(Path(sys.executable).parent / "chakra_converter"), "--log-filename", os.devnull, "Text", "--input", str(source),
                    "--output", str(ref), "--num-npus", "4", "--num-passes", "2"], check=True, capture_output=True)
    # chakra_converter copies ticks into duration_micros; --tick-ns 1000 makes ours the same number
    trace, _ = load("astra-text", source, num_npus=4, passes=2, tick_ns=1000)
    ours = tmp_path / "ours"
    write(trace, ours, to="chakra")
    for r in range(4):
        expected = reference_graph(tmp_path / f"ref.{r}.et")
        got = reference_graph(tmp_path / f"ours.{r}.et")
        assert got == expected, f"rank {r}"
    assert len(expected) == nodes  # DATA: the reference has 30, two of them fc1's NONE as size-0 all-reduces


def test_columns_a_policy_does_not_issue_are_warned(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("DATA\n2\n"
                    "a\t-1\t10\tALLREDUCE\t64\t10\tNONE\t0\t10\tALLREDUCE\t64\t0\n"
                    "b\t-1\t10\tALLREDUCE\t64\t10\tALLGATHER\t64\t10\tALLREDUCE\t64\t0\n")
    _, diagnostics = load("astra-text", path, num_npus=2)
    assert diagnostics.messages() == [
        f"{path}: DATA issues no fwd collectives; ignored 2 (first at line 3)",
        f"{path}: DATA issues no ig collectives; ignored 1 (first at line 4)",
    ]
    path.write_text("MICRO\n2\n" + "a\t-1\t0\tNONE\t0\t0\tNONE\t0\t0\tALLREDUCE\t64\t0\n" * 2)
    _, diagnostics = load("astra-text", path, num_npus=2)
    assert diagnostics.messages() == [f"{path}: MICRO runs only row 0's weight-gradient collective; ignored the other 1 rows"]


def test_windows_line_ends_and_a_byte_order_mark_are_read(tmp_path):
    from converters.readers.workload_text import sniff_astra

    data = b"\xef\xbb\xbf" + (WORKLOADS / "astra_data.txt").read_bytes().replace(b"\n", b"\r\n")
    path = tmp_path / "w.txt"
    path.write_bytes(data)
    assert sniff_astra(data, path)
    trace, _ = load("astra-text", path, num_npus=2)
    assert names(trace)[0] == "conv1 fwd"


DLRM_ROWS = (WORKLOADS / "astra_dlrm.txt").read_text().split("\n", 1)[1]


@pytest.mark.parametrize("header", ["HYBRID_DLRM 2", "HYBRID_DLRM_ENHANCED DLRM_LAST_BOTTOM_LAYER: 2"])
def test_dlrm_headers_give_every_rank_the_bottom_and_top_split(tmp_path, header):
    path = tmp_path / "w.txt"
    path.write_text(f"{header}\n{DLRM_ROWS}")
    trace, _ = load("astra-text", path, num_npus=4)
    check_model(trace)
    # Forward: 5 computes and the embedding all-to-all. Backward per row: weight gradient, its
    # all-reduce (rows 1-4), input gradient (not row 0); the embedding's all-to-all after top1's.
    expected = ["embedding fwd", "embedding fwd ALLTOALL", "bottom1 fwd", "bottom2 fwd", "top1 fwd", "top2 fwd",
                "top2 wg", "top2 wg ALLREDUCE", "top2 ig", "top1 wg", "top1 wg ALLREDUCE", "top1 ig",
                "embedding ig ALLTOALL", "bottom2 wg", "bottom2 wg ALLREDUCE", "bottom2 ig",
                "bottom1 wg", "bottom1 wg ALLREDUCE", "bottom1 ig", "embedding wg"]
    for rank in range(4):
        assert names(trace, rank) == expected, rank
    nodes = {n.name: n for n in trace.ranks[0].nodes}
    a2a = nodes["embedding fwd ALLTOALL"].id
    assert a2a in nodes["top1 fwd"].deps  # row 3 = last bottom row 2 + 1 waits for the embedding
    assert a2a not in nodes["bottom2 fwd"].deps
    assert any("rows 1..2 the bottom MLP; row 3 waits for the embedding all-to-all" in a for a in trace.assumptions)


def test_dlrm_bare_number_moves_the_split(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(f"HYBRID_DLRM 1\n{DLRM_ROWS}")
    trace, _ = load("astra-text", path, num_npus=4)
    nodes = {n.name: n for n in trace.ranks[0].nodes}
    a2a = nodes["embedding fwd ALLTOALL"].id
    assert a2a in nodes["bottom2 fwd"].deps and a2a not in nodes["top1 fwd"].deps
    assert nodes["embedding ig ALLTOALL"].deps == [nodes["bottom2 ig"].id]
