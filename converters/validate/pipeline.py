"""Pipeline logs: per stage, the right number of each op and the 1F1B order.

Applies to models whose nodes name their step in `args["op"]` (Megatron op logs:
forward_step, backward_step, send_forward, ...). With P stages and M microbatches, stage s
runs M forwards and M backwards, each microbatch id once, F(m) before B(m), in the order
W = min(P−s−1, M) warmup forwards, M−W (F, B) pairs, W cooldown backwards; it sends and
receives one activation per microbatch across each stage boundary it has.
"""

from __future__ import annotations

from ..builders.pipeline import one_f_one_b, warmup_count
from .context import Context, SharedList
from .findings import Finding

CHECK = "pipeline"
STEP_OPS = ("forward_step", "backward_step")


def check_pipeline(ctx: Context) -> list[Finding] | None:
    if not any(node.args.get("op") in STEP_OPS for shared in ctx.shared for node in shared.nodes[:200] if node.args):
        return None
    p = ctx.trace.parallel
    if p.vpp > 1:
        return None  # interleaved 1F1B: other counts and order; not checked yet
    findings: list[Finding] = []
    for shared in ctx.shared:
        ops_of, steps = _ops_and_steps_by_iteration(shared)
        for iteration, ops in sorted(ops_of.items()):
            findings.extend(_check_stage(ctx, shared, iteration, ops, steps.get(iteration, []),
                                         max(p.pp, 1), max(p.microbatches, 1)))
    return findings


def _ops_and_steps_by_iteration(shared: SharedList) -> tuple[dict[int, dict[str, list]], dict[int, list]]:
    """In one pass over the nodes, in program order (sub-operations left out): iteration -> op
    name -> [(microbatch, node)] of the ops with a microbatch, and iteration -> ("F" or "B",
    microbatch, node) of its forward and backward steps (a log of 60 iterations was scanned
    once per iteration for its steps)."""
    ops: dict[int, dict[str, list]] = {}
    steps: dict[int, list] = {}
    for node in shared.nodes:
        if node.parent is not None or not node.args:
            continue
        op = node.args.get("op")
        if op is None:
            continue
        iteration = node.args.get("iteration", 0)
        if op in STEP_OPS:
            steps.setdefault(iteration, []).append(("F" if op == "forward_step" else "B", node.microbatch, node))
        if node.microbatch is not None:
            ops.setdefault(iteration, {}).setdefault(op, []).append((node.microbatch, node))
    return ops, steps


def _expected_ops(stages: int, stage: int) -> dict[str, bool]:
    """Which ops a stage runs once per microbatch (True) or never (False)."""
    first, last = stage == 0, stage == stages - 1
    return {
        "forward_step": True, "backward_step": True,
        "recv_forward": not first, "send_backward": not first,
        "send_forward": not last, "recv_backward": not last,
    }


def _check_stage(ctx: Context, shared: SharedList, iteration: int, ops: dict[str, list], order: list,
                 stages: int, microbatches: int) -> list[Finding]:
    """The findings of one stage's iteration: its `ops` and steps in `order`, from
    `_ops_and_steps_by_iteration`."""
    rank = shared.ranks[0]
    stage = rank.stage if rank.stage is not None else 0
    where = f"{_who(ctx, shared)}{f', iteration {iteration}' if iteration else ''}"
    findings: list[Finding] = []
    counts_ok = True
    for op, runs in _expected_ops(stages, stage).items():
        seen = ops.get(op, [])
        want = microbatches if runs else 0
        if len(seen) == want and (not runs or sorted(m for m, _ in seen) == list(range(want))):
            continue
        counts_ok = counts_ok and op not in STEP_OPS
        ids = [m for m, _ in seen]
        missing = [m for m in range(want) if m not in ids]
        extra = sorted({m for m in ids if m >= want or m < 0 or ids.count(m) > 1})
        node = seen[0][1] if seen else _step_of(ops, op, missing)
        if len(seen) != want:
            detail = f"; microbatch {_list(missing)} ha{'s' if len(missing) == 1 else 've'} none" if missing and len(seen) < want else ""
            more = f"; unexpected microbatch {_list(extra)}" if extra else ""
            findings.append(ctx.find(
                "E050", CHECK,
                f"{where}: {len(seen)} {op} for {microbatches} microbatch{'es' if microbatches != 1 else ''}"
                f" on {stages} stages (expected {want}){detail}{more}",
                ranks=shared.rank_ids, node=_first_missing_neighbour(seen, missing) or node, rank=rank,
                microbatch=missing[0] if missing else None))
        else:
            findings.append(ctx.find(
                "E051", CHECK, f"{where}: {op} microbatch ids are {_list(ids)}, not 0..{want - 1}",
                ranks=shared.rank_ids, node=node, rank=rank))
    if not counts_ok:
        return findings
    seen_forward: set[int] = set()
    for step, m, node in order:
        if step == "F":
            seen_forward.add(m)
        elif m not in seen_forward:
            findings.append(ctx.find(
                "E052", CHECK, f"{where}: backward of microbatch {m} runs before its forward",
                ranks=shared.rank_ids, node=node, rank=rank, microbatch=m))
            return findings
    expected = one_f_one_b(stages, stage, microbatches)
    actual = [(s, m) for s, m, _ in order]
    if actual != expected:
        k = next(i for i, (a, b) in enumerate(zip(actual, expected)) if a != b)
        warmup = next((i for i, (s, _) in enumerate(actual) if s == "B"), len(actual))
        w = warmup_count(stages, stage, microbatches)
        findings.append(ctx.find(
            "W053", CHECK,
            f"{where}: step {k} is {_step(actual[k])}, 1F1B runs {_step(expected[k])} there "
            f"({warmup} forwards before the first backward; 1F1B with P={stages}, M={microbatches} warms up with "
            f"min(P-s-1, M) = {w})",
            ranks=shared.rank_ids, node=order[k][2], rank=rank))
    return findings


def _first_missing_neighbour(seen: list, missing: list[int]):
    """The node just before the first missing microbatch, to point at where the gap is."""
    if not missing or not seen:
        return None
    before = [node for m, node in seen if m < missing[0]]
    return before[-1] if before else seen[0][1]


def _step_of(ops: dict[str, list], op: str, missing: list[int]):
    """When no `op` is left to point at: the step of the first missing microbatch that the
    send or receive belongs to (forward_step for `*_forward`), so the finding has a line."""
    if not missing:
        return None
    step = "forward_step" if "forward" in op else "backward_step"
    return next((node for m, node in ops.get(step, []) if m == missing[0]), None)


def _step(step: tuple[str, int]) -> str:
    return f"{step[0]}{step[1]}"


def _list(values: list[int]) -> str:
    return ",".join(map(str, values)) if values else "none"


def _who(ctx: Context, shared: SharedList) -> str:
    if len(shared.ranks) == 1:
        return ctx.rank_label(shared.ranks[0].rank)
    return shared.who()
