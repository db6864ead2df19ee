"""The scheduler against ASTRA-sim's own numbers (issue 3): within 5% on every fact.

ASTRA-sim analytical backend (congestion-unaware), ring of 8 ranks, 50 GB/s, 500 ns latency,
4 chunks, one chunk active at a time; each trace is one 1 µs compute then one collective over
all 8 ranks (ALL_GATHER size is the per-rank input). Times are whole-trace ns.
"""

from __future__ import annotations

import pytest
from helpers.scheduler_synth import MiB, astra_options, coll, compute, data_workload, shared_trace

from converters.model import CollType
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
