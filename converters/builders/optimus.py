"""OptimusPrime pipeline logs -> a modelled per-stage timeline (FORMATS.md §3).

The log has per-stage, per-layer forward totals for each step and the measured ms/batch, and
nothing else: no backward or optimizer times, no transfer sizes or times, no timestamps, no
schedule. So one step is modelled, and every modelling choice is labelled in
`trace.assumptions` and in the nodes' args:

- forward per microbatch and layer = the step's layer total ÷ microbatches (GAS);
- backward = `--bwd-factor` × forward (default 2), layers in reverse order;
- the pipeline order of `--schedule` (1f1b or gpipe) on every stage;
- one SEND/RECV per microbatch between adjacent stages (activations forward, gradients back),
  `--p2p-bytes` each (default 4 MiB, labelled), carrying the FX graph's values for that hop;
- start times are placed here by a small simulation of that pipeline (eager sends, a receive
  ends when its message has arrived), so the output does not depend on the scheduler; the
  trace's timing is "modelled" (never "measured"), and the measured ms/batch is kept in the
  metadata beside the modelled iteration time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import Diagnostics, InputError, UsageError
from ..model import ExecutionTrace, Node, NodeKind, Parallel, Rank
from ..options import Options
from ..readers.optimus_log import LayerTime, OptimusLog, StageStep, read_log
from .pipeline import schedule_for

DEFAULT_P2P_BYTES = 4 * 1024 * 1024  # one microbatch's hidden states: 1 x 1024 tokens x 2048 x bf16
P2P_BYTES_PER_NS = 25  # 25 GB/s
P2P_LATENCY_NS = 10_000  # 10 µs
MAX_MICROBATCHES = 1 << 16


def load(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    if len(paths) != 1:
        raise InputError(str(paths[1]), "give one OptimusPrime log at a time (it already holds every rank's output)")
    return build(read_log(paths[0], diagnostics, strict=options.strict), options, diagnostics)


def build(log: OptimusLog, options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    stage_ranks = _stage_ranks(log)
    stages = len(stage_ranks)
    microbatches = log.config.get("gas")
    if not microbatches:
        raise InputError(log.file, "no '> GAS: N' line (or GAS 0): the number of microbatches is unknown")
    if microbatches > MAX_MICROBATCHES:
        raise InputError(log.config_where["gas"], f"GAS {microbatches} is more microbatches than et-convert models ({MAX_MICROBATCHES})")
    complete = _complete_steps(log, stages)
    step, why = _choose_step(log, complete, options)
    if options.bwd_factor <= 0:
        raise UsageError(f"--bwd-factor must be above 0, got {options.bwd_factor}")
    try:
        orders = {s: schedule_for(options.schedule, stages, s, microbatches) for s in range(stages)}
    except ValueError as e:
        raise UsageError(str(e)) from None

    trace = ExecutionTrace()
    tp, dp = log.config.get("tp", 1), log.config.get("dp", 1)
    trace.parallel = Parallel(
        world=log.config.get("world", sum(len(r) for r in stage_ranks.values())),
        tp=tp, dp=dp, pp=stages, microbatches=microbatches,
    )
    trace.units = {"time": "ms (per-layer forward totals of a step, summed over its microbatches)"}
    p2p = _P2p.from_options(options)
    values = stage_values(log, stages)
    labels = _Labels(options.schedule, options.bwd_factor, p2p, relayed_values(log, stages))
    model = _Model(trace, log, complete[step], orders, microbatches, labels, values)
    for stage, ranks in stage_ranks.items():
        for index, rank_id in enumerate(ranks):
            peers = {d: stage_ranks[stage + d][index % len(stage_ranks[stage + d])] for d in (-1, 1) if stage + d in stage_ranks}
            trace.ranks[rank_id] = model.rank(rank_id, stage, index, peers)
    end = place(trace, p2p)
    trace.timing = "modelled"  # start times come from the model above, not from the log
    _label(trace, log, step, why, microbatches, options, labels, values, end)
    return trace


# ---------------------------------------------------------------- what the log says

def _stage_ranks(log: OptimusLog) -> dict[int, list[int]]:
    stage_ranks = dict(log.stage2rank)
    if not stage_ranks:  # fall back to the step headers' [rank:R stage:S]
        for s in log.steps:
            stage_ranks.setdefault(s.stage, [])
            if s.rank not in stage_ranks[s.stage]:
                stage_ranks[s.stage].append(s.rank)
    if not stage_ranks:
        raise InputError(log.file, "no stage2rank line and no '[rank:R stage:S] ... forward time' blocks: nothing to model")
    seen: dict[int, int] = {}
    for stage, ranks in stage_ranks.items():
        for rank in ranks:
            if rank < 0 or rank in seen:
                where = log.file
                raise InputError(where, f"stage2rank puts rank {rank} on stage {stage}" + (
                    f" and on stage {seen[rank]}" if rank in seen else "; ranks are numbered from 0"))
            seen[rank] = stage
    if sorted(stage_ranks) != list(range(len(stage_ranks))):
        raise InputError(log.file, f"stages {sorted(stage_ranks)} are not 0..{len(stage_ranks) - 1}")
    counts = {len(ranks) for ranks in stage_ranks.values()}
    if len(counts) > 1:
        raise InputError(log.file, f"stage2rank gives stages different numbers of ranks ({sorted(counts)}); expected the same on every stage")
    pp = log.config.get("pp")
    if pp is not None and pp != len(stage_ranks):
        raise InputError(log.config_where["pp"], f"PP is {pp} but stage2rank lists {len(stage_ranks)} stages")
    return dict(sorted(stage_ranks.items()))


def _complete_steps(log: OptimusLog, stages: int) -> dict[int, dict[int, StageStep]]:
    """step -> {stage: its block}, for the steps every stage logged layer times for."""
    by_step: dict[int, dict[int, StageStep]] = {}
    for block in log.steps:
        if block.layers:
            by_step.setdefault(block.step, {}).setdefault(block.stage, block)
    complete = {step: blocks for step, blocks in sorted(by_step.items()) if set(range(stages)) <= blocks.keys()}
    if not complete:
        raise InputError(log.file, f"no step has per-layer forward times for all {stages} stages")
    return complete


def _choose_step(log: OptimusLog, complete: dict, options: Options) -> tuple[int, str]:
    if options.step is not None:
        if options.step not in complete:
            raise InputError(log.file, f"--step {options.step}: the log has forward times for steps {_ranges(list(complete))}")
        return options.step, "chosen with --step"
    timed = sorted((log.ms_per_batch[s][0], s) for s in complete if s in log.ms_per_batch)
    if timed:
        ns, step = timed[(len(timed) - 1) // 2]
        return step, f"its ms/batch ({ns / 1e6:.2f} ms) is the median of the {len(timed)} logged steps; --step picks another"
    steps = list(complete)
    return steps[(len(steps) - 1) // 2], "the middle logged step (no ms/batch lines); --step picks another"


def _ranges(numbers: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(parts)


def stage_values(log: OptimusLog, stages: int) -> dict[int, list[str]]:
    """stage -> the FX values it sends to the next stage, relayed values included.

    A value produced by stage p and last used by stage c travels p -> p+1 -> ... -> c, so every
    stage in between forwards it (FORMATS.md §3, `special_nodes`).
    """
    return {hop: [value for value, _ in sent] for hop, sent in _hop_values(log, stages).items()}


def relayed_values(log: OptimusLog, stages: int) -> dict[int, list[str]]:
    """stage -> the values it forwards for an earlier stage (made before it, needed after it)."""
    return {hop: [value for value, made in sent if made < hop] for hop, sent in _hop_values(log, stages).items()}


def _hop_values(log: OptimusLog, stages: int) -> dict[int, list[tuple[str, int]]]:
    """stage -> (value, the stage that made it) for every value it sends to the next stage."""
    producer: dict[str, int] = {}
    last_use: dict[str, int] = {}
    for node in log.fx.values():
        stage = _submodule_stage(node.name) if node.op == "call_module" else None
        if stage is not None:
            for value in node.inputs:
                last_use[value] = max(last_use.get(value, stage), stage)
    for node in log.fx.values():
        stage = _submodule_stage(node.getitem_of or "")
        if stage is not None:
            producer[node.name] = stage
    sent: dict[int, list[tuple[str, int]]] = {s: [] for s in range(stages - 1)}
    for value, made in producer.items():
        for hop in range(made, min(last_use.get(value, made), stages - 1)):
            sent[hop].append((value, made))
    return sent


def _submodule_stage(name: str) -> int | None:
    """`submod_3` -> 3: the FX split names each stage's submodule after its stage."""
    match = re.fullmatch(r"submod_(\d+)", name)
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------- the modelled program

