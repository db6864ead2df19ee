"""NeuSight tables: ms and element counts, the options that supply the layout, and bad input."""

from __future__ import annotations

import pytest

from conftest import SAMPLES, run_cli
from converters.diagnostics import InputError, UsageError
from converters.model import NodeKind
from converters.readers.neusight import sniff
from test_workload import check_model, check_pairing, load

SAMPLE = SAMPLES / "neusight_gpt2_block.tsv"
HEADER = SAMPLE.read_text().splitlines()[0]


def test_sniff_knows_the_header():
    assert sniff(SAMPLE.read_bytes(), SAMPLE)
    assert not sniff(b"name,forward_compute_time\n", SAMPLE)


def test_one_rank_by_default_with_labelled_assumptions():
    trace, diagnostics = load("neusight", SAMPLE)
    assert list(trace.ranks) == [0]
    nodes = trace.ranks[0].nodes
    assert all(n.kind == NodeKind.COMPUTE for n in nodes)
    # ms -> ns; the 4.79e-9 ms getitems round to 0 ns and add no node
    assert [n.duration_ns for n in nodes if n.name == "addmm fwd"] == [9980884]
    assert not any(n.name.startswith("getitem ") for n in nodes)
    assert f"{SAMPLE}: left out 9 collectives of one-member dp groups (give --dp; first at line 5)" in diagnostics.messages()
    assert any("backward pass has no compute" in m for m in diagnostics.messages())
    assert "All backward and weight-gradient times in the table are 0: the backward pass has no compute, only its " \
           "gradient collectives." in trace.assumptions


def test_element_counts_times_bytes_per_element_in_dp_groups():
    trace, _ = load("neusight", SAMPLE, dp=4)
    sizes = {n.name: n.size for n in trace.ranks[2].nodes if n.kind == NodeKind.COLLECTIVE}
    assert sizes["addmm_grad ig ALLREDUCE_ASYNC"] == 4919040 * 4
    trace, _ = load("neusight", SAMPLE, dp=4, bytes_per_element=2)
    sizes = {n.name: n.size for n in trace.ranks[2].nodes if n.kind == NodeKind.COLLECTIVE}
    assert sizes["addmm_grad ig ALLREDUCE_ASYNC"] == 4919040 * 2
    check_model(trace)
    groups = {trace.groups[trace.ranks[2].group_of(n)].members for n in trace.ranks[2].nodes if n.kind == NodeKind.COLLECTIVE}
    assert groups == {(0, 1, 2, 3)}


def test_async_gradient_all_reduces_do_not_block_the_backward():
    trace, _ = load("neusight", SAMPLE, dp=2)
    nodes = trace.ranks[0].nodes
    comms = [n for n in nodes if n.kind == NodeKind.COLLECTIVE]
    last_forward = max(n.id for n in nodes if n.kind == NodeKind.COMPUTE)
    assert len(comms) == 9  # the sample's 9 ALLREDUCE_ASYNC gradient rows
    assert all(c.deps == [last_forward] for c in comms)


def test_forward_collectives_run_in_the_tp_group(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text(f"{HEADER}\n"
                    "qkv\t1.0\tALLREDUCE\t1024\t0\tALLREDUCE_ASYNC\t2048\t0\tNone\t0\t0\n"
                    "proj\t1.0\tALLGATHER\t1000\t0\tNone\t0\t0\tNone\t0\t0\n")
    trace, _ = load("neusight", path, tp=2, dp=2)
    check_model(trace)
    r3 = trace.ranks[3]  # tp 1, dp 1
    comms = [(n.name, n.size, trace.groups[r3.group_of(n)].members) for n in r3.nodes if n.kind == NodeKind.COLLECTIVE]
    assert comms == [
        ("qkv fwd ALLREDUCE", 1024 * 4, (2, 3)),
        ("proj fwd ALLGATHER", 1000 * 4 // 2, (2, 3)),  # gathered elements -> the per-rank input
        ("qkv ig ALLREDUCE_ASYNC", 2048 * 4, (1, 3)),
    ]


def test_num_layers_replicates_the_block_over_pipeline_stages():
    trace, _ = load("neusight", SAMPLE, dp=2, pp=2, num_layers=4, p2p_bytes=1 << 20)
    check_model(trace)
    assert len(trace.ranks) == 4
    stage0 = [n.name for n in trace.ranks[0].nodes]
    stage1 = [n.name for n in trace.ranks[2].nodes]
    assert "transformer_wte fwd" in stage0 and "transformer_wte fwd" not in stage1
    assert "lm_head fwd" in stage1 and "lm_head fwd" not in stage0
    assert [n for n in stage0 if n.endswith("addmm fwd")] == ["layer0.addmm fwd", "layer1.addmm fwd"]
    assert [n for n in stage1 if n.endswith("addmm fwd")] == ["layer2.addmm fwd", "layer3.addmm fwd"]
    assert check_pairing(trace) == 2 * 2  # 2 pipeline columns, activation and gradient
    assert any("replicated 4 times" in a for a in trace.assumptions)


def test_pipeline_needs_p2p_bytes_and_whole_layers_per_stage():
    with pytest.raises(UsageError, match="--pp 2 needs --p2p-bytes"):
        load("neusight", SAMPLE, pp=2, num_layers=2)
    with pytest.raises(UsageError, match="3 layer\\(s\\) do not split evenly into --pp 2 stages"):
        load("neusight", SAMPLE, pp=2, num_layers=3, p2p_bytes=10)


@pytest.mark.parametrize("row, message", [
    ("x\t1.0\tNone\t0", "expected 11 tab-separated columns (name, forward_compute_time, forward_comm_type, ...), found 4"),
    ("x\tnan\tNone\t0\t0\tNone\t0\t0\tNone\t0\t0", "forward_compute_time: expected a time in ms >= 0, found 'nan'"),
    ("x\t-1\tNone\t0\t0\tNone\t0\t0\tNone\t0\t0", "forward_compute_time: expected a time in ms >= 0, found '-1'"),
    ("x\t1\tNone\t0\t0\tALLREDUCE_SYNC\t5\t0\tNone\t0\t0",
     "backward_comm_type: unknown comm type 'ALLREDUCE_SYNC'; expected None or one of ALLREDUCE, ALLGATHER, "
     "REDUCESCATTER, ALLTOALL (optionally with _ASYNC)"),
    ("x\t1\tNone\t0\t0\tALLREDUCE\t1.5\t0\tNone\t0\t0", "backward_comm_size: expected a whole element count >= 0, found '1.5'"),
])
def test_bad_rows_name_file_line_and_column(tmp_path, row, message):
    path = tmp_path / "t.tsv"
    path.write_text(f"{HEADER}\nok\t1.0\tNone\t0\t0\tNone\t0\t0\tNone\t0\t0\n{row}\n")
    with pytest.raises(InputError) as e:
        load("neusight", path)
    assert str(e.value) == f"{path}:3: {message}"


def test_bad_header(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("name\tforward_compute_time\tfoo\n")
    with pytest.raises(InputError) as e:
        load("neusight", path)
    assert str(e.value) == (f"{path}:1: expected the header row name forward_compute_time forward_comm_type ... "
                            "(11 tab-separated columns), found name forward_compute_time foo")


def test_cli_converts_the_sample_to_chakra(tmp_path):
    result = run_cli(SAMPLE, "--dp", "2", "--to", "chakra", "-o", tmp_path / "n")
    assert result.code == 0, result.stderr
    assert sorted(p.name for p in tmp_path.glob("n.*.et")) == ["n.0.et", "n.1.et"]
