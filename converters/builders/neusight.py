"""NeuSight tables -> the model: one microbatch of a GPT-style model over --dp/--tp/--pp ranks.

The table carries no parallel configuration, so the layout comes from the options (default
one rank). Rows before the first `*_h_0_*` row are the embedding (stage 0), rows from the
first `*ln_f*` row on are the head (last stage), the rows between are one transformer block,
replicated `--num-layers` times and split evenly over the stages.
"""

from __future__ import annotations

from pathlib import Path

from ..diagnostics import Diagnostics, InputError, UsageError, at
from ..model import CollType, ExecutionTrace, Parallel
from ..options import Options
from ..readers import neusight as reader
from ..readers.neusight import NeuComm, NeuRow
from .layout import Layout, add_layout_groups
from .transformer import Coll, Graph, Op, StagePlan, share_graphs, stage_program

COLL_TYPES = {
    "ALLREDUCE": CollType.ALL_REDUCE,
    "ALLGATHER": CollType.ALL_GATHER,
    "REDUCESCATTER": CollType.REDUCE_SCATTER,
    "ALLTOALL": CollType.ALL_TO_ALL,
}


def build(paths: list[Path], options: Options, diagnostics: Diagnostics) -> ExecutionTrace:
    if len(paths) != 1:
        raise UsageError(f"neusight takes one table, got {len(paths)}")
    path = paths[0]
    rows = reader.parse(path)
    name = str(path)
    tp, dp, pp = options.tp or 1, options.dp or 1, options.pp or 1
    layout = Layout(tp=tp, dp=dp, pp=pp)
    layout.check(None)
    if options.num_npus is not None and options.num_npus != layout.world:
        raise UsageError(f"--num-npus {options.num_npus} does not equal dp*tp*pp = {layout.world}")
    if options.bytes_per_element < 1:
        raise UsageError(f"--bytes-per-element must be at least 1, got {options.bytes_per_element}")
    trace = ExecutionTrace()
    trace.units = {"compute": "ms (predicted latencies)", "comm_size": f"elements x {options.bytes_per_element} bytes"}
    trace.assume("Times are ms, rounded to whole ns; times under 0.5 ns add no node.")
    trace.assume(f"Comm sizes are element counts of {options.bytes_per_element} bytes (--bytes-per-element).")
    trace.assume(f"Layout from the options (the table has none): TP {tp}, DP {dp}, PP {pp}, one microbatch.")
    trace.assume("Forward collectives run in the TP group; backward and weight-gradient collectives are gradient "
                 "reductions in the DP group; _ASYNC collectives overlap the rest of the backward.")
    _note_missing_times(rows, name, trace, diagnostics)
    pre, block, post = _sections(rows, name, options, trace)
    layers = options.num_layers or 1
    if layers % pp:
        raise UsageError(f"{layers} layer(s) do not split evenly into --pp {pp} stages; give --num-layers "
                         f"as a multiple of {pp}")
    group_sizes = {"tp": tp, "dp": dp}
    ops = lambda rs, label: [_op(r, name, label, group_sizes, options, trace, diagnostics) for r in rs]  # noqa: E731
    pre_ops, post_ops = ops(pre, ""), ops(post, "")
    layer_ops = [ops(block, f"layer{k}." if options.num_layers else "") for k in range(layers)]
    group_ids = add_layout_groups(trace, layout, ("tp", "dp", "pp"))
    p2p = 0
    if pp > 1:
        if options.p2p_bytes is None:
            raise UsageError(f"--pp {pp} needs --p2p-bytes: the table has no activation size between stages")
        p2p = options.p2p_bytes
        trace.assume(f"Activations and gradients between stages are {p2p} bytes (--p2p-bytes).")
    per_stage = layers // pp
    graphs, reps = {}, {}
    for s in range(pp):
        rep = layout.rank_of(0, 0, s)
        reps[s] = rep
        stage_ops = [op for k in range(s * per_stage, (s + 1) * per_stage) for op in layer_ops[k]]
        stage_ops = (pre_ops if s == 0 else []) + stage_ops + (post_ops if s == pp - 1 else [])
        plan = StagePlan(stage=s, stages=pp, blocks=[stage_ops], finalize=[], prev_peer=layout.prev_stage_rank(rep),
                         next_peer=layout.next_stage_rank(rep), p2p_bytes=p2p, schedule=options.schedule,
                         passes=options.passes)
        graphs[s] = stage_program(Graph(group_ids[rep]), plan)
    share_graphs(trace, layout.world, role_of=lambda r: r // (tp * dp), representative=reps, graphs=graphs,
                 group_ids=group_ids, coords=lambda r: {k: layout.coords(r)[k] for k in ("tp", "dp", "pp")},
                 peers=lambda r: [layout.prev_stage_rank(r), layout.next_stage_rank(r)])
    trace.parallel = Parallel(world=layout.world, tp=tp, dp=dp, pp=pp, microbatches=1)
    return trace


