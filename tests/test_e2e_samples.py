"""End to end: every sample through the CLI, outputs checked by independent readers.

Chakra sets are read back with mlc-chakra (the reference reader) and checked against what
ASTRA-sim needs; Chrome traces are parsed as strict JSON and checked against Perfetto's import
rules.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from chakra_ref import (
    check_astra_rules, collective_sequence, p2p_keys, rank_files, read_groups, read_rank,
)
from conftest import LOG_SETS, SAMPLES, run_cli

SEND, RECV = 5, 6

TABLES_AND_LOGS = [
    "simai_tp8_pp16_1024gpu.txt",
    "neusight_gpt2_block.tsv",
    "megatron_rank4_pp_tp2.log",
    "megatron_rank2_moe_scaling.log",
    "optimusprime_llama1b_pp8.log",
    *sorted(LOG_SETS),
    "pytorch_gloo_4rank",  # a directory of PyTorch profiler traces, one per rank
]
ONE_RANK_LOGS = {"megatron_rank4_pp_tp2.log": 4, "megatron_rank2_moe_scaling.log": 2}
CHAKRA_SETS = sorted(p.name for p in SAMPLES.glob("chakra_*") if p.is_dir())


def strict_json(path: Path):
    def no_constants(name):
        raise AssertionError(f"{path}: non-standard JSON constant {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=no_constants)


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.mark.parametrize("sample", TABLES_AND_LOGS + CHAKRA_SETS)
def test_every_sample_becomes_a_clean_chrome_trace(sample, out_dir):
    from converters.validate.chrome_rules import check_chrome_trace

    out = out_dir / f"{sample}.json"
    result = run_cli(SAMPLES / sample, *LOG_SETS.get(sample, ()), "-o", out)
    assert result.code == 0, result.stderr
    trace = strict_json(out)
    assert check_chrome_trace(trace) == []
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert slices, "no slices"
    assert all(e["pid"] >= 1 for e in trace["traceEvents"])
    meta = trace["metadata"]
    assert meta["source.format"] and meta["source.sha256"]
    assert meta["et_convert.version"]


@pytest.mark.parametrize("sample", TABLES_AND_LOGS)
def test_every_sample_becomes_a_chakra_set_astra_sim_can_run(sample, out_dir):
    prefix = out_dir / sample.split(".")[0] / "workload"
    result = run_cli(SAMPLES / sample, *LOG_SETS.get(sample, ()), "--to", "chakra", "-o", prefix)
    assert result.code == 0, result.stderr
    files = rank_files(prefix)
    assert files, "no .et files written"
    if sample in ONE_RANK_LOGS:  # one rank's log: its own file, and a warning that it cannot run alone
        assert list(files) == [ONE_RANK_LOGS[sample]]
        assert "partial Chakra set" in result.stderr
    else:
        assert list(files) == list(range(len(files))), "rank files are not 0..N-1"
    groups = read_groups(prefix)
    # Whole sets are read when small; big ones through one pipeline column and its groups.
    chosen = sorted(files) if len(files) <= 64 else _column_and_groups(groups, rank=100)
    ranks = {r: read_rank(files[r]) for r in chosen}
    for r, rank in ranks.items():
        check_astra_rules(r, rank, groups)
    _check_pairing_within(ranks, set(files))
    _check_collectives_match(ranks, groups)


def _column_and_groups(groups: dict[str, list[int]], rank: int) -> list[int]:
    chosen = {rank}
    for members in groups.values():
        if rank in members and len(members) <= 16:
            chosen.update(members)
    return sorted(chosen)


def _check_pairing_within(ranks, all_ranks: set[int]) -> None:
    """Every send between two read ranks has exactly one receive, and vice versa."""
    sends = Counter(k for rank in ranks.values() for k in p2p_keys(rank, SEND) if k[1] in ranks)
    recvs = Counter(k for rank in ranks.values() for k in p2p_keys(rank, RECV) if k[0] in ranks)
    assert sends == recvs
    for rank in ranks.values():
        for src, dst, _, _ in p2p_keys(rank, SEND) + p2p_keys(rank, RECV):
            assert src in all_ranks and dst in all_ranks or len(all_ranks) == 1


def _check_collectives_match(ranks, groups) -> None:
    """Within each group, every read member issues the same (type, size) sequence."""
    for pg, members in groups.items():
        present = [m for m in members if m in ranks]
        if len(present) < 2:
            continue
        sequences = {m: collective_sequence(ranks[m], pg) for m in present}
        first = sequences[present[0]]
        for m in present[1:]:
            assert sequences[m] == first, f"group {pg}: rank {m} differs from rank {present[0]}"


@pytest.mark.parametrize("sample", CHAKRA_SETS)
def test_chakra_sample_round_trips_through_json_dump_byte_identical(sample, out_dir):
    dump = out_dir / f"{sample}.dump.json"
    assert run_cli(SAMPLES / sample, "--to", "et-json", "-o", dump).code == 0
    strict_json(dump)
    again = out_dir / f"{sample}_again" / "workload"
    result = run_cli(dump, "--to", "chakra", "-o", again)
    assert result.code == 0, result.stderr
    originals = sorted((SAMPLES / sample).glob("*.et"))
    for original in originals:
        rank = original.name.split(".")[-2]
        copy = again.parent / f"workload.{rank}.et"
        assert copy.read_bytes() == original.read_bytes(), f"{copy} differs from {original}"


def test_same_input_gives_byte_identical_outputs(out_dir):
    sample = SAMPLES / "megatron_rank4_pp_tp2.log"
    a, b = out_dir / "det_a.json", out_dir / "det_b.json"
    assert run_cli(sample, "-o", a).code == 0
    assert run_cli(sample, "-o", b).code == 0
    assert a.read_bytes() == b.read_bytes()
