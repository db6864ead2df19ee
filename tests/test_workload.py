"""Workload tables (SimAI, ASTRA-sim 1.0 text, NeuSight) -> model: invariants every table must keep.

The helpers here are shared by test_simai.py, test_astra.py and test_neusight.py.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conftest import SAMPLES
from converters.diagnostics import Diagnostics
from converters.formats import input_format, resolve
from converters.model import ExecutionTrace, NodeKind
from converters.options import Options

WORKLOADS = SAMPLES / "workloads"
ASTRA_SAMPLES = sorted(p.name for p in WORKLOADS.glob("astra_*.txt"))


def load(fmt: str, path: Path, **options) -> tuple[ExecutionTrace, Diagnostics]:
    diagnostics = Diagnostics()
    trace = resolve(input_format(fmt).load)([path], Options(**options), diagnostics)
    return trace, diagnostics


# ---------------------------------------------------------------- checks over a whole model


def check_program_order(trace: ExecutionTrace) -> None:
    """Node ids are 0..n-1 in list order and every dependency is an earlier node."""
    seen = set()
    for rank in trace.ranks.values():
        if id(rank.nodes) in seen:
            continue
        seen.add(id(rank.nodes))
        for i, node in enumerate(rank.nodes):
            assert node.id == i
            assert all(0 <= d < i for d in node.deps), (rank.rank, node.id, node.deps)
            assert node.deps == sorted(set(node.deps))


def _per_list(trace: ExecutionTrace, kinds) -> dict[int, list]:
    """Nodes of the given kinds, once per distinct (possibly shared) node list."""
    found = {}
    for rank in trace.ranks.values():
        if id(rank.nodes) not in found:
            found[id(rank.nodes)] = [n for n in rank.nodes if n.kind in kinds]
    return found


def collective_sequences(trace: ExecutionTrace) -> dict[int, dict[int, list[tuple]]]:
    """group id -> rank -> that rank's sequence of (collective, size) in the group."""
    lists = _per_list(trace, (NodeKind.COLLECTIVE,))
    seqs: dict[int, dict[int, list]] = defaultdict(dict)
    for rank in trace.sorted_ranks():
        per_group = defaultdict(list)
        for node in lists[id(rank.nodes)]:
            per_group[rank.group_of(node)].append((node.coll, node.size))
        for gid, seq in per_group.items():
            seqs[gid][rank.rank] = seq
    return seqs


def check_collectives_match(trace: ExecutionTrace) -> int:
    """Every member of every group issues the same (collective, size) sequence; returns groups used."""
    seqs = collective_sequences(trace)
    for gid, by_rank in seqs.items():
        assert gid is not None and gid in trace.groups, f"collective in unknown group {gid}"
        members = trace.groups[gid].members
        assert set(by_rank) == set(members), f"group {gid}: issued by {sorted(by_rank)}, members {members}"
        first = by_rank[members[0]]
        for m in members:
            assert by_rank[m] == first, f"group {gid}: rank {m} differs from rank {members[0]}"
    return len(seqs)


def p2p_keys(trace: ExecutionTrace) -> tuple[Counter, Counter]:
    sends, recvs = Counter(), Counter()
    lists = _per_list(trace, (NodeKind.SEND, NodeKind.RECV))
    for rank in trace.ranks.values():
        for node in lists[id(rank.nodes)]:
            if node.kind == NodeKind.SEND:
                sends[(rank.rank, rank.peer_of(node), node.tag, node.size)] += 1
            elif node.kind == NodeKind.RECV:
                recvs[(rank.peer_of(node), rank.rank, node.tag, node.size)] += 1
    return sends, recvs


def check_pairing(trace: ExecutionTrace) -> int:
    """Every SEND has exactly one RECV with the same (src, dst, tag, size), and back."""
    sends, recvs = p2p_keys(trace)
    assert sends == recvs
    assert all(c == 1 for c in sends.values()), "a (src, dst, tag, size) is used twice"
    for (src, dst, _, size) in sends:
        assert src != dst and size > 0
    return sum(sends.values())


