"""Workload tables -> the model: SimAI/AICB (`simai`), ASTRA-sim 1.0 text (`astra-text`), NeuSight.

Each loader runs its reader, decides what every row means for every rank (groups, stages,
microbatches, sizes) and builds the node graphs with `converters.builders.transformer`.

Ranks with the same role share one node list built for a representative rank; the others
map the representative's group ids and peers to their own (`Rank.group_map`/`peer_map`).
Every choice the input does not settle is written with `trace.assume`.
"""

from __future__ import annotations

from pathlib import Path
from ..diagnostics import Diagnostics, InputError, UsageError
from ..model import CollType, ExecutionTrace, Parallel
from ..options import Options
from ..readers import workload_text
from ..readers.workload_text import Comm, Row, Workload
from .layout import Layout, add_layout_groups
from .transformer import (
    Coll, Graph, Op, StagePlan, data_passes, dlrm_passes, inference_passes, micro_passes,
    recompute_plan, share_graphs, stage_program, transformer_passes,
)

COLL_TYPES = {
    "ALLREDUCE": CollType.ALL_REDUCE,
    "ALLGATHER": CollType.ALL_GATHER,
    "REDUCESCATTER": CollType.REDUCE_SCATTER,
    "ALLTOALL": CollType.ALL_TO_ALL,
    "BROADCAST": CollType.BROADCAST,  # only with --keep-broadcast
}
ALL_GATHER_CONVENTION = (
    "ALL_GATHER sizes are the per-rank input, as ASTRA-sim reads them: the input's total "
    "gathered bytes divided by the group size"
)
# More ranks than this is a typo or a broken file, not a job (and would exhaust memory).
MAX_RANKS = 1 << 20
ASTRA_ALL_GATHER_CONVENTION = (
    "ALL_GATHER sizes are the per-rank input, as written in the ASTRA-sim 1.0 file (kept as they are, "
    "as ASTRA-sim 1.0 and chakra_converter Text do)"
)


def _one_path(paths: list[Path], fmt: str) -> Path:
    if len(paths) != 1:
        raise UsageError(f"{fmt} takes one workload file, got {len(paths)}")
    return paths[0]


def _check_options(options: Options) -> None:
    """Option values this module reads; the CLI passes them through unchecked."""
    if options.mode not in ("stage", "simai"):
        raise UsageError(f"unknown --mode {options.mode!r}; expected stage or simai")
    if options.schedule not in ("1f1b", "gpipe"):
        raise UsageError(f"unknown --schedule {options.schedule!r}; expected 1f1b or gpipe")
    if options.passes < 1:
        raise UsageError(f"--passes must be at least 1, got {options.passes}")


# ---------------------------------------------------------------- shared helpers


