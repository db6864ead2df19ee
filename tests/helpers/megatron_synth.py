"""A synthetic multi-rank Megatron run, written in exactly the samples' line format.

    from helpers.megatron_synth import write_run
    paths = write_run(tmp_path, stages=4, tp=2, microbatches=4)

Every rank runs Megatron's non-interleaved 1F1B program (warmup forwards, steady 1F1B with
fused `send_forward_recv_backward` / `send_backward_recv_forward` exchanges logged as two lines
with the same timestamp and duration, cooldown backwards, then DP grad all-reduce, embedding
all-reduce on the first and last stage, optimizer). Times come from one shared clock: sends are
eager, a receive ends when its message has arrived, so receives show pipeline bubbles. All
times are whole multiples of 0.01 ms, as the real tracer prints them.

`scaling=True` writes a scaling-mode run (FORMATS.md §2): compute ops say
`description=simulation`, the ranks run one after another on one clock (rank r+1 starts after
rank r ended), nothing waits for a peer and communication takes 0.02 ms.

Mutations for tests: `edit(rank, index, line) -> str | None` sees every line before it is
written and may change it or drop it (None). Ready-made edits: `drop_op`, `replace_in_op`,
`cut_line`, combined with `chain`; `cut_last={rank: chars}` cuts a rank's last line:

    write_run(tmp, edit=chain(drop_op(2, "recv_forward", 1), replace_in_op(3, "send_forward", 0, "512", "256")))
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TICKS_PER_MS = 100  # the clock's unit: 0.01 ms

Edit = Callable[[int, int, str], "str | None"]


@dataclass
class Timing:
    """Durations in ms of the synthetic program's parts."""

    forward: float = 12.0
    backward: float = 24.0
    get_batch: float = 0.5
    p2p: float = 0.4  # transfer time of one activation or gradient
    tp_allreduce: float = 0.3
    dp_allreduce: float = 5.0
    ep_allreduce: float = 0.8
    optimizer: float = 3.0


@dataclass
class _Op:
    op: str
    stage: int
    batch: int
    state: str
    start: int = 0  # ticks
    end: int = 0
    subs: list[tuple[int, int]] = field(default_factory=list)  # (start, end) ticks of TP all-reduces


def run_lines(
    stages: int = 4,
    tp: int = 2,
    dp: int = 1,
    microbatches: int = 4,
    *,
    layers: int = 2,
    iterations: int = 1,
    timing: Timing | None = None,
    subop_stamp: str = "end",
    embedding: bool = True,
    scaling: bool = False,
    start_ms: float = 1_000_000.0,
    seq: int = 512,
    hidden: int = 1024,
    dtype: str = "torch.float32",
    jitter: int = 0,
) -> dict[int, list[str]]:
    """rank -> its log lines (no newlines), in program order.

    `jitter` > 0: each TP all-reduce (sub-operation) starts up to that many ticks later than
    its stage's, drawn per rank, and ends as before. Without it the ranks of one stage log the
    same times, which measured ranks never do; with it no two ranks' graphs are equal.
    """
    timing = timing or Timing()
    programs = {s: _program(stages, s, microbatches, embedding) for s in range(stages)}
    clock = round(start_ms * TICKS_PER_MS)
    if scaling:
        per_rank = _scaling_run(programs, stages, tp, dp, iterations, timing, layers, clock)
    else:
        per_iteration = []
        for _ in range(iterations):
            timed = _simulate(programs, stages, timing, layers, clock)
            per_iteration.append(timed)
            clock = _last_end(timed) + 100
        per_rank = {
            t + tp * (d + dp * s): [op for timed in per_iteration for op in timed[s]]
            for s in range(stages) for d in range(dp) for t in range(tp)
        }
        if jitter:
            per_rank = {rank: _jittered(ops, random.Random(rank), jitter) for rank, ops in per_rank.items()}
    return {
        rank: [_line(rank, op, subop_stamp, scaling, seq, hidden, dtype, tp) for op in ops]
        for rank, ops in sorted(per_rank.items())
    }