def dry_run(trace: ExecutionTrace) -> None:
    """Run every rank to the end: deps first, k-th collective of a group with the k-th of every
    member, eager sends, receives after their send. Fails on a stall (deadlock)."""
    ranks = trace.sorted_ranks()
    done = {r.rank: [False] * len(r.nodes) for r in ranks}
    coll_index = {r.rank: {} for r in ranks}  # node id -> (group, k)
    for r in ranks:
        counts = Counter()
        for node in r.nodes:
            if node.kind == NodeKind.COLLECTIVE:
                g = r.group_of(node)
                coll_index[r.rank][node.id] = (g, counts[g])
                counts[g] += 1
    sent = Counter()
    arrived = defaultdict(set)  # (group, k) -> ranks ready for it
    remaining = sum(len(r.nodes) for r in ranks)
    progress = True
    while remaining and progress:
        progress = False
        for r in ranks:
            flags = done[r.rank]
            for node in r.nodes:
                if flags[node.id] or not all(flags[d] for d in node.deps):
                    continue
                if node.kind == NodeKind.RECV:
                    key = (r.peer_of(node), r.rank, node.tag, node.size)
                    if not sent[key]:
                        continue
                    sent[key] -= 1
                elif node.kind == NodeKind.SEND:
                    sent[(r.rank, r.peer_of(node), node.tag, node.size)] += 1
                elif node.kind == NodeKind.COLLECTIVE:
                    key = coll_index[r.rank][node.id]
                    arrived[key].add(r.rank)
                    if len(arrived[key]) < len(trace.groups[key[0]].members):
                        continue
                flags[node.id] = True
                remaining -= 1
                progress = True
        # a collective completes on every member once all have arrived: mark the waiting ones
        for r in ranks:
            for nid, key in coll_index[r.rank].items():
                if not done[r.rank][nid] and len(arrived[key]) == len(trace.groups[key[0]].members):
                    done[r.rank][nid] = True
                    remaining -= 1
                    progress = True
    stuck = {r.rank: next(i for i, f in enumerate(done[r.rank]) if not f) for r in ranks if not all(done[r.rank])}
    assert not stuck, f"stalled: rank -> first unfinished node {dict(list(stuck.items())[:8])}"


def check_model(trace: ExecutionTrace, run: bool = True) -> None:
    check_program_order(trace)
    check_collectives_match(trace)
    check_pairing(trace)
    if run:
        dry_run(trace)
    assert trace.assumptions and trace.units and trace.parallel.world == len(trace.ranks)
    for group in trace.groups.values():
        assert group.kind in ("tp", "dp", "ep", "dp_ep", "pp", "embedding", "world")
        assert group.id > 0 and group.members == tuple(sorted(group.members))


# ---------------------------------------------------------------- every sample table converts


def test_simai_sample_keeps_every_invariant():
    from converters.api import schedule

    trace, _ = load("simai", SAMPLES / "simai_tp8_pp16_1024gpu.txt")
    check_program_order(trace)
    assert check_collectives_match(trace) == 128 + 128 + 64  # tp, dp, embedding groups issue collectives
    assert check_pairing(trace) == 8 * 8 * 15 * 16 * 2  # columns x boundaries x microbatches x directions
    # The validator's deadlock dry run is this schedule (it raises Deadlock on a stall); the
    # test's own dry_run is too slow for 1024 ranks. Every node of every rank gets an end.
    timeline = schedule(trace)
    assert {r: len(ends) for r, ends in timeline.ends.items()} == {r: len(k.nodes) for r, k in trace.ranks.items()}


@pytest.mark.parametrize("sample", ASTRA_SAMPLES)
def test_every_astra_sample_keeps_every_invariant(sample):
    trace, _ = load("astra-text", WORKLOADS / sample, num_npus=8, passes=2)
    check_model(trace)
    assert len(trace.ranks) == 8


def test_neusight_sample_keeps_every_invariant():
    trace, _ = load("neusight", SAMPLES / "neusight_gpt2_block.tsv", dp=2, tp=2, pp=2, num_layers=4, p2p_bytes=4096)
    check_model(trace)


