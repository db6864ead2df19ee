"""Random small multi-rank jobs survive Chakra and et-json unchanged, and `validate` finds exactly
the faults injected into them: one collective dropped, one size changed, one receive removed.

The jobs and faults are built by tests/validator_faults.py; benchmarks/validator_faults.py
measures the same over many seeds for the README's false-positive / false-negative rates.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from converters.diagnostics import Diagnostics
from converters.model import ExecutionTrace, NodeKind
from converters.options import Options
from converters.readers import chakra as chakra_reader
from converters.readers import et_json as et_json_reader
from converters.validate import run_checks
from converters.writers import chakra as chakra_writer
from converters.writers import et_json as et_json_writer
from validator_faults import FAULTS, inject, judge, random_job

SEEDS = st.integers(0, 2**32 - 1)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def through_chakra(trace: ExecutionTrace, out: Path) -> ExecutionTrace:
    chakra_writer.write(trace, out / "w", Options(), Diagnostics())
    return chakra_reader.load(sorted(out.glob("w.*.et")), Options(), Diagnostics())


def through_et_json(trace: ExecutionTrace, out: Path) -> ExecutionTrace:
    et_json_writer.write(trace, out / "w.json", Options(), Diagnostics())
    return et_json_reader.load([out / "w.json"], Options(), Diagnostics())


def program(trace: ExecutionTrace) -> dict[int, list[tuple]]:
    """Every rank's nodes as a simulator sees them (groups and peers resolved per rank)."""
    return {r: [(n.id, n.name, n.kind, n.duration_ns, sorted(n.deps), n.coll, n.size, rank.group_of(n),
                 rank.peer_of(n), n.tag if n.kind in (NodeKind.SEND, NodeKind.RECV) else None)
                for n in rank.nodes]
            for r, rank in sorted(trace.ranks.items())}


def used_groups(trace: ExecutionTrace) -> dict[int, tuple[int, ...]]:
    used = {rank.group_of(n) for rank in trace.ranks.values() for n in rank.nodes if n.group is not None}
    return {g: trace.groups[g].members for g in sorted(used)}


@PROPERTY
@given(seed=SEEDS)
def test_random_jobs_read_back_equal_from_chakra_and_et_json(seed, tmp_path_factory):
    trace = random_job(random.Random(seed))
    for back in (through_chakra(trace, tmp_path_factory.mktemp("et")),
                 through_et_json(trace, tmp_path_factory.mktemp("json"))):
        assert program(back) == program(trace)
        assert used_groups(back) == used_groups(trace)


@PROPERTY
@given(seed=SEEDS)
def test_a_clean_job_has_no_findings(seed, tmp_path_factory):
    trace = random_job(random.Random(seed))
    assert [f.text() for f in run_checks(trace, Options())] == []
    assert [f.text() for f in run_checks(through_chakra(trace, tmp_path_factory.mktemp("et")), Options())] == []


@PROPERTY
@given(seed=SEEDS, fault=st.sampled_from(FAULTS))
def test_validate_finds_exactly_the_injected_fault(seed, fault, tmp_path_factory):
    rng = random.Random(seed)
    trace = random_job(rng)
    expected = inject(trace, fault, rng)
    for checked in (trace, through_chakra(trace, tmp_path_factory.mktemp("et"))):
        findings = run_checks(checked, Options())
        found, extra = judge(findings, expected)
        assert found, f"{fault}: expected {expected}, got {[f.text() for f in findings]}"
        assert not extra, f"{fault}: findings beyond the fault: {[f.text() for f in extra]}"


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_changes_the_job_and_is_found(fault):
    """The first seed with something to break: one node fewer where a node is removed, and found."""
    for seed in itertools.count():
        rng = random.Random(seed)
        trace = random_job(rng)
        before = trace.node_count()
        expected = inject(trace, fault, rng)
        if expected is not None:
            break
    assert trace.node_count() == before - (fault != "change-size")
    found, extra = judge(run_checks(trace, Options()), expected)
    assert found and not extra
    assert judge([], expected) == (False, [])  # the judge fails a validator that finds nothing
