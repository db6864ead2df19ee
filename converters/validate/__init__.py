"""The validator: find what makes a network simulator stall or lie, and say where and why.

    findings = run_checks(trace, options)          # list[Finding]
    report = validate_trace(trace, options)        # findings + which checks ran + time
    gate(trace, options, diagnostics)              # before writing a Chakra set: refuse on errors

Checks are pure functions of the model (`converters.model`). Per-rank structural checks run
once per distinct node list (ranks may share one); cross-rank checks resolve each rank's
groups and peers through `Rank.group_of` / `Rank.peer_of`.

Definitions: "seq k" is the k-th collective a rank issues in a group (ascending node id, as
ASTRA-sim issues them); work "can never run" when a dependency chain leads to a missing node,
a self-dependency or a cycle. Inputs that record some ranks of a real run (Megatron and
OptimusPrime logs) may hold only some ranks: cross-rank checks then cover the ranks present,
and the dry run is skipped. A Chakra set converted from such logs records the ranks they held
(GlobalMetadata `source.ranks`): only ranks outside that record may be absent; a set that lost
a rank its logs had is E023 like any other. Output: findings grouped by check (each capped by
`--max-per-check`, all counted) and a summary line, or the same as JSON (`Report.json`).

Codes (stable once released; E = error, W = warning, I = note):

    graph        E001 duplicate node id          E002 dependency on a missing node
                 E003 node depends on itself     E004 dependency cycle
                 E005 work that can never run (waits on a cycle, missing node or self-dependency)
                 W006 ordering edge only in ctrl_deps (ASTRA-sim's old feeder ignores ctrl_deps)
    attributes   E010 attribute kind ASTRA-sim cannot read (FORMATS.md §1; it reads 0)
                 E011 required attribute missing E017 communication node marked is_cpu_op
    nodes        E012 comm size not positive     E013 collective type ASTRA-sim cannot simulate
                 W014 BROADCAST (only replayed)  E015 send/recv without peer or tag, or tag < 0
                 E016 send's src / recv's dst is not its own rank
                 E018 collective without a type  W019 compute of duration 0 without num_ops
    groups       E020 pg_name not defined in the group file
                 E021 rank communicates in a group it is not a member of
                 E022 group sizes inconsistent with the parallel configuration (world = TP·DP·PP)
                 E026 collective in a one-member group (ASTRA-sim never completes it; NCCL returns)
                 E027 ALL_GATHER of fewer bytes than its group has members (ASTRA-sim runs forever)
    rank-set     E023 rank missing from the set  I024 logs hold only some ranks of the job
                 W025 a Chakra set converted from such logs: a simulator cannot run it as is
    p2p          E034 unmatched send             E035 unmatched receive
                 E036 send/receive size mismatch E037 send/receive shape or dtype mismatch
                 E038 send or receive addressed to its own rank (ASTRA-sim aborts)
    collectives  E040 collective count mismatch  E041 collective type mismatch
                 E042 collective size mismatch   E043 member never issues the group's collectives
                 E044 two collectives in a different order   E045 collective dtype mismatch
    deadlock     E046 deadlock (wait-for chain or cycle from the scheduler's dry run)
                 I047 dry run not possible (scheduler unavailable or input not schedulable)
    pipeline     E050 op counts per stage differ from the microbatch count
                 E051 microbatch ids not contiguous   E052 backward before its forward
                 W053 order of forwards and backwards is not 1F1B (warmup min(P-s-1, M))
    timing       E060 ops on one rank overlap    W061 sub-operation outside its parent
                 E062 receive ends before its send starts (no clock offset explains it)
                 I063 clocks of two hosts differ W064 implied bandwidth not physically possible
    chrome       rules of `chrome_rules.check_chrome_trace` (FORMATS.md §6), for `.json` traces:
                 E080 not strict JSON  E081 pid < 1  E082 tid 0 or = pid  E083 process/thread unnamed
                 E084 bad ts/dur  E085 slices do not nest  E086 broken flow  E087 bad args
                 E089 any other rule
"""

from __future__ import annotations

import time
from typing import Callable

from ..diagnostics import Diagnostics, InputError
from ..model import ExecutionTrace
from ..options import Options
from .findings import ERROR, WARNING, Finding, Report

