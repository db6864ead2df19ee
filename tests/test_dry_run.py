"""The validator's deadlock dry run (`scheduler.dry_run`, the loop without the timeline) stalls
exactly where `schedule` does: the same Deadlock (blocked ranks, wait-for chain, cycle, finished
ranks, message), the same InputError, or neither.

Checked on every deadlocking case the other tests build (each is run again with both compared
at every call) and on the random faulted jobs of tests/validator_faults.py; and E046's text
from `check_deadlock` is the one a full schedule gives.
"""

from __future__ import annotations

import inspect
import random

import pytest

import converters.scheduler as scheduler
import test_one_rank_groups
import test_scheduler
import test_validate
import test_validate_logs
import test_workload
from converters.api import read
from converters.diagnostics import InputError
from converters.model import CollType
from converters.options import Options
from converters.scheduler import Deadlock
from converters.validate import run_checks
from converters.validate.deadlock import as_astra_sim_runs_it
from helpers.scheduler_synth import coll, recv, send
from validate_cases import drop_node, pipeline_model
from validator_faults import FAULTS, inject, random_job

REAL_DRY_RUN = scheduler.dry_run
REAL_SCHEDULE = scheduler.schedule


def outcome(run, trace, options=None):
    try:
        run(trace, options)
    except Deadlock as stalled:
        return ("deadlock", str(stalled), stalled.blocked, stalled.chain, stalled.cycle, stalled.finished,
                stalled.truncated)
    except InputError as e:
        return ("input error", str(e))
    return ("ran",)


class Both:
    """Stand-ins for `dry_run` and `schedule` that run both and require the same outcome."""

    def __init__(self):
        self.deadlocks = 0

    def compare(self, trace, options):
        dry = outcome(REAL_DRY_RUN, trace, options)
        assert dry == outcome(REAL_SCHEDULE, trace, options)
        self.deadlocks += dry[0] == "deadlock"

    def dry_run(self, trace, options=None, network=None):
        self.compare(trace, options)
        return REAL_DRY_RUN(trace, options, network)

    def schedule(self, trace, options=None, network=None):
        self.compare(trace, options)
        return REAL_SCHEDULE(trace, options, network)


# The tests that make the dry run (or the scheduler) stall.
STALLING = [
    test_validate.test_cross_group_order_deadlock_found_by_dry_run_only,
    test_validate.test_drop_one_collective_on_one_rank,
    test_validate.test_text_report_groups_by_check_caps_and_summarises,
    test_validate_logs.test_optimus_sample_set_that_lost_a_rank_file_is_an_error,
    test_workload.test_the_dry_run_catches_a_deadlock,
    test_scheduler.test_collective_a_member_never_issues,
    test_scheduler.test_receive_without_send,
    test_scheduler.test_receive_before_send_on_both_sides_is_a_cycle,
    test_scheduler.test_collectives_in_crossed_order,
    test_scheduler.test_dependency_cycle_and_missing_dependency,
    test_scheduler.test_roles_are_split_until_ranks_of_one_class_see_the_same_classes,
    test_scheduler.test_shared_program_with_a_deadlock_reports_real_ranks,
    test_scheduler.test_a_long_wait_chain_is_cut,
]


@pytest.mark.parametrize("test", STALLING, ids=lambda t: t.__name__)
def test_the_dry_run_stalls_as_the_schedule_does_in_every_deadlock_test(test, monkeypatch, tmp_path):
    both = Both()
    monkeypatch.setattr(scheduler, "dry_run", both.dry_run)
    monkeypatch.setattr(scheduler, "schedule", both.schedule)
    monkeypatch.setattr(test_scheduler, "schedule", both.schedule)
    test(tmp_path) if "tmp_path" in inspect.signature(test).parameters else test()
    assert both.deadlocks  # the case did stall


def test_random_faulted_jobs_stall_alike():
    stalled = 0
    for seed in range(40):
        for fault in FAULTS:
            rng = random.Random(seed)
            trace = random_job(rng)
            inject(trace, fault, rng)
            trace, _ = as_astra_sim_runs_it(trace)
            dry = outcome(REAL_DRY_RUN, trace)
            assert dry == outcome(REAL_SCHEDULE, trace), (seed, fault)
            stalled += dry[0] == "deadlock"
    assert stalled > 20


def e046_both_ways(trace, monkeypatch) -> list:
    """E046 / I047 of the validator with the dry run, then the same with a full schedule: equal."""
    def findings():
        return [(f.code, f.message, f.ranks) for f in run_checks(trace, Options()) if f.code in ("E046", "I047")]

    dry = findings()
    with monkeypatch.context() as m:
        m.setattr(scheduler, "dry_run", lambda t, o=None, n=None: REAL_SCHEDULE(t, o, n))
        assert findings() == dry
    return dry


# The Chakra sets the one-member-group tests validate in a fresh interpreter.
ONE_RANK_SETS = {
    "one member": lambda tmp_path: test_one_rank_groups.one_member_set(tmp_path),
    "negative tag": lambda tmp_path: test_one_rank_groups.write_unchecked(
        tmp_path, {0: [recv(0, 1, 64, tag=-3), coll(1, CollType.ALL_REDUCE, 64, [0], group=1)],
                   1: [send(0, 0, 64, tag=-3)]}, {"tp": [0]}),
    "small gather": lambda tmp_path: test_one_rank_groups.write_unchecked(
        tmp_path, {r: [coll(0, CollType.ALL_GATHER, 3, group=1, name="gather")] for r in range(4)},
        {"tp": [0, 1, 2, 3]}),
}


@pytest.mark.parametrize("case", ONE_RANK_SETS)
def test_e046_of_collectives_astra_sim_never_completes_is_the_full_schedules(case, tmp_path, monkeypatch):
    prefix = ONE_RANK_SETS[case](tmp_path)
    trace = read(prefix.parent)
    assert [code for code, *_ in e046_both_ways(trace, monkeypatch)] == ["E046"]


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("name", ["tp all_reduce fwd mb0", "dp all_reduce", "send act mb1", "send grad mb2"])
def test_e046_text_is_the_full_schedules(shared, name, monkeypatch):
    trace = pipeline_model(tp=2, dp=2, pp=4, microbatches=3, shared=shared)
    drop_node(trace, 5, name)  # rank 5: a middle stage, which has every kind of node
    codes = [code for code, *_ in e046_both_ways(trace, monkeypatch)]
    # A shared list loses the node on every rank of the stage: then only some cases stall.
    assert "E046" in codes or shared