def _note_missing_times(rows: list[NeuRow], name: str, trace: ExecutionTrace, diagnostics: Diagnostics) -> None:
    if all(r.backward_ms == 0 and r.weight_grad_ms == 0 for r in rows):
        diagnostics.warn("neusight-no-backward", f"{name}: all backward and weight-gradient times are 0; the "
                                                 "backward pass has no compute, only its collectives")
        trace.assume("All backward and weight-gradient times in the table are 0: the backward pass has no "
                     "compute, only its gradient collectives.")
    extra = [r for r in rows if r.process_ms]
    if extra:
        diagnostics.warn("neusight-process-time", f"{name}: {len(extra)} rows have a process_time; it is not "
                                                  f"modelled (first at line {extra[0].line})")
        trace.assume("process_time is not modelled.")


def _sections(rows: list[NeuRow], name: str, options: Options, trace: ExecutionTrace):
    """Embedding rows, one transformer block, head rows."""
    start = next((i for i, r in enumerate(rows) if "_h_0_" in r.name), None)
    end = next((i for i, r in enumerate(rows) if "ln_f" in r.name), None)
    if start is None or end is None or end <= start:
        if options.num_layers and options.num_layers > 1:
            raise InputError(at(name, rows[0].line), "cannot find the transformer block to replicate for "
                                                     "--num-layers (rows named *_h_0_* up to *ln_f*)")
        return [], rows, []
    if options.num_layers:
        trace.assume(f"Rows at lines {rows[start].line}-{rows[end - 1].line} are one transformer block, "
                     f"replicated {options.num_layers} times; lines before are the embedding (first stage), "
                     "lines after the final norm and head (last stage).")
    return rows[:start], rows[start:end], rows[end:]


MAX_BYTES = (1 << 63) - 1  # Chakra's comm_size is an int64


def _op(row: NeuRow, name: str, prefix: str, group_sizes: dict[str, int], options: Options,
        trace: ExecutionTrace, diagnostics: Diagnostics) -> Op:
    def coll(comm: NeuComm | None, kind: str) -> Coll | None:
        if comm is None:
            return None
        if comm.elements == 0:
            diagnostics.warn(f"neusight-zero:{comm.token}", f"{name}: skipped {{count}} {comm.token} of size 0 "
                                                            f"(first at line {{first}})", str(row.line))
            return None
        if comm.elements * options.bytes_per_element > MAX_BYTES:
            raise InputError(at(name, row.line), f"{comm.token} of {comm.elements} elements x {options.bytes_per_element} "
                                                 "bytes is more than a Chakra size holds (2^63 - 1 bytes)")
        members = group_sizes[kind]
        if members == 1:
            diagnostics.warn(f"neusight-lonely:{kind}", f"{name}: left out {{count}} collectives of one-member "
                                                        f"{kind} groups (give --{kind}; first at line {{first}})",
                             str(row.line))
            trace.assume(f"Collectives in one-member {kind} groups are left out (nobody to exchange with).")
            return None
        size = comm.elements * options.bytes_per_element
        ctype = COLL_TYPES[comm.kind]
        if ctype == CollType.ALL_GATHER:
            size = -(-size // members)  # NeuSight counts the gathered elements; ASTRA-sim the input
            sentence = ("ALL_GATHER sizes are the per-rank input, as ASTRA-sim reads them: the table's gathered "
                        "element count divided by the group size.")
            trace.assume(sentence)
            diagnostics.warn_assumption(sentence, name)  # it changes sizes: said without -v too
        return Coll(ctype, kind, size, comm.token, blocking=not comm.asynchronous)

    ns = lambda ms: int(round(ms * 1e6))  # noqa: E731
    return Op(prefix + row.name, f"{name}:{row.line}", ns(row.forward_ms), coll(row.forward_comm, "tp"),
              ns(row.backward_ms), coll(row.backward_comm, "dp"), ns(row.weight_grad_ms),
              coll(row.weight_grad_comm, "dp"))