CODES = {
    "E001": "duplicate node id", "E002": "dangling dependency", "E003": "self dependency",
    "E004": "dependency cycle", "E005": "unreachable work", "W006": "edge only in ctrl_deps",
    "E010": "unreadable attribute kind", "E011": "missing attribute", "E017": "comm node on CPU",
    "E012": "comm size not positive", "E013": "collective not simulated", "W014": "broadcast only replayed",
    "E015": "send/recv without peer or tag", "E016": "send/recv endpoint is not its rank",
    "E018": "collective without type", "W019": "zero-length compute",
    "E020": "undefined group", "E021": "rank not in its group", "E022": "parallel sizes inconsistent",
    "E026": "one-member collective", "E027": "all-gather smaller than its group",
    "E023": "missing rank", "I024": "partial rank set", "W025": "partial Chakra set",
    "E034": "unmatched send", "E035": "unmatched recv", "E036": "p2p size mismatch",
    "E037": "p2p shape mismatch", "E038": "p2p to itself",
    "E040": "collective count mismatch", "E041": "collective type mismatch",
    "E042": "collective size mismatch", "E043": "missing participant", "E044": "collectives reordered",
    "E045": "collective dtype mismatch",
    "E046": "deadlock", "I047": "dry run skipped",
    "E050": "pipeline op count", "E051": "microbatch ids not contiguous", "E052": "backward before forward",
    "W053": "not 1F1B warmup",
    "E060": "overlapping ops", "W061": "sub-op outside parent", "E062": "receive before send",
    "I063": "clock offset", "W064": "implausible bandwidth",
    "E080": "not strict JSON", "E081": "bad pid", "E082": "bad tid", "E083": "unnamed track",
    "E084": "bad slice time", "E085": "slices do not nest", "E086": "broken flow", "E087": "bad args",
    "E089": "Perfetto import rule",
}

Check = Callable[..., "list[Finding] | None"]


def _checks() -> list[tuple[str, Check]]:
    from .collectives import check_collectives
    from .deadlock import check_deadlock
    from .graph import check_graph
    from .groups import check_groups, check_rank_set
    from .nodes import check_attributes, check_nodes
    from .p2p import check_p2p
    from .pipeline import check_pipeline
    from .timing import check_timing

    return [
        ("rank-set", check_rank_set),
        ("graph", check_graph),
        ("attributes", check_attributes),
        ("nodes", check_nodes),
        ("groups", check_groups),
        ("collectives", check_collectives),
        ("p2p", check_p2p),
        ("pipeline", check_pipeline),
        ("timing", check_timing),
        ("deadlock", check_deadlock),
    ]


def validate_trace(trace: ExecutionTrace, options: Options | None = None, dry_run: bool = True) -> Report:
    """Run every check that applies; a check returning None did not apply and is not counted."""
    from .context import build_context

    started = time.perf_counter()
    options = options or Options()
    ctx = build_context(trace, options)
    ran: list[str] = []
    findings: list[Finding] = []
    for name, check in _checks():
        if name == "deadlock" and not dry_run:
            continue
        found = check(ctx)
        if found is None:
            continue
        ran.append(name)
        findings.extend(found)
    return Report(findings, ran, len(trace.ranks), time.perf_counter() - started)


def run_checks(trace: ExecutionTrace, options: Options | None = None) -> list[Finding]:
    """Every finding about the trace, grouped by check in the order the checks run."""
    return validate_trace(trace, options).findings


def gate(trace: ExecutionTrace, options: Options | None, diagnostics: Diagnostics, dry_run: bool = True) -> list[Finding]:
    """Validate what is about to be written as a Chakra set.

    Errors stop the conversion with an InputError that names the first few findings, unless
    `options.force`; then (and for warnings) the findings become counted warnings.
    `dry_run=False` leaves out the scheduler's deadlock dry run (when the caller schedules anyway).
    """
    options = options or Options()
    findings = validate_trace(trace, options, dry_run=dry_run).findings
    errors = [f for f in findings if f.severity == ERROR]
    if errors and not options.force:
        shown = "; ".join(f.text() for f in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise InputError(None, f"refusing to write a Chakra set that ASTRA-sim would stall on: {len(errors)} "
                               f"validation error{'s' if len(errors) != 1 else ''}: {shown}{more}; "
                               "run `et-convert validate` on the input for all findings, or use --force")
    for f in findings:
        if f.code == "I024":
            warn_partial_set(f, diagnostics)
        if f.severity in (ERROR, WARNING):
            label = "error (written anyway, --force)" if f.severity == ERROR else "warning"
            diagnostics.warn(f"validate-{f.code}", f"validate {label}: {f.text()}" + " ({count} like it)", f.source or "")
    return findings


def warn_partial_set(note: Finding, diagnostics: Diagnostics) -> None:
    """What `gate` says of a log's partial rank set (I024): fine for a log, not for a simulator's input."""
    diagnostics.warn("validate-W025", f"validate warning: {CODES['W025']}: writing a Chakra set of "
                     f"{note.message.removeprefix('the input holds ').split(';')[0]}; a simulator would wait "
                     "forever for the absent ranks' messages and collectives")


__all__ = ["CODES", "Finding", "Report", "gate", "run_checks", "validate_trace"]