class Sizes:
    """Turns a row's collective into a `Coll` for a group kind of known size."""

    def __init__(self, group_sizes: dict[str, int], path: str, diagnostics: Diagnostics, trace: ExecutionTrace,
                 gathered_total: bool = True):
        self.group_sizes = group_sizes
        # SimAI/AICB write an ALL_GATHER's total gathered bytes; ASTRA-sim 1.0 text files already
        # hold the per-rank input (its workload layer hands the size to the same collective code).
        self.gathered_total = gathered_total
        self.path = path
        self.diagnostics = diagnostics
        self.trace = trace

    def coll(self, comm: Comm, kind: str, line: int, blocking: bool = True, min_size: int = 0) -> Coll | None:
        """None for a group of one rank: there is nobody to talk to."""
        members = self.group_sizes[kind]
        if members == 1:
            name = kind.split(":")[0]
            self.diagnostics.warn(
                f"lonely:{name}",
                f"{self.path}: left out {{count}} collectives of one-member {name} groups (first at line {{first}})",
                str(line))
            self.trace.assume(f"Collectives in one-member {name} groups are left out (nobody to exchange with).")
            return None
        size = max(comm.size, min_size)
        ctype = COLL_TYPES[comm.kind]
        if ctype == CollType.ALL_GATHER and self.gathered_total:
            self.diagnostics.warn_assumption(ALL_GATHER_CONVENTION + ".", self.path)  # it changes sizes
            if size % members:
                self.diagnostics.warn(
                    "allgather-rounding",
                    f"{self.path}: {{count}} ALLGATHER sizes are not a multiple of their group size; "
                    f"rounded the per-rank share up (first at line {{first}})", str(line))
            size = -(-size // members)
        label = comm.kind + (f"_{comm.scope}" if comm.scope else "")
        return Coll(ctype, kind, size, label, blocking)


def read_broadcasts(w: Workload, keep: bool, trace: ExecutionTrace, diagnostics: Diagnostics) -> None:
    """BROADCAST cells (AICB writes them): no collective, as SimAI and ASTRA-sim 1.0 read an
    unknown keyword, unless `keep` (--keep-broadcast) makes them Chakra BROADCAST nodes for
    simulators that replay them."""
    cells = [(row, column) for row in w.rows for column in ("fwd_comm", "ig_comm", "wg_comm")
             if getattr(row, column) is not None and getattr(row, column).kind == workload_text.BROADCAST]
    if not cells:
        return
    if keep:
        trace.assume(f"{len(cells)} BROADCAST collectives are written as Chakra BROADCAST nodes (--keep-broadcast); "
                     "SimAI and ASTRA-sim 1.0 would not simulate them.")
        return
    for row, column in cells:
        setattr(row, column, None)
    sentence = ("BROADCAST collectives are converted as no collective, as SimAI and ASTRA-sim 1.0 read them "
                "(an unknown keyword to both); their rows' compute times are kept (--keep-broadcast writes "
                "them as Chakra BROADCAST nodes).")
    trace.assume(sentence)
    diagnostics.warn("broadcast", f"{w.path}: converted {{count}} BROADCAST collectives as no collective, as SimAI "
                                  "and ASTRA-sim 1.0 do; --keep-broadcast keeps them (first at line {first})",
                     str(cells[0][0].line), count=len(cells))


def warn_row_defects(w: Workload, diagnostics: Diagnostics, placeholder_is_missing: bool) -> None:
    """Size-0 collectives (skipped) and placeholder compute times: one counted warning each."""
    zero: dict[tuple[str, str], list[Row]] = {}  # (comm type as written, column) -> rows, in file order
    for row in w.rows:
        for column, token in zip(row.zero_size, row.zero_kinds):
            zero.setdefault((token, column), []).append(row)
    if zero:
        parts = []
        for (token, column), rows in zero.items():
            names = list(dict.fromkeys(r.name for r in rows))
            which = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            parts.append(f"{len(rows)} {token} in the {column} column of {which}")
        first = min(rows[0].line for rows in zero.values())
        diagnostics.warn(
            "zero-size",
            f"{w.path}: skipped {{count}} collectives of size 0 ({'; '.join(parts)}; first at line {{first}})",
            str(first), count=sum(len(rows) for rows in zero.values()))
    if placeholder_is_missing:
        placeholders = [(row.line, value) for row in w.rows
                        for value in (row.fwd_compute, row.ig_compute, row.wg_compute) if value == 1]
        if placeholders:
            diagnostics.warn(
                "placeholder",
                f"{w.path}: {{count}} compute times are the placeholder 1 ns (not measured); "
                f"left them out (first at line {{first}})", str(placeholders[0][0]), count=len(placeholders))


def _ns(value: int, tick_ns: float) -> int:
    return int(round(value * tick_ns))


# ---------------------------------------------------------------- SimAI / AICB


PROLOGUE_PREFIXES = ("grad_", "embedding_grads", "moe_grad_norm")
EPILOGUE_PREFIXES = ("cross_entropy", "optimizer")
# Rows of the microbatch block that only one stage holds; the others are transformer layer rows.
FIRST_STAGE_ONLY = ("embedding_layer",)
LAST_STAGE_ONLY = ("final_column", "cross_entropy")
# Megatron's end of an iteration, as (row name prefix, what it is). Despite their names, AICB
# sizes moe_grad_norm2 as a reduce-scatter of the expert gradients (4 bytes per expert
# parameter) and moe_grad_norm1 as an all-gather of the expert parameters (2 bytes each), the
# expert twins of grad_param_comm and grad_gather, so they run beside those. The gradients are
# reduced before the optimizer's grad-norm all-reduces read them. Names not listed keep their
# file order after these.
FINALIZE_ORDER = (
    ("cross_entropy", "loss"),
    ("embedding_grads", "embedding all-reduce"),
    ("grad_param_comm", "gradient reduce-scatter"),
    ("moe_grad_norm2", "expert gradient reduce-scatter"),
    ("optimizer", "grad-norm and found-inf all-reduces"),
    ("grad_param_compute", "optimizer step"),
    ("grad_gather", "parameter all-gather"),
    ("moe_grad_norm1", "expert parameter all-gather"),
)


def load_simai(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    _check_options(options)
    path = _one_path(paths, "simai")
    w = workload_text.parse(path, "simai", diagnostics)
    h = w.header
    where = w.where(1)
    tp = _header_or(h, "model_parallel_NPU_group", options.tp, 1)
    pp = _header_or(h, "pp", options.pp, 1)
    ep = _header_or(h, "ep", options.ep, 1)
    ga = int(h.get("ga", 1))
    world = int(h["all_gpus"]) if "all_gpus" in h else options.num_npus
    if world is None:
        raise InputError(where, "the header has no all_gpus: give --num-npus")
    for name, value in (("model_parallel_NPU_group", tp), ("pp", pp), ("ga", ga), ("ep", ep), ("all_gpus", world)):
        if value < 1:
            raise InputError(where, f"{name} must be at least 1, got {value}")
    if world > MAX_RANKS:
        raise InputError(where, f"all_gpus {world} is more ranks than et-convert handles ({MAX_RANKS})")
    if world % (tp * pp):
        raise InputError(where, f"all_gpus {world} is not a multiple of tp*pp = {tp * pp}")
    warn_row_defects(w, diagnostics, placeholder_is_missing=True)
    trace = ExecutionTrace()
    read_broadcasts(w, options.keep_broadcast, trace, diagnostics)
    trace.units = {
        "compute": "ns (SimAI/AICB files are in ns; a time of 1 is AICB's placeholder for not measured)",
        "comm_size": "bytes",
        "all_gather_size": ALL_GATHER_CONVENTION,
    }
    trace.assume(ALL_GATHER_CONVENTION + ".")
    trace.assume("Collectives written with size 0 are left out (a collective of 0 bytes does nothing).")
    trace.assume("Compute times of 1 ns (AICB's placeholder for 'not measured') are left out.")
    trace.assume("The last column (update delay, 100 ns in AICB files) is not modelled.")
    trace.metadata["workload.policy"] = w.policy
    trace.metadata["workload.mode"] = options.mode
    if options.mode == "simai":
        return _simai_own_reading(trace, w, tp, ep, world, ga, pp, options, diagnostics)
    return _simai_stages(trace, w, tp, pp, ep, ga, world, options, diagnostics)


def _header_or(h: dict, key: str, option: int | None, default: int) -> int:
    if key in h:
        return int(h[key])
    return option if option is not None else default


def _split_simai(w: Workload, ga: int) -> tuple[list[Row], list[list[Row]], list[Row]]:
    """Prologue rows, `ga` microbatch blocks, epilogue rows (FORMATS.md §5)."""
    rows = w.rows
    start = 0
    while start < len(rows) and rows[start].name.startswith(PROLOGUE_PREFIXES):
        start += 1
    end = len(rows)
    while end > start and rows[end - 1].name.startswith(EPILOGUE_PREFIXES):
        end -= 1
    middle = rows[start:end]
    if not middle:
        raise InputError(w.where(rows[0].line), "found no per-microbatch rows between the prologue "
                                                "(grad_*, embedding_grads, moe_grad_norm*) and the epilogue")
    if len(middle) % ga:
        raise InputError(w.where(middle[0].line), f"the {len(middle)} rows from line {middle[0].line} to "
                                                  f"{middle[-1].line} do not split into ga={ga} equal microbatch blocks")
    n = len(middle) // ga
    blocks = [middle[k * n:(k + 1) * n] for k in range(ga)]
    for block in blocks[1:]:
        for first, row in zip(blocks[0], block):
            if row.name != first.name:
                raise InputError(w.where(row.line), f"microbatch blocks differ: expected row {first.name!r} "
                                                    f"(as at line {first.line}), found {row.name!r}")
    return rows[:start], blocks, rows[end:]


def _warn_block_drift(w: Workload, blocks: list[list[Row]], diagnostics: Diagnostics) -> None:
    """AICB repeats one block per microbatch; say where later copies carry other times."""
    for k, block in enumerate(blocks[1:], start=1):
        for first, row in zip(blocks[0], block):
            for col in ("fwd_compute", "ig_compute", "wg_compute"):
                a, b = getattr(first, col), getattr(row, col)
                if a != b and b != 1 and a != 1:
                    diagnostics.warn(
                        f"block-drift:{row.name}:{col}",
                        f"{w.path}: {{count}} microbatch blocks give {row.name} another {col} than the "
                        f"first block ({b} vs {a} at line {first.line}); used each block's own value "
                        f"(first at line {{first}})", str(row.line))


def _simai_comm_kind(row: Row, comm: Comm, stage_mode: bool, pp: int) -> str | None:
    if comm.scope == "EP":
        return "ep"
    if comm.scope == "DP_EP":
        return "dp_ep"
    if stage_mode and row.name == "embedding_grads" and comm.column == "ig":
        return "embedding" if pp > 1 else None
    return "dp" if comm.column == "wg" else "tp"


def _simai_op(row: Row, sizes: Sizes, stage_mode: bool, pp: int, per_iteration: bool, min_fwd: int = 0) -> Op:
    def time(value: int) -> int:
        return 0 if value == 1 else value  # AICB's placeholder

    def coll(comm: Comm | None) -> Coll | None:
        if comm is None:
            return None
        kind = _simai_comm_kind(row, comm, stage_mode, pp)
        if kind is None:
            return None
        blocking = per_iteration or comm.column != "wg"
        return sizes.coll(comm, kind, row.line, blocking, min_fwd if comm.column == "fwd" else 0)

    return Op(row.name, f"{sizes.path}:{row.line}", time(row.fwd_compute), coll(row.fwd_comm),
              time(row.ig_compute), coll(row.ig_comm), time(row.wg_compute), coll(row.wg_comm))


def derive_p2p_bytes(w: Workload, blocks: list[list[Row]], tp: int, options: Options, trace: ExecutionTrace,
                     diagnostics: Diagnostics) -> int:
    """Bytes of one microbatch's activation between stages."""
    if options.p2p_bytes is not None:
        trace.assume(f"Activations and gradients between stages are {options.p2p_bytes} bytes per microbatch (--p2p-bytes).")
        return options.p2p_bytes
    if w.header.get("pp_comm") == 0:
        diagnostics.warn("pp_comm-0", f"{w.path}:1: pp_comm is 0; derived the activation size instead")
    elif "pp_comm" in w.header:
        size = int(w.header["pp_comm"])
        trace.assume(f"Activations and gradients between stages are {size} bytes per microbatch (pp_comm in the header).")
        return size
    comms = [r.fwd_comm for r in blocks[0]
             if r.fwd_comm and not r.fwd_comm.scope and r.fwd_comm.kind != workload_text.BROADCAST]
    if not comms:
        raise InputError(w.where(1), "cannot derive the activation size between stages (no pp_comm and no TP "
                                     "collective in the microbatch block); give --p2p-bytes")
    full = max(c.size for c in comms)
    sequence_parallel = any(c.kind in ("ALLGATHER", "REDUCESCATTER") for c in comms)
    if sequence_parallel:
        size = -(-full // tp)
        sentence = (
            f"Activations and gradients between stages are {size} bytes per microbatch: the block's TP "
            f"collectives move the whole activation (2*mbs*seq*hidden = {full} bytes), and under sequence "
            f"parallelism (ALLGATHER/REDUCESCATTER in the forward) each rank holds 1/{tp} of it.")
    else:
        size = full
        sentence = (
            f"Activations and gradients between stages are {size} bytes per microbatch: the size of the "
            f"block's TP all-reduce (2*mbs*seq*hidden bytes; no sequence parallelism).")
    # a size the file does not state decides every send's time: say so without -v too
    trace.assume(sentence)
    diagnostics.warn_assumption(sentence, f"{w.path}:1")
    return size


def _stage_rows(rows: list[Row], stage: int, pp: int) -> list[Row]:
    """Embedding only on the first stage, final_column/cross-entropy only on the last."""
    kept = []
    for row in rows:
        if row.name.startswith(FIRST_STAGE_ONLY) and stage != 0:
            continue
        if row.name.startswith(LAST_STAGE_ONLY) and stage != pp - 1:
            continue
        if row.name == "embedding_grads" and stage not in (0, pp - 1):
            continue
        kept.append(row)
    return kept


def _finalize_key(row: Row) -> int:
    for i, (prefix, _) in enumerate(FINALIZE_ORDER):
        if row.name.startswith(prefix):
            return i
    return len(FINALIZE_ORDER)


def _used_kinds(ops: list[Op]) -> set[str]:
    return {c.kind for op in ops for c in (op.fwd, op.ig, op.wg) if c is not None}


def _simai_stages(trace, w, tp, pp, ep, ga, world, options, diagnostics) -> ExecutionTrace:
    dp = world // (tp * pp)
    layout = Layout(tp=tp, dp=dp, pp=pp, ep=ep)
    layout.check(w.where(1))
    vpp = int(w.header.get("vpp", 1))
    if vpp > 1:
        diagnostics.warn("vpp", f"{w.path}:1: vpp {vpp}: interleaved 1F1B is not modelled; each stage runs its "
                                f"block once per microbatch in non-interleaved {options.schedule.upper()} order")
        trace.assume(f"vpp {vpp} (interleaved 1F1B) is not modelled: non-interleaved {options.schedule.upper()} "
                     "with one model chunk per stage.")
    prologue, blocks, epilogue = _split_simai(w, ga)
    _warn_block_drift(w, blocks, diagnostics)
    group_sizes = {"tp": tp, "dp": dp, "pp": pp, "ep": ep, "dp_ep": dp // ep, "embedding": 2 if pp > 1 else 1}
    sizes = Sizes(group_sizes, w.path, diagnostics, trace)
    finalize_rows = sorted(prologue + epilogue, key=_finalize_key)
    block_ops = [[_simai_op(r, sizes, True, pp, False) for r in block] for block in blocks]
    final_ops = {r.line: _simai_op(r, sizes, True, pp, True) for r in finalize_rows}
    by_line = [{r.line: op for r, op in zip(block, ops)} for block, ops in zip(blocks, block_ops)]
    kinds = ["tp", "dp", "pp"] + sorted(
        _used_kinds([op for ops in block_ops for op in ops] + list(final_ops.values())) - {"tp", "dp", "pp"})
    group_ids = add_layout_groups(trace, layout, kinds)
    p2p = derive_p2p_bytes(w, blocks, tp, options, trace, diagnostics) if pp > 1 else 0
    recompute = _layer_recompute(w, blocks[0], trace)
    graphs, reps = {}, {}
    for s in range(pp):
        rep = layout.rank_of(0, 0, s)
        reps[s] = rep
        stage_blocks = [[by_line[m][r.line] for r in _stage_rows(blocks[m], s, pp)] for m in range(ga)]
        plan = StagePlan(
            stage=s, stages=pp, blocks=stage_blocks,
            finalize=[final_ops[r.line] for r in _stage_rows(finalize_rows, s, pp)],
            prev_peer=layout.prev_stage_rank(rep), next_peer=layout.next_stage_rank(rep), p2p_bytes=p2p,
            schedule=options.schedule, passes=options.passes,
            recompute=_recompute_on_stage(recompute, _stage_rows(blocks[0], s, pp)),
        )
        graphs[s] = stage_program(Graph(group_ids[rep]), plan)
    share_graphs(
        trace, world, role_of=lambda r: r // (tp * dp), representative=reps, graphs=graphs,
        group_ids=group_ids, coords=lambda r: _coords(layout, r),
        peers=lambda r: [layout.prev_stage_rank(r), layout.next_stage_rank(r)],
    )
    trace.parallel = Parallel(world=world, tp=tp, dp=dp, pp=pp, ep=ep, vpp=vpp, microbatches=ga)
    trace.metadata.update({"pipeline.schedule": options.schedule, "pipeline.p2p_bytes": p2p})
    trace.assume(f"Rank layout is Megatron's (tp fastest): rank = tp + {tp}*(dp + {dp}*pp); "
                 f"DP groups are the {dp} ranks sharing (tp, pp).")
    trace.assume(f"The file describes one pipeline stage: every stage runs the block's layer rows; "
                 f"embedding_layer only on stage 0, final_column and cross_entropy only on stage {pp - 1}.")
    trace.assume(f"Microbatches: {ga} (ga) per iteration in {options.schedule.upper()} order; SEND/RECV of "
                 "activations (forward) and gradients (backward) between adjacent stages; fused exchanges "
                 "are sibling SEND and RECV nodes.")
    order = ", ".join(f"{prefix} ({meaning})" for prefix, meaning in FINALIZE_ORDER)
    trace.assume(f"Prologue and epilogue rows run once per iteration after the last backward, in this order of "
                 f"row name prefixes: {order}; "
                 "moe_grad_norm1/2 are read by their sizes (expert parameters at 2 bytes, expert gradients at 4), "
                 "not by their names.")
    if pp > 1:
        trace.assume("embedding_grads' all-reduce runs in the embedding group (first and last stage of each "
                     "pipeline column), not in the TP group its column would suggest.")
    trace.assume("Collectives without a suffix run in the TP group (forward and input-gradient columns) or the "
                 "DP group (weight-gradient column); _EP in the EP group, _DP_EP in the expert-data-parallel group.")
    trace.assume("Input-gradient collectives block (as SimAI runs them); per-microbatch weight-gradient "
                 "collectives overlap until the end of the iteration; once-per-iteration rows block.")
    return trace


def _is_layer_row(row: Row) -> bool:
    """A transformer layer row of the block, which every stage holds (unlike embedding_layer and final_column)."""
    return not row.name.startswith(FIRST_STAGE_ONLY + LAST_STAGE_ONLY)


def _layer_recompute(w: Workload, block: list[Row], trace: ExecutionTrace) -> dict[int, list[int]]:
    """FWD_IN_BCKWD recompute over the block's layer rows: the header's indices count layers, and
    embedding_layer and final_column are not layers (only stage 0 and the last stage hold them), so
    counting only layer rows makes an index name the same row on every stage."""
    layers = [row for row in block if _is_layer_row(row)]
    plan = _checked_recompute_plan(w, len(layers), f"the last layer row of the microbatch block ({len(layers) - 1}; "
                                                   "layer rows count from 0 without embedding_layer and final_column)")
    if plan:
        described = "; ".join(
            f"before layer row {i}'s input gradient ({layers[i].name}), layer rows {rows[0]}..{rows[-1]} "
            f"({layers[rows[0]].name} to {layers[rows[-1]].name})" for i, rows in plan.items())
        trace.assume("Activation recompute (FWD_IN_BCKWD): checkpoint indices count the layer rows of the "
                     "microbatch block from 0, without embedding_layer and final_column, so they name the same "
                     f"rows on every stage: {described} run their forward again, in every microbatch.")
    elif w.header.get("checkpoint_initiates"):
        trace.assume("No activation recompute: every checkpoint initiator is a checkpoint or layer row 0, so "
                     "no layer lies between.")
    else:
        trace.assume("No activation recompute: the header lists no checkpoint initiators "
                     f"(checkpoints: {len(w.header.get('checkpoints', []))}), although the policy is "
                     f"{w.policy}.")
    return plan


def _recompute_on_stage(plan: dict[int, list[int]], stage_rows: list[Row]) -> dict[int, list[int]]:
    """A plan over layer rows -> the same plan over positions in one stage's own row list."""
    position = [k for k, row in enumerate(stage_rows) if _is_layer_row(row)]
    return {position[i]: [position[j] for j in rows] for i, rows in plan.items()}


def _coords(layout: Layout, r: int) -> dict[str, int]:
    c = layout.coords(r)
    coords = {"tp": c["tp"], "dp": c["dp"], "pp": c["pp"]}
    if layout.ep > 1:
        coords["ep"] = c["ep"]
    return coords


def _simai_own_reading(trace, w, tp, ep, world, ga, pp, options, diagnostics) -> ExecutionTrace:
    """Every rank runs every row of the file, as SimAI does: no pipeline, groups as if PP = 1."""
    dp = world // tp
    layout = Layout(tp=tp, dp=dp, pp=1, ep=ep)
    layout.check(w.where(1))
    diagnostics.warn(
        "simai-mode",
        f"{w.path}: --mode simai reproduces SimAI's reading: every rank runs all {len(w.rows)} rows with no "
        f"pipeline and DP groups of {dp} ranks (pp {pp} ignored); this is not the per-stage model")
    sizes = Sizes({"tp": tp, "dp": dp, "ep": ep, "dp_ep": dp // ep}, w.path, diagnostics, trace)
    raised = [r.line for r in w.rows if r.fwd_comm and 0 < r.fwd_comm.size < 4096]
    if raised:
        diagnostics.warn("simai-4096", f"{w.path}: {len(raised)} forward collectives under 4096 bytes raised to "
                                       f"4096 as SimAI does (first at line {raised[0]})")
    ops = [_simai_op(r, sizes, False, 1, False, min_fwd=4096) for r in w.rows]
    kinds = ["tp", "dp"] + sorted(_used_kinds(ops) - {"tp", "dp"})
    group_ids = add_layout_groups(trace, layout, kinds)
    recompute = _row_recompute(w, trace)
    nodes = transformer_passes(Graph(group_ids[0]), ops, options.passes, ig_blocking=True, recompute=recompute)
    share_graphs(trace, world, role_of=lambda r: 0, representative={0: 0}, graphs={0: nodes},
                 group_ids=group_ids, coords=lambda r: _coords(layout, r))
    trace.parallel = Parallel(world=world, tp=tp, dp=dp, pp=1, ep=ep, microbatches=ga)
    trace.assume(f"SimAI's own reading (--mode simai): every rank runs all {len(w.rows)} rows once per pass, "
                 f"with no pipeline; groups as if PP = 1 (TP {tp}, DP {dp}); the file's pp {pp} is ignored.")
    trace.assume("As SimAI does: input-gradient collectives block; forward collective sizes under 4096 bytes "
                 "are raised to 4096; embedding_grads' all-reduce runs in the TP group.")
    return trace


# ---------------------------------------------------------------- ASTRA-sim 1.0


class Partition:
    """How a group kind splits the ranks: blocks of `size` consecutive ranks, or ranks `stride` apart."""

    def __init__(self, world: int, block: int | None = None, stride: int | None = None):
        self.world, self.block, self.stride = world, block, stride

    def members(self, r: int) -> list[int]:
        if self.block is not None:
            start = r - r % self.block
            return list(range(start, start + self.block))
        return list(range(r % self.stride, self.world, self.stride))

    @property
    def size(self) -> int:
        return self.block if self.block is not None else self.world // self.stride


def load_astra(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    _check_options(options)
    path = _one_path(paths, "astra-text")
    w = workload_text.parse(path, "astra", diagnostics)
    if options.num_npus is None:
        raise UsageError("ASTRA-sim text workloads carry no rank count: give --num-npus N")
    n = options.num_npus
    if not 1 <= n <= MAX_RANKS:
        raise UsageError(f"--num-npus must be between 1 and {MAX_RANKS}, got {n}")
    warn_row_defects(w, diagnostics, placeholder_is_missing=False)
    trace = ExecutionTrace()
    read_broadcasts(w, options.keep_broadcast, trace, diagnostics)
    trace.units = {
        "compute": f"ASTRA-sim 1.0 ticks x {options.tick_ns:g} ns (--tick-ns)",
        "comm_size": "bytes",
        "all_gather_size": ASTRA_ALL_GATHER_CONVENTION,
    }
    trace.metadata["workload.policy"] = w.policy
    trace.assume(f"Compute times are ASTRA-sim 1.0 ticks of {options.tick_ns:g} ns; times of 0 add no node.")
    trace.assume("Collectives written as NONE or with size 0 are left out (ASTRA-sim 1.0 issues nothing for them).")
    trace.assume(ASTRA_ALL_GATHER_CONVENTION + ".")
    trace.assume("Every rank runs the same graph (ASTRA-sim 1.0 gives all ranks the same workload).")
    trace.assume("The last column (update delay) is not modelled.")
    partitions = _astra_partitions(w, n, options, trace)
    kinds = sorted(partitions)
    groups: dict[int, dict[str, int]] = {}
    for r in range(n):
        ids = {}
        for kind in kinds:
            group = trace.add_group(kind.split(":")[0], partitions[kind].members(r))
            group.name = group.name or f"{kind.split(':')[0]}#{group.id}"
            ids[kind] = group.id
        groups[r] = ids
    sizes = Sizes({k: p.size for k, p in partitions.items()}, w.path, diagnostics, trace, gathered_total=False)
    ops = _astra_ops(w, sizes, options.tick_ns, diagnostics)
    graph = Graph(groups[0])
    policy, passes = w.policy, options.passes
    if policy == "MICRO":
        if len(ops) > 1:
            diagnostics.warn("micro-rows", f"{w.path}: MICRO runs only row 0's weight-gradient collective; "
                                           f"ignored the other {len(ops) - 1} rows")
        nodes = micro_passes(graph, ops[0], passes)
    elif policy == "DATA":
        nodes = data_passes(graph, ops, passes)
    elif policy == "DISTRIBUTED_INFERENCE":
        nodes = inference_passes(graph, ops, passes)
    elif policy in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        last_bottom = w.header.get("DLRM_LAST_BOTTOM_LAYER")
        if last_bottom is None:
            raise InputError(w.where(1), f"{policy} needs the last bottom-MLP row: 'DLRM_LAST_BOTTOM_LAYER: N'")
        if last_bottom >= len(ops):
            raise InputError(w.where(1), f"DLRM_LAST_BOTTOM_LAYER {last_bottom} is past the last row ({len(ops) - 1})")
        trace.assume(f"DLRM: row 0 is the embedding (all-to-all over all ranks); rows 1..{last_bottom} the bottom "
                     f"MLP; row {last_bottom + 1} waits for the embedding all-to-all.")
        nodes = dlrm_passes(graph, ops, passes, last_bottom)
    else:
        recompute = {}
        if policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
            recompute = _row_recompute(w, trace)
        nodes = transformer_passes(graph, ops, passes, ig_blocking=False, recompute=recompute)
    rep = {0: 0}
    share_graphs(trace, n, role_of=lambda r: 0, representative=rep, graphs={0: nodes}, group_ids=groups,
                 coords=lambda r: {})
    tp = next((p.size for k, p in partitions.items() if k.startswith("tp:")), 1)
    ep = next((p.size for k, p in partitions.items() if k.startswith("ep:")), 1)
    trace.parallel = Parallel(world=n, tp=tp, dp=n // tp, ep=ep)
    trace.metadata["workload.passes"] = passes
    return trace


def _model_group_size(w: Workload, n: int, options: Options, trace: ExecutionTrace, required: bool) -> int | None:
    t = w.header.get("model_parallel_NPU_group")
    origin = "model_parallel_NPU_group in the header"
    if t is None and options.tp is not None:
        t, origin = options.tp, "--tp"
    if t is None:
        if required:
            raise InputError(w.where(1), f"{w.policy} needs the model-parallel group size: the header has no "
                                         "'model_parallel_NPU_group: T'; give --tp T")
        return None
    if t < 1 or n % t:
        raise InputError(w.where(1), f"model-parallel group size {t} does not divide --num-npus {n}")
    trace.assume(f"Model-parallel group size {t} ({origin}).")
    return int(t)


def _astra_partitions(w: Workload, n: int, options: Options, trace: ExecutionTrace) -> dict[str, Partition]:
    """Group kinds the policy uses -> how they split the ranks. Keys are "kind:variant"."""
    policy = w.policy
    everyone = Partition(n, block=n)
    if policy in ("MICRO", "DATA"):
        trace.assume(f"{policy}: weight-gradient collectives over all {n} ranks (DP group of everyone).")
        return {"dp:all": everyone}
    if policy == "MODEL":
        trace.assume(f"MODEL: forward and input-gradient collectives over all {n} ranks (TP group of everyone).")
        return {"tp:all": everyone}
    if policy in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED"):
        trace.assume(f"DLRM: embedding all-to-alls (EP group) and weight-gradient all-reduces (DP group) over all {n} ranks.")
        return {"ep:all": everyone, "dp:all": everyone}
    if policy == "DISTRIBUTED_INFERENCE":
        t = _model_group_size(w, n, options, trace, required=False) or n
        trace.assume(f"DISTRIBUTED_INFERENCE: forward collectives in groups of {t} consecutive ranks.")
        return {"tp:blocks": Partition(n, block=t)}
    t = _model_group_size(w, n, options, trace, required=True)
    data_model = {"tp:blocks": Partition(n, block=t), "dp:stride": Partition(n, stride=t)}
    model_data = {"tp:stride": Partition(n, stride=n // t), "dp:blocks": Partition(n, block=n // t)}
    trace.assume(
        f"{policy}: the first network dimension is taken as blocks of consecutive ranks. Data-model splits "
        f"(HYBRID_DATA_MODEL, HYBRID_TRANSFORMER*) run forward/input-gradient collectives in blocks of {t} "
        f"consecutive ranks and weight-gradient collectives across them (stride {t}); HYBRID_MODEL_DATA runs "
        f"weight-gradient collectives in blocks of {n // t} consecutive ranks and forward/input-gradient "
        f"collectives across them (stride {n // t}, {t} members).")
    if policy == "HYBRID_MODEL_DATA":
        return model_data
    if policy == "HYBRID_CUSTOMIZED":  # each row picks its own split; DATA/MODEL rows span everyone
        return {**data_model, **model_data, "world:all": everyone}
    return data_model


# Which group each column uses under each (row) policy; None = that column's collective is not issued.
_COLUMN_KINDS = {
    "DATA": (None, None, "dp:all"),
    "MICRO": (None, None, "dp:all"),
    "MODEL": ("tp:all", "tp:all", None),
    "HYBRID_DATA_MODEL": ("tp:blocks", "tp:blocks", "dp:stride"),
    "HYBRID_TRANSFORMER": ("tp:blocks", "tp:blocks", "dp:stride"),
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD": ("tp:blocks", "tp:blocks", "dp:stride"),
    "HYBRID_MODEL_DATA": ("tp:stride", "tp:stride", "dp:blocks"),
    "DISTRIBUTED_INFERENCE": ("tp:blocks", None, None),
    "HYBRID_DLRM": ("ep:all", "ep:all", "dp:all"),
    "HYBRID_DLRM_ENHANCED": ("ep:all", "ep:all", "dp:all"),
}


def _astra_ops(w: Workload, sizes: Sizes, tick_ns: float, diagnostics: Diagnostics) -> list[Op]:
    ops = []
    dlrm = w.policy.startswith("HYBRID_DLRM")
    for i, row in enumerate(w.rows):
        policy = row.policy or w.policy
        fwd_kind, ig_kind, wg_kind = _COLUMN_KINDS[policy]
        if row.policy is not None:  # a DATA or MODEL row of HYBRID_CUSTOMIZED: everyone, of no one kind
            fwd_kind, ig_kind, wg_kind = (k and k.replace("tp:all", "world:all").replace("dp:all", "world:all")
                                          for k in (fwd_kind, ig_kind, wg_kind))
        if dlrm and i > 0:
            fwd_kind = ig_kind = None  # only the embedding row exchanges in forward/input-gradient
        no_ig_row0 = i == 0 and policy not in ("DATA", "MICRO", "DISTRIBUTED_INFERENCE") and not dlrm
        columns = []
        for comm, kind, column in ((row.fwd_comm, fwd_kind, "fwd"), (row.ig_comm, ig_kind, "ig"),
                                   (row.wg_comm, wg_kind, "wg")):
            if comm is not None and column == "ig" and no_ig_row0:
                # ASTRA-sim's normal reading of the file, not a defect of it: an assumption (-v lists it)
                sizes.trace.assume(f"Row 0's input-gradient collective ({row.name}, line {row.line}) is left out: "
                                   f"ASTRA-sim 1.0 issues none for row 0 under {policy}.")
                kind = None
            elif comm is not None and kind is None:
                diagnostics.warn(f"ignored:{policy}:{column}",
                                 f"{w.path}: {policy} issues no {column} collectives; ignored {{count}} "
                                 f"(first at line {{first}})", str(row.line))
            if comm is None or kind is None:
                columns.append(None)
            else:
                columns.append(sizes.coll(comm, kind, row.line, blocking=column != "wg"))
        ops.append(Op(row.name, f"{w.path}:{row.line}", _ns(row.fwd_compute, tick_ns), columns[0],
                      _ns(row.ig_compute, tick_ns), columns[1], _ns(row.wg_compute, tick_ns), columns[2]))
    return ops


def _checked_recompute_plan(w: Workload, rows: int, last_row: str) -> dict[int, list[int]]:
    """The header's checkpoints and initiators as a plan over `rows` rows. An index past them is
    an error: it would silently recompute nothing."""
    checkpoints = list(w.header.get("checkpoints", []))
    initiators = list(w.header.get("checkpoint_initiates", []))
    for value in checkpoints + initiators:
        if value >= rows:
            raise InputError(w.where(1), f"checkpoint row {value} is past {last_row}")
    return recompute_plan(checkpoints, initiators)


def _row_recompute(w: Workload, trace: ExecutionTrace) -> dict[int, list[int]]:
    """FWD_IN_BCKWD recompute with the indices as rows of the whole file, as ASTRA-sim 1.0 and SimAI read them."""
    rows = len(w.rows)
    plan = _checked_recompute_plan(w, rows, f"the last row ({rows - 1})")
    if plan:
        described = "; ".join(f"before row {i}'s input gradient, rows {r[0]}..{r[-1]}" for i, r in plan.items())
        trace.assume(f"Activation recompute (FWD_IN_BCKWD): {described} run their forward again.")
    elif w.policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD":
        trace.assume("FWD_IN_BCKWD with no row between a checkpoint and its initiator: nothing is recomputed.")
    return plan


# ---------------------------------------------------------------- NeuSight


def load_neusight(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    from .neusight import build

    return build(paths, options, diagnostics)
