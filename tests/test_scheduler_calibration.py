"""The scheduler against ASTRA-sim's own numbers (issue 3): within 5% on every fact.

ASTRA-sim analytical backend (congestion-unaware), ring of 8 ranks, 50 GB/s, 500 ns latency,
4 chunks, one chunk active at a time; each trace is one 1 µs compute then one collective over
all 8 ranks (ALL_GATHER size is the per-rank input). Times are whole-trace ns.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.scheduler_synth import MiB, astra_options, coll, compute, data_workload, recv, send, shared_trace, trace_of

from converters.model import CollType, ExecutionTrace, Rank
from converters.options import Options
from converters.scheduler import schedule

ASTRA_SIM = [
    (CollType.ALL_REDUCE, 1, 65_440),
    (CollType.ALL_REDUCE, 16, 603_908),
    (CollType.ALL_GATHER, 1, 152_016),
    (CollType.ALL_GATHER, 16, 2_202_820),
    (CollType.REDUCE_SCATTER, 1, 34_080),
    (CollType.REDUCE_SCATTER, 16, 316_208),
    (CollType.ALL_TO_ALL, 1, 126_480),
    (CollType.ALL_TO_ALL, 16, 1_151_840),
]


def one_collective(kind: CollType, size: int, ranks: int = 8):
    return shared_trace(ranks, [compute(0, 1000), coll(1, kind, size, deps=[0])])


@pytest.mark.parametrize("kind,mib,astra_ns", ASTRA_SIM, ids=[f"{k.name}-{m}MiB" for k, m, _ in ASTRA_SIM])
def test_single_collective_matches_astra_sim(kind, mib, astra_ns):
    timeline = schedule(one_collective(kind, mib * MiB), astra_options())
    ours = timeline.summary["iteration_time_ns"]
    assert abs(ours - astra_ns) / astra_ns < 0.05
    # The formula reproduces these far more closely than the 5% the issue asks for.
    assert abs(ours - astra_ns) / astra_ns < 0.001


def test_data_workload_matches_astra_sim():
    # 3 rows: compute 100/200/300 µs in each of fwd, ig and wg; wg all-reduces of 1, 2, 4 MiB.
    trace = data_workload([(100_000, 1 * MiB), (200_000, 2 * MiB), (300_000, 4 * MiB)])
    summary = schedule(trace, astra_options()).summary
    assert abs(summary["iteration_time_ns"] - 1_764_440) / 1_764_440 < 0.05
    for row in summary["ranks"].values():
        assert abs(row["exposed_comm_ns"] - 64_440) / 64_440 < 0.05
        assert row["compute_ns"] == 1_700_000
        assert row["finish_ns"] == summary["iteration_time_ns"]


def test_every_rank_of_a_symmetric_collective_ends_together():
    timeline = schedule(one_collective(CollType.ALL_REDUCE, MiB), astra_options())
    assert len({ends[1] for ends in timeline.ends.values()}) == 1
    assert all(starts[1] == 1000 for starts in timeline.starts.values())


def test_data_workload_text_through_the_reader(tmp_path):
    """The same DATA workload as ASTRA-sim 1.0 text, read by the astra-text reader."""
    from converters.api import read

    path = tmp_path / "data3.txt"
    path.write_text(
        "DATA\n3\n"
        "l0 -1 100000 NONE 0 100000 NONE 0 100000 ALLREDUCE 1048576 100\n"
        "l1 -1 200000 NONE 0 200000 NONE 0 200000 ALLREDUCE 2097152 100\n"
        "l2 -1 300000 NONE 0 300000 NONE 0 300000 ALLREDUCE 4194304 100\n")
    trace = read(path, "astra-text", num_npus=8)
    summary = schedule(trace, astra_options()).summary
    assert abs(summary["iteration_time_ns"] - 1_764_440) / 1_764_440 < 0.05
    assert abs(summary["ranks"]["0"]["exposed_comm_ns"] - 64_440) / 64_440 < 0.05


# ---------------------------------------------------------------- groups on ASTRA-sim's ring
#
# ASTRA-sim's network is one ring of all ranks in rank order (`run` writes `topology: [Ring]`
# with npus_count = ranks); a message pays the link latency once per hop, the shorter way
# round. A group's ring step between members far apart therefore costs more latency. Recorded
# with `../shared/astra-sim/run head` (legacy prints the same), 8 ranks, 50 GB/s, 500 ns,
# 4 chunks, endpoint delay 10 ns, local memory 1600 GB/s: every rank computes 1 µs, then the
# group's members run one collective of 1 MiB (RS of 16 MiB where said), or one rank sends
# 1 MiB to another. Times are the last rank's finish in ns.

RING_NETWORK = Path(__file__).resolve().parent.parent / "samples" / "network_astra_ring8.toml"
ASTRA_SIM_GROUPS = [
    (CollType.ALL_REDUCE, (0, 1), 1, 25_620),
    (CollType.ALL_REDUCE, (0, 4), 1, 37_620),  # 4 hops each way: 8 steps x 3 more hops x 500 ns
    (CollType.ALL_REDUCE, (0, 1, 2, 3), 1, 50_000),  # edges 1,1,1,3 hops: 1.5 per step on average
    (CollType.ALL_REDUCE, (0, 2, 4, 6), 1, 56_000),
    (CollType.ALL_REDUCE, (0, 1, 2), 1, 39_528),
    (CollType.REDUCE_SCATTER, (0, 1, 2), 1, 20_932),  # 8 steps on edges 1,1,2: the 2-hop edge thrice
    (CollType.ALL_GATHER, (0, 1, 2), 1, 45_676),
    (CollType.ALL_GATHER, (0, 3), 1, 26_608),
    (CollType.REDUCE_SCATTER, (1, 2, 3, 4, 5, 6), 16, 301_800),
    (CollType.ALL_TO_ALL, (0, 1, 2, 3), 1, 48_560),
    (CollType.ALL_TO_ALL, (0, 2, 4, 6), 1, 54_560),
    (CollType.ALL_TO_ALL, (0, 1, 5), 1, 36_684),
]
# A size that chunks do not divide: ASTRA-sim runs chunks of size // 4 bytes until the size is
# covered, one chunk more (ring of 8, all ranks, 1 MiB + 1 B; + 3 B gives the same).
ASTRA_SIM_UNEVEN = [
    (CollType.ALL_REDUCE, 81_550),
    (CollType.ALL_GATHER, 189_770),
    (CollType.REDUCE_SCATTER, 42_350),
    (CollType.ALL_TO_ALL, 157_850),
]
ASTRA_SIM_SENDS = [((0, 1), 21_031), ((0, 4), 22_531), ((1, 6), 22_031)]


def group_collective(kind: CollType, members: tuple[int, ...], size: int, ranks: int = 8):
    trace = ExecutionTrace()
    group = trace.add_group("dp", members)
    for r in range(ranks):
        nodes = [compute(0, 1000)]
        if r in members:
            nodes.append(coll(1, kind, size, deps=[0], group=group.id))
        trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = ranks
    return trace


@pytest.mark.parametrize("kind,members,mib,astra_ns", ASTRA_SIM_GROUPS,
                         ids=[f"{k.name}-{'.'.join(map(str, m))}" for k, m, _, _ in ASTRA_SIM_GROUPS])
def test_group_collective_on_the_ring_matches_astra_sim(kind, members, mib, astra_ns):
    timeline = schedule(group_collective(kind, members, mib * MiB), Options(network=RING_NETWORK))
    ours = timeline.summary["iteration_time_ns"]
    assert abs(ours - astra_ns) / astra_ns < 0.002


@pytest.mark.parametrize("pair,astra_ns", ASTRA_SIM_SENDS, ids=[f"{s}-{d}" for (s, d), _ in ASTRA_SIM_SENDS])
def test_send_on_the_ring_pays_latency_per_hop_as_astra_sim(pair, astra_ns):
    src, dst = pair
    programs = {r: [compute(0, 1000)] for r in range(8)}
    programs[src].append(send(1, dst, MiB, tag=5, deps=[0]))
    programs[dst].append(recv(1, src, MiB, tag=5, deps=[0]))
    timeline = schedule(trace_of(programs), Options(network=RING_NETWORK))
    assert timeline.summary["iteration_time_ns"] == astra_ns


@pytest.mark.parametrize("kind,astra_ns", ASTRA_SIM_UNEVEN, ids=[k.name for k, _ in ASTRA_SIM_UNEVEN])
def test_a_size_chunks_do_not_divide_runs_one_more_chunk_as_astra_sim(kind, astra_ns):
    ours = schedule(one_collective(kind, MiB + 1), astra_options()).summary["iteration_time_ns"]
    assert abs(ours - astra_ns) / astra_ns < 0.001
    assert schedule(one_collective(kind, MiB + 3), astra_options()).summary["iteration_time_ns"] == ours


def test_uneven_all_gather_of_three_on_a_ring_of_twelve_matches_astra_sim():
    # A TP-3 all-gather of 256 KiB / 3 = 87,382 B per rank: 5 chunks, edges of 1, 1 and 2 hops.
    timeline = schedule(group_collective(CollType.ALL_GATHER, (0, 1, 2), 87_382, ranks=12), Options(network=RING_NETWORK))
    assert abs(timeline.summary["iteration_time_ns"] - 12_210) / 12_210 < 0.005  # ours 12,169


def test_collectives_of_two_groups_on_one_rank_run_one_after_another_as_in_astra_sim():
    """Rank 0 issues an all-reduce in [0, 1, 2, 3] and one in [0, 4] at once (1 MiB each, ring
    of 8): ASTRA-sim runs them one after another; the last rank ends at 86,620 ns."""
    trace = ExecutionTrace()
    tp = trace.add_group("tp", (0, 1, 2, 3))
    dp = trace.add_group("dp", (0, 4))
    for r in range(8):
        nodes = [compute(0, 1000)]
        for group in (tp, dp):
            if r in group.members:
                nodes.append(coll(len(nodes), CollType.ALL_REDUCE, MiB, deps=[0], group=group.id))
        trace.ranks[r] = Rank(r, nodes)
    trace.parallel.world = 8
    ours = schedule(trace, Options(network=RING_NETWORK)).summary["iteration_time_ns"]
    assert abs(ours - 86_620) / 86_620 < 0.001


def test_without_the_ring_topology_every_step_costs_one_latency():
    flat = schedule(group_collective(CollType.ALL_REDUCE, (0, 4), MiB), astra_options())
    near = schedule(group_collective(CollType.ALL_REDUCE, (0, 1), MiB), astra_options())
    assert flat.summary["iteration_time_ns"] == near.summary["iteration_time_ns"] == 25_594


def test_whole_transformer_workload_on_the_ring_matches_astra_sim(tmp_path):
    """HYBRID_TRANSFORMER, TP 4 on 16 ranks (DP groups 4 hops apart): ASTRA-sim 327,912 ns with
    both builds on the Chakra set et-convert writes (benchmarks/fidelity.py). The set is what
    is compared: Chakra holds compute times in whole µs."""
    from converters.api import read, write

    trace = read(Path(__file__).resolve().parent.parent / "samples" / "workloads" / "astra_transformer.txt",
                 "astra-text", num_npus=16)
    write(trace, tmp_path / "w", to="chakra")
    chakra = read(sorted(tmp_path.glob("w.*.et")), "chakra")
    ours = schedule(chakra, Options(network=RING_NETWORK)).summary["iteration_time_ns"]
    assert abs(ours - 327_912) / 327_912 < 0.005
