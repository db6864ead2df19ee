"""OptimusPrime log -> a modelled per-stage pipeline timeline with labelled assumptions."""

from __future__ import annotations

from collections import Counter

import pytest

import converters as etc
from conftest import SAMPLES
from converters.builders.optimus import DEFAULT_P2P_BYTES
from converters.diagnostics import Diagnostics, InputError
from converters.model import NodeKind
from converters.readers.optimus_log import read_log

SAMPLE = SAMPLES / "optimusprime_llama1b_pp8.log"


def read(**options):
    return etc.read(SAMPLE, "optimus-log", diagnostics=Diagnostics(), **options)


@pytest.fixture(scope="module")
def trace():
    return read()


@pytest.fixture(scope="module")
def log():
    return read_log(SAMPLE, Diagnostics())


def test_default_step_is_the_median_ms_per_batch(trace, log):
    timed = sorted((ns, step) for step, (ns, _) in log.ms_per_batch.items())
    assert trace.metadata["step"] == timed[(len(timed) - 1) // 2][1] == 5
    assert trace.metadata["measured_ms_per_batch"] == 1613.34
    assert trace.metadata["modelled_iteration_ms"] > 0
    assert any(a.startswith("step 5 modelled: its ms/batch (1613.34 ms) is the median") for a in trace.assumptions)


def test_node_counts_per_stage(trace):
    assert sorted(trace.ranks) == list(range(8))
    p = trace.parallel
    assert (p.world, p.pp, p.microbatches) == (8, 8, 32)
    for rank in trace.sorted_ranks():
        kinds = Counter(n.kind for n in rank.nodes)
        layers = 4 if rank.stage == 7 else 3
        assert kinds[NodeKind.COMPUTE] == 32 * layers * 2
        boundaries = (rank.stage > 0) + (rank.stage < 7)
        assert kinds[NodeKind.SEND] == kinds[NodeKind.RECV] == 32 * boundaries


def test_forward_is_step_total_over_microbatches_and_backward_a_factor(log):
    trace = read(bwd_factor=3.0)
    totals = {l.name: l.total_ns for s in log.steps if s.step == 5 and s.stage == 1 for l in s.layers}
    nodes = trace.ranks[1].nodes
    forward = {n.args["layer"]: n.duration_ns for n in nodes if n.name.endswith("fwd mb0")}
    backward = {n.args["layer"]: n.duration_ns for n in nodes if n.name.endswith("bwd mb0")}
    assert forward == {name: round(total / 32) for name, total in totals.items()}
    assert backward == {name: round(3 * d) for name, d in forward.items()}
    assert all("assumed: 3 x forward" in n.args["time_basis"] for n in nodes if "bwd" in n.name)
    assert any("backward time = 3 x forward" in a for a in trace.assumptions)


def test_every_send_has_exactly_one_receive_and_arrives_first(trace):
    sends, recvs = {}, {}
    for rank in trace.sorted_ranks():
        for n in rank.nodes:
            if n.kind == NodeKind.SEND:
                key = (rank.rank, n.peer, n.tag, n.size)
                assert key not in sends
                sends[key] = n
            elif n.kind == NodeKind.RECV:
                key = (n.peer, rank.rank, n.tag, n.size)
                assert key not in recvs
                recvs[key] = n
    assert sends.keys() == recvs.keys() and len(sends) == 7 * 32 * 2
    for key, send in sends.items():
        recv = recvs[key]
        assert recv.start_ns + recv.duration_ns >= send.start_ns + send.duration_ns


def test_each_rank_runs_one_thing_at_a_time_in_program_order(trace):
    for rank in trace.sorted_ranks():
        assert rank.nodes[0].start_ns == 0 and rank.nodes[0].deps == []
        for a, b in zip(rank.nodes, rank.nodes[1:]):
            assert b.deps == [a.id]
            assert b.start_ns == a.start_ns + a.duration_ns
    assert trace.timing == "modelled"  # placed by the model: never labelled measured
    assert "modelled" in trace.metadata["timing_note"]


def test_schedules(trace):
    order = [(n.args["pass"], n.microbatch) for n in trace.ranks[0].nodes if n.kind == NodeKind.COMPUTE][::3]
    assert order[:8] == [("forward", m) for m in range(8)]  # 1F1B: 7 warmup forwards, then F7 B0
    assert order[8] == ("backward", 0)
    gpipe = read(schedule="gpipe")
    order = [(n.args["pass"], n.microbatch) for n in gpipe.ranks[0].nodes if n.kind == NodeKind.COMPUTE][::3]
    assert order == [("forward", m) for m in range(32)] + [("backward", m) for m in range(32)]
    assert gpipe.metadata["schedule"] == "gpipe"


def test_p2p_sizes_values_and_labels(trace):
    send = next(n for n in trace.ranks[1].nodes if n.kind == NodeKind.SEND and n.args["carries"] == "activations")
    assert send.size == DEFAULT_P2P_BYTES and send.peer == 2 and send.args["peer_stage"] == 2
    assert "assumed default" in send.args["size_basis"]
    assert send.args["values"] == "getitem_3, getitem_4, getitem_5, getitem_6, getitem_7, getitem_8"
    assert trace.metadata["stage_values"]["0"] == ["getitem", "getitem_1", "getitem_2", "getitem_3", "getitem_4", "getitem_5"]
    sized = read(p2p_bytes=1000)
    send = next(n for n in sized.ranks[1].nodes if n.kind == NodeKind.SEND)
    assert send.size == 1000 and send.args["size_basis"] == "--p2p-bytes"


def test_chosen_step(log):
    trace = read(step=3)
    assert trace.metadata["step"] == 3
    assert trace.metadata["measured_ms_per_batch"] == 1625.92
    with pytest.raises(InputError) as caught:
        read(step=99)
    assert str(caught.value) == f"{SAMPLE}: --step 99: the log has forward times for steps 1-20"


def test_same_input_same_model():
    a, b = read(), read()
    assert [(n.name, n.start_ns, n.duration_ns) for r in a.sorted_ranks() for n in r.nodes] == [
        (n.name, n.start_ns, n.duration_ns) for r in b.sorted_ranks() for n in r.nodes
    ]


def test_assumptions_are_labelled_on_the_nodes_they_shape(trace):
    nodes = [n for r in trace.sorted_ranks() for n in r.nodes]
    assert {n.args["schedule"] for n in nodes} == {"1f1b (assumed: the log does not say which ran; --schedule)"}
    backward = [n for n in nodes if n.kind == NodeKind.COMPUTE and n.args["pass"] == "backward"]
    assert backward and {n.args["bwd_factor"] for n in backward} == {2.0}
    assert not any("bwd_factor" in n.args for n in nodes if n.kind == NodeKind.COMPUTE and n.args["pass"] == "forward")
    # getitem_3..5 are outputs of submod_0 (stage 0) that stages 1 to 7 use (special_nodes (1, 7)):
    # stage 0 sends them, stages 1-6 relay them
    relays = {}
    for rank in trace.sorted_ranks():
        for n in rank.nodes:
            if n.kind == NodeKind.SEND and n.args["carries"] == "activations":
                relays[rank.stage] = n.args.get("relayed")
    assert relays[0] is None
    assert {s: relays[s] for s in range(1, 7)} == {s: "getitem_3, getitem_4, getitem_5" for s in range(1, 7)}
    send = next(n for n in trace.ranks[2].nodes if n.kind == NodeKind.SEND and n.args["carries"] == "activations")
    assert send.args["relay_size_basis"] == (
        "assumed: relayed values ride in this one transfer of the size above (their sizes are not in the log)"
    )
    assert any(a.startswith("values needed beyond the next stage (special_nodes) are relayed") for a in trace.assumptions)


def test_measured_iteration_is_kept_for_stats_and_timelines(trace):
    assert trace.metadata["measured_iteration"] == {"ns": 1_613_340_000, "what": "ms/batch of step 5", "source": f"{SAMPLE}:492"}