def _scaling_run(programs, stages: int, tp: int, dp: int, iterations: int, timing: Timing, layers: int, clock: int):
    """rank -> its timed ops in scaling mode: one GPU runs the ranks one after another, each alone.

    Nothing waits for a peer and communication takes almost no time (0.02 ms, as in the real
    scaling-mode sample), so each rank's clock starts where the previous rank's ended.
    """
    alone = Timing(**{**vars(timing), "p2p": 0.02, "tp_allreduce": 0.02, "dp_allreduce": 0.02, "ep_allreduce": 0.02})
    ticks = _ticks(alone)
    per_rank: dict[int, list[_Op]] = {}
    for rank in range(tp * dp * stages):
        ops: list[_Op] = []
        for _ in range(iterations):
            ops += _run_alone(programs[rank // (tp * dp)], ticks, layers, clock)
            clock = ops[-1].end + 100
        per_rank[rank] = ops
    return per_rank


def _run_alone(program: list[list[_Op]], ticks: dict[str, int], layers: int, clock: int) -> list[_Op]:
    """One stage's program on its own: every step takes only its own time, nothing waits."""
    done = []
    for step in program:
        end = clock + _own_time(step, ticks)
        for op in step:
            op.start, op.end = clock, end
            if op.op in ("forward_step", "backward_step"):
                op.subs = _tp_allreduces(op, layers, ticks["tp_allreduce"])
            done.append(_copy(op))
        clock = end + 6  # host gap between ops
    return done


def _last_end(timed: dict[int, list[_Op]]) -> int:
    return max(op.end for ops in timed.values() for op in ops)


def _ticks(timing: Timing) -> dict[str, int]:
    return {k: max(1, round(v * TICKS_PER_MS)) for k, v in vars(timing).items()}


def write_run(
    directory: str | Path,
    stages: int = 4,
    tp: int = 2,
    dp: int = 1,
    microbatches: int = 4,
    *,
    one_file: bool = False,
    edit: Edit | None = None,
    cut_last: dict[int, int] | None = None,
    **options,
) -> list[Path]:
    """Write `rank<r>.log` per rank (or one concatenated `run.log`); return the paths, by rank.

    `cut_last` = {rank: characters kept}: that rank's last line is cut off (no newline after
    it), as when a run crashes while the tracer writes.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lines = run_lines(stages, tp, dp, microbatches, **options)
    if edit is not None:
        lines = {r: [new for i, line in enumerate(ls) if (new := edit(r, i, line)) is not None] for r, ls in lines.items()}
    for rank, keep in (cut_last or {}).items():
        if lines.get(rank):
            lines[rank][-1] = lines[rank][-1][:keep]
    if one_file:
        path = directory / "run.log"
        path.write_text("".join(line + "\n" for r in lines for line in lines[r]), encoding="utf-8")
        return [path]
    paths = []
    for rank, rank_lines in lines.items():
        path = directory / f"rank{rank}.log"
        text = "".join(line + "\n" for line in rank_lines)
        path.write_text(text[:-1] if rank in (cut_last or {}) else text, encoding="utf-8")
        paths.append(path)
    return paths


# ---------------------------------------------------------------- ready-made edits

def _is_op(line: str, op: str, batch: int | None) -> bool:
    head = line.split("(", 1)[0]
    return head.endswith(f":{op}") and (batch is None or f",batch_id={batch}," in line)


def drop_op(rank: int, op: str, batch: int | None = None) -> Edit:
    """Leave out rank's `op` lines (of one microbatch when `batch` is given)."""
    return lambda r, i, line: None if r == rank and _is_op(line, op, batch) else line


def replace_in_op(rank: int, op: str, batch: int | None, old: str, new: str) -> Edit:
    """Replace text in rank's `op` lines, e.g. a shape to make a size mismatch."""
    return lambda r, i, line: line.replace(old, new) if r == rank and _is_op(line, op, batch) else line


def cut_line(rank: int, index: int, keep: int = 60) -> Edit:
    """Cut rank's line `index` after `keep` characters (a garbled line when it is not the last)."""
    def edit(r: int, i: int, line: str) -> str:
        return line[:keep] if r == rank and i == index else line
    return edit


def chain(*edits: Edit) -> Edit:
    """Apply several edits in turn (a dropped line stays dropped)."""
    def edit(r: int, i: int, line: str):
        for one in edits:
            if line is None:
                return None
            line = one(r, i, line)
        return line
    return edit


# ---------------------------------------------------------------- the 1F1B program

def _program(stages: int, s: int, m: int, embedding: bool) -> list[list[_Op]]:
    """Steps of stage s; a step is one op, or the two halves of a fused exchange."""
    first, last = s == 0, s == stages - 1
    warmup = min(stages - s - 1, m)
    steady = m - warmup
    prog: list[list[_Op]] = []

    def add(state: str, *halves: tuple[str, int, bool]) -> None:
        real = [_Op(op, s, b, state) for op, b, keep in halves if keep]
        if real:
            prog.append(real)

    def forward(state: str, b: int) -> None:
        if first or last:
            add(state, ("get_batch", b, True))
        add(state, ("forward_step", b, True))

    for b in range(warmup):
        add("warmup", ("recv_forward", b, not first))
        forward("warmup", b)
        add("warmup", ("send_forward", b, not last))
    if steady:
        add("steady", ("recv_forward", warmup, not first))
    for i in range(steady):
        forward("steady", warmup + i)
        add("steady", ("send_forward", warmup + i, not last), ("recv_backward", i, not last))
        add("steady", ("backward_step", i, True))
        if i == steady - 1:
            add("steady", ("send_backward", i, not first))
        else:
            add("steady", ("send_backward", i, not first), ("recv_forward", warmup + i + 1, not first))
    for b in range(steady, m):
        add("cooldown", ("recv_backward", b, not last))
        add("cooldown", ("backward_step", b, True))
        add("cooldown", ("send_backward", b, not first))
    add("finalize", ("dp_allreduce", 0, True))
    add("finalize", ("ep_allreduce", 0, embedding and stages > 1 and (first or last)))
    add("finalize", ("optimizer_step", 0, True))
    return prog


def _simulate(programs, stages: int, timing: Timing, layers: int, clock: int) -> dict[int, list[_Op]]:
    """Give every op a start and end on one clock: eager sends, receives wait for arrival."""
    ticks = _ticks(timing)
    arrival: dict[tuple[str, int, int], int] = {}  # (message, batch, destination stage) -> ready time
    now = {s: clock for s in range(stages)}
    pos = {s: 0 for s in range(stages)}
    posted: set[tuple[int, int]] = set()
    done: dict[int, list[_Op]] = {s: [] for s in range(stages)}
    while any(pos[s] < len(programs[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while pos[s] < len(programs[s]):
                step = programs[s][pos[s]]
                if (s, pos[s]) not in posted:  # sends leave as soon as the step begins
                    for op in step:
                        if op.op.startswith("send_"):
                            message, dest = ("act", s + 1) if op.op == "send_forward" else ("grad", s - 1)
                            arrival[(message, op.batch, dest)] = now[s] + ticks["p2p"]
                    posted.add((s, pos[s]))
                    progressed = True
                end = now[s] + _own_time(step, ticks)
                blocked = False
                for op in step:
                    if op.op.startswith("recv_"):
                        key = ("act" if op.op == "recv_forward" else "grad", op.batch, s)
                        if key not in arrival:
                            blocked = True
                        else:
                            end = max(end, arrival[key])
                if blocked:
                    break
                for op in step:
                    op.start, op.end = now[s], end
                    if op.op in ("forward_step", "backward_step"):
                        op.subs = _tp_allreduces(op, layers, ticks["tp_allreduce"])
                    done[s].append(_copy(op))
                now[s] = end + 6  # host gap between ops (0.06 ms, as in the real sample)
                pos[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError("synthetic 1F1B program deadlocked (bug in the helper)")
    return done


def _own_time(step: list[_Op], ticks: dict[str, int]) -> int:
    own = {
        "forward_step": ticks["forward"], "backward_step": ticks["backward"], "get_batch": ticks["get_batch"],
        "dp_allreduce": ticks["dp_allreduce"], "ep_allreduce": ticks["ep_allreduce"], "optimizer_step": ticks["optimizer"],
    }
    return max(own.get(op.op, ticks["p2p"]) for op in step)


def _tp_allreduces(op: _Op, layers: int, length: int) -> list[tuple[int, int]]:
    """Two TP all-reduces per layer, spread evenly over the step: the first starts with it, the
    last ends with it (as in the real sample), so only one reading of their stamps fits."""
    count = 2 * layers
    room = op.end - op.start - length
    if count == 1:
        return [(op.end - length, op.end)]
    return [(op.start + room * k // (count - 1), op.start + room * k // (count - 1) + length) for k in range(count)]


def _jittered(ops: list[_Op], rng: random.Random, jitter: int) -> list[_Op]:
    """Copies of `ops` whose sub-operations start 0..jitter ticks later (shorter, still inside
    their step, still ending when they did)."""
    return [_Op(op.op, op.stage, op.batch, op.state, op.start, op.end,
                [(start + rng.randint(0, min(jitter, end - start - 1)), end) for start, end in op.subs])
            for op in ops]


def _copy(op: _Op) -> _Op:
    return _Op(op.op, op.stage, op.batch, op.state, op.start, op.end, list(op.subs))


# ---------------------------------------------------------------- formatting

def _ms(ticks: int) -> str:
    """Milliseconds as Python's float repr prints them (4509232664.1, 0.57)."""
    return repr(ticks / TICKS_PER_MS)


def _line(rank: int, op: _Op, stamp: str, scaling: bool, seq: int, hidden: int, dtype: str, tp: int) -> str:
    p2p = op.op.startswith(("send_", "recv_"))
    description = "None"
    group_kind, shape, op_dtype = "None", "None", "None"
    if p2p:
        group_kind, shape, op_dtype = "pp", f"[{seq}, 1, {hidden}]", dtype
    elif op.op == "dp_allreduce":
        group_kind, shape, op_dtype = "dp", f"[{12 * hidden * hidden // tp}]", dtype
        description = "model_chunk.finish_grad_sync(), All-reduce / reduce-scatter across DP replicas"
    elif op.op == "ep_allreduce":
        group_kind, shape, op_dtype = "ep", f"[{4 * hidden * hidden // tp}]", dtype
        description = "Embedding grads all-reduce (first and last stage)"
    if scaling and op.op in ("get_batch", "forward_step", "backward_step", "optimizer_step"):
        description = "simulation"
    subs = [_sub_op(op, start, end, stamp, seq, hidden, dtype) for start, end in op.subs]
    return (
        f"rank:{rank}:{op.op}(stage_id={op.stage},batch_id={op.batch},mg_state={op.state},"
        f"duration={_ms(op.end - op.start)},description={description},group_kind={group_kind},"
        f"input__shape={shape},input__dtype={op_dtype},timestamp={_ms(op.end)},sub_operations={subs!r})"
    )


def _sub_op(op: _Op, start: int, end: int, stamp: str, seq: int, hidden: int, dtype: str) -> str:
    func = "linear_fwd" if op.op == "forward_step" else "normlinear_bwd"
    return (
        f"trace_src_func=allreduce,duration={_ms(end - start)},timestamp={_ms(end if stamp == 'end' else start)},"
        f"input__shape=[{seq * 2}, {hidden}],input__dtype={dtype},func_name={func},group=tp,comm_func=allreduce"
    )