@dataclass(frozen=True)
class _P2p:
    size: int
    basis: str

    @classmethod
    def from_options(cls, options: Options) -> "_P2p":
        if options.p2p_bytes is not None:
            if options.p2p_bytes <= 0:
                raise UsageError(f"--p2p-bytes must be above 0, got {options.p2p_bytes}")
            return cls(options.p2p_bytes, "--p2p-bytes")
        return cls(DEFAULT_P2P_BYTES, "assumed default (1 x 1024 tokens x 2048 hidden x 2 bytes); set --p2p-bytes")

    @property
    def transfer_ns(self) -> int:
        return P2P_LATENCY_NS + -(-self.size // P2P_BYTES_PER_NS)


@dataclass(frozen=True)
class _Labels:
    """The modelling choices the log is silent about, labelled on the nodes they shape."""

    schedule: str
    bwd_factor: float
    p2p: _P2p
    relayed: dict[int, list[str]]  # hop -> values relayed on it for an earlier stage

    @property
    def schedule_basis(self) -> str:
        return f"{self.schedule} (assumed: the log does not say which ran; --schedule)"

    def p2p_args(self, hop: int) -> dict:
        args = {
            "size_basis": self.p2p.basis,
            "time_basis": f"modelled: {P2P_BYTES_PER_NS} GB/s + {P2P_LATENCY_NS // 1000} us latency",
        }
        if self.relayed.get(hop):
            args["relayed"] = ", ".join(self.relayed[hop])
            args["relay_size_basis"] = (
                "assumed: relayed values ride in this one transfer of the size above (their sizes are not in the log)"
            )
        return args


@dataclass
class _Model:
    trace: ExecutionTrace
    log: OptimusLog
    blocks: dict[int, StageStep]
    orders: dict
    microbatches: int
    labels: _Labels
    values: dict[int, list[str]]

    def rank(self, rank_id: int, stage: int, index: int, peers: dict[int, int]) -> Rank:
        tp = max(1, self.trace.parallel.tp)
        rank = Rank(rank_id, coords={"tp": index % tp, "dp": index // tp, "pp": stage}, source=Path(self.log.file).name)
        layers = self.blocks[stage].layers
        for direction, m in self.orders[stage]:
            if direction == "F":
                if -1 in peers:
                    self._p2p(rank, NodeKind.RECV, peers[-1], m, 0, stage - 1)
                for layer in layers:
                    self._compute(rank, layer, m, stage, "forward")
                if 1 in peers:
                    self._p2p(rank, NodeKind.SEND, peers[1], m, 0, stage)
            else:
                if 1 in peers:
                    self._p2p(rank, NodeKind.RECV, peers[1], m, 1, stage)
                for layer in reversed(layers):
                    self._compute(rank, layer, m, stage, "backward")
                if -1 in peers:
                    self._p2p(rank, NodeKind.SEND, peers[-1], m, 1, stage - 1)
        return rank

    def _append(self, rank: Rank, node: Node) -> None:
        node.id = len(rank.nodes)
        node.deps = [node.id - 1] if rank.nodes else []
        rank.nodes.append(node)

    def _compute(self, rank: Rank, layer: LayerTime, m: int, stage: int, direction: str) -> None:
        forward = (layer.total_ns + self.microbatches // 2) // self.microbatches
        args = {
            "stage": stage, "microbatch": m, "layer": layer.name, "pass": direction,
            "step_forward_total_ms": layer.total_ns / 1e6, "ops": layer.ops,
            "schedule": self.labels.schedule_basis,
        }
        if direction == "forward":
            duration = forward
            args["time_basis"] = f"measured: step total / {self.microbatches} microbatches"
        else:
            factor = self.labels.bwd_factor
            duration = round(forward * factor)
            args["time_basis"] = f"assumed: {factor:g} x forward (no backward times in the log)"
            args["bwd_factor"] = factor
        short = "fwd" if direction == "forward" else "bwd"
        self._append(rank, Node(
            0, f"layer[{layer.name}] {short} mb{m}", NodeKind.COMPUTE, duration_ns=max(1, duration),
            microbatch=m, source=layer.where, args=args,
        ))

    def _p2p(self, rank: Rank, kind: NodeKind, peer: int, m: int, direction: int, hop: int) -> None:
        """A transfer on hop `hop` (stage hop -> hop+1); direction 0 activations, 1 gradients."""
        what = "activations" if direction == 0 else "gradients"
        verb = "send" if kind == NodeKind.SEND else "recv"
        args = {
            "stage": rank.coords["pp"], "microbatch": m, "peer_stage": hop + (1 if rank.coords["pp"] == hop else 0),
            "carries": what, **self.labels.p2p_args(hop), "schedule": self.labels.schedule_basis,
        }
        if self.values.get(hop):
            args["values"] = ", ".join(self.values[hop])
        self._append(rank, Node(
            0, f"{verb} {what} mb{m}", kind, size=self.labels.p2p.size, peer=peer, tag=2 * m + direction,
            microbatch=m, source=self.blocks[rank.coords["pp"]].where, args=args,
        ))


def place(trace: ExecutionTrace, p2p: _P2p) -> int:
    """Start times for every node: ranks run their programs, sends are eager, receives wait.

    Returns the modelled iteration end (ns).
    """
    arrival: dict[tuple[int, int, int], int] = {}
    clock = {r: 0 for r in trace.ranks}
    pos = {r: 0 for r in trace.ranks}
    remaining = sum(len(rank.nodes) for rank in trace.ranks.values())
    while remaining:
        progressed = False
        for rank in trace.sorted_ranks():
            r = rank.rank
            while pos[r] < len(rank.nodes):
                node = rank.nodes[pos[r]]
                start = clock[r]
                if node.kind == NodeKind.SEND:
                    node.duration_ns = p2p.transfer_ns
                    arrival[(r, node.peer, node.tag)] = start + p2p.transfer_ns
                elif node.kind == NodeKind.RECV:
                    ready = arrival.get((node.peer, r, node.tag))
                    if ready is None:
                        break
                    node.duration_ns = max(ready - start, 0)
                    node.args["wait_ns"] = max(ready - start - p2p.transfer_ns, 0)
                node.start_ns = start
                clock[r] = start + node.duration_ns
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise InputError(None, "the modelled pipeline deadlocks (internal error: schedule and transfers disagree)")
    return max(clock.values(), default=0)


def _label(trace, log, step, why, microbatches, options, labels, values, end) -> None:
    measured = log.ms_per_batch.get(step)
    p2p = labels.p2p
    trace.metadata.update({
        "step": step,
        "steps_logged": _ranges(sorted({b.step for b in log.steps})),
        "schedule": options.schedule,
        "bwd_factor": options.bwd_factor,
        "p2p_bytes": p2p.size,
        "modelled_iteration_ms": end / 1e6,
        "timing_note": "start times modelled by et-convert's pipeline model, not measured",
        "stage_values": {str(s): v for s, v in values.items()},
    })
    if measured is not None:
        trace.metadata["measured_ms_per_batch"] = measured[0] / 1e6
        trace.metadata["measured_ms_per_batch_source"] = measured[1]
        # what stats and the timeline writers set beside a modelled iteration (see stats.measured_reference)
        trace.metadata["measured_iteration"] = {"ns": measured[0], "what": f"ms/batch of step {step}", "source": measured[1]}
    if log.special_nodes:
        trace.metadata["special_nodes"] = {k: list(v) for k, v in sorted(log.special_nodes.items())}
    trace.assume(f"step {step} modelled: {why}")
    trace.assume(f"forward time per microbatch = the step's per-layer total / {microbatches} microbatches (GAS)")
    trace.assume(f"backward time = {options.bwd_factor:g} x forward (no backward times in the log; --bwd-factor)")
    trace.assume(f"pipeline schedule {options.schedule} (the log does not say which ran; --schedule)")
    trace.assume(
        f"stage-to-stage transfers of {p2p.size} bytes per microbatch each way ({p2p.basis}), "
        f"{P2P_BYTES_PER_NS} GB/s + {P2P_LATENCY_NS // 1000} us each (not in the log)"
    )
    if any(labels.relayed.values()):
        trace.assume("values needed beyond the next stage (special_nodes) are relayed hop by hop inside each "
                     "hop's one transfer; their sizes are not in the log")
    trace.assume("optimizer step, data loading and loss are not modelled (not in the log)")
    if trace.parallel.tp > 1 or trace.parallel.dp > 1:
        trace.assume("tensor- and data-parallel collectives are not in the log and not modelled")
    gap = "" if measured is None else f"; measured ms/batch {measured[0] / 1e6:.2f} ms"
    trace.assume(f"start times are placed by this model, not measured: modelled iteration {end / 1e6:.2f} ms{gap}")