def test_a_small_pipeline_runs_to_the_end_in_both_schedules(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=4, gpus=16, ga=6))
    for schedule in ("1f1b", "gpipe"):
        trace, _ = load("simai", path, schedule=schedule)
        check_model(trace)


def test_the_dry_run_catches_a_deadlock(tmp_path):
    """The checker itself can fail: a receive whose send never comes."""
    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=1, pp=2, gpus=2, ga=2))
    trace, _ = load("simai", path)
    recvs = [n for n in trace.ranks[1].nodes if n.kind == NodeKind.RECV]
    recvs[1].tag += 1000
    with pytest.raises(AssertionError, match="stalled"):
        dry_run(trace)
    from converters.api import schedule
    from converters.scheduler.deadlock import Deadlock

    with pytest.raises(Deadlock, match="deadlock"):
        schedule(trace)


def small_simai(tp: int, pp: int, gpus: int, ga: int, layers: int = 2, extra: str = "", rows: str | None = None,
                ep: int = 1, recompute: str = "checkpoints: 0 checkpoint_initiates: 0") -> str:
    """An AICB-shaped file: prologue, `ga` blocks (embedding, layers, final), epilogue.

    Lines: 1 header, 2 row count, 3-6 prologue, then each block of 2 + 2*layers rows."""
    block = ["embedding_layer\t-1\t2000\tALLREDUCE\t65536\t1\tNONE\t0\t1500\tNONE\t0\t100"]
    for _ in range(layers):
        block += [
            "attention_column\t-1\t3000\tALLGATHER\t65536\t1500\tREDUCESCATTER\t0\t1500\tNONE\t0\t100",
            "attention_row\t-1\t3000\tREDUCESCATTER\t65536\t1500\tALLGATHER\t65536\t1500\tNONE\t0\t100",
        ]
    block.append("final_column\t-1\t2500\tALLGATHER\t65536\t1200\tREDUCESCATTER\t0\t1200\tNONE\t0\t100")
    prologue = [
        "grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t1048576\t100",
        "grad_param_comm\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tREDUCESCATTER\t2097152\t100",
        "grad_param_compute\t-1\t1\tNONE\t0\t40000\tNONE\t0\t1\tNONE\t0\t100",
        "embedding_grads\t-1\t1\tNONE\t0\t1\tALLREDUCE\t32768\t1\tNONE\t0\t100",
    ]
    epilogue = [
        "cross_entropy1\t-1\t0\tALLREDUCE\t1024\t0\tNONE\t0\t0\tNONE\t0\t100",
        "optimizer1\t-1\t0\tALLREDUCE\t4\t0\tNONE\t0\t0\tNONE\t0\t100",
    ]
    body = rows.splitlines() if rows is not None else prologue + block * ga + epilogue
    header = (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} ga: {ga} "
              f"all_gpus: {gpus} {recompute}{extra}")
    return "\n".join([header, str(len(body))] + body) + "\n"


@pytest.mark.parametrize("fmt, path, options", [
    *[("astra-text", WORKLOADS / name, {"num_npus": 8}) for name in ASTRA_SAMPLES],
    ("neusight", SAMPLES / "neusight_gpt2_block.tsv", {"dp": 2, "pp": 2, "num_layers": 2, "p2p_bytes": 4096}),
])
def test_the_validator_finds_no_errors(fmt, path, options):
    from converters.api import validate

    trace, _ = load(fmt, path, **options)
    errors = [f.text() for f in validate(trace) if f.severity == "error"]
    assert errors == []


def test_the_validator_finds_no_errors_in_a_pipeline(tmp_path):
    from converters.api import validate

    path = tmp_path / "w.txt"
    path.write_text(small_simai(tp=2, pp=4, gpus=16, ga=4))
    for mode in ("stage", "simai"):
        trace, _ = load("simai", path, mode=mode)
        assert [f.text() for f in validate(trace) if f.severity == "error"] == []
