"""Each process of a .pftrace is self-contained: its bytes depend on that process alone.

Every process is on a sequence of its own whose first packet clears the incremental state and
interns its names from iid 1, so a process encoded alone (as a worker would, with a fresh
encoder) gives the bytes it has in the whole file, whatever was encoded before it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from converters.api import read
from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.writers import perfetto
from converters.writers.layout_chrome import plan_trace
from test_chrome import small_trace
from test_chrome_encoding import shared_trace
from test_perfetto import assert_interned_before_use

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def plan_of(kind: str):
    if kind == "shared":  # ranks of a stage share a layout
        trace, timeline = shared_trace()
        return plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    trace = small_trace() if kind == "small" else read(SAMPLES / "megatron_tp1_pp2_dp2")  # args as rows
    return plan_trace(trace, Options(ranks="all"), Diagnostics())


def whole_file(plan) -> bytes:
    out = io.BytesIO()
    perfetto.write_plan(plan, out)
    return out.getvalue()


@pytest.mark.parametrize("kind", ["small", "shared", "log_set"])
def test_a_process_encoded_alone_has_the_bytes_it_has_in_the_file(kind):
    plan = plan_of(kind)
    data = whole_file(plan)
    alone = [_joined(perfetto.encode_process(process, perfetto._EventEncoder())) for process in plan.processes]
    for process in plan.processes:
        process.release()
    backwards = [_joined(perfetto.encode_process(process, encoder, shared=True))
                 for encoder in [perfetto._EventEncoder()] for process in reversed(plan.processes)][::-1]
    assert alone == backwards
    assert all(alone) and data.endswith(b"".join(alone))
    parsed = pb.Trace()
    parsed.ParseFromString(data)
    assert_interned_before_use(parsed)


def test_sequence_ids_are_3_byte_varints_above_the_descriptors():
    for pid in (1, 127, 128, 2**14, perfetto.MAX_PID):
        field = pb.TracePacket(trusted_packet_sequence_id=perfetto.sequence_id(pid)).SerializeToString()
        assert len(field) == 4 and perfetto.sequence_id(pid) != perfetto.SEQUENCE_ID


@pytest.mark.parametrize("seed", range(6))
def test_shared_layout_processes_whose_flows_come_go_and_change_direction(seed):
    """The ranks of a shared layout are framed from the last one's pieces, replaced where they
    differ: flows that appear, vanish, change id or direction (another event length) must
    give the bytes of the process encoded alone."""
    import random
    from array import array

    rng = random.Random(seed)
    trace, timeline = shared_trace(tp=2, dp=4, pp=2, per_rank=30)
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    next_id = 1 << 40
    for process in plan.processes:  # flows of their own: some positions, directions and ids at random
        pairs = array("q")
        for i in sorted(rng.sample(range(process.slice_count), rng.randint(0, process.slice_count // 2))):
            next_id += rng.randint(1, 1 << 20)
            pairs.extend((i, next_id << 2 | rng.choice((1, 2, 3))))
        process.flow_pairs, process.made_flows = pairs, None
    assert_encoded_together_as_alone(plan)


@pytest.mark.parametrize("seed", range(6))
def test_shared_layout_processes_with_flows_at_the_same_begins_and_args_of_other_lengths(seed):
    """Ranks whose flows sit at the same begins as the previous rank's (some with the same code,
    some another) and whose own args are longer, shorter or as long: the bytes of each process
    encoded alone."""
    import random
    from array import array

    rng = random.Random(seed)
    trace, timeline = shared_trace(tp=2, dp=4, pp=2, per_rank=30)
    plan = plan_trace(trace, Options(ranks="all"), Diagnostics(), timeline)
    at: dict[int, list[int]] = {}  # layout -> where its ranks' flows are
    codes: dict[int, list[int]] = {}
    for process in plan.processes:
        n = process.slice_count
        where = at.setdefault(id(process.layout), sorted(rng.sample(range(n), n // 3)))
        previous = codes.get(id(process.layout), [])
        mine = [code if code and rng.random() < 0.5 else (rng.randint(1, 1 << 40) << 2 | rng.choice((1, 2, 3)))
                for code in previous or [0] * len(where)]
        codes[id(process.layout)] = mine
        process.flow_pairs, process.made_flows = array("q", [v for pair in zip(where, mine) for v in pair]), None
        # own dicts (the same keys: the same interning): copies, and some with a value of any length
        args = [dict(a) if rng.random() < 0.3 else a for a in process.slice_args]
        args = [{**a, next(iter(a)): "x" * rng.randint(0, 200)} if a and rng.random() < 0.2 else a for a in args]
        process.made_args = None
        process.make_args = (lambda kept: lambda: kept)(args)
    assert_encoded_together_as_alone(plan)


def _joined(blocks) -> bytes:
    """A process's bytes from its blocks of pieces (`encode_process`)."""
    return b"".join(b"".join(block) for block in blocks)


def assert_encoded_together_as_alone(plan) -> None:
    """The plan's processes encoded by one process_encoder (shared layouts edited from rank to
    rank) give the bytes of each encoded alone, which protobuf itself writes the same."""
    alone = [_joined(perfetto.encode_process(process, perfetto._EventEncoder())) for process in plan.processes]
    for process in plan.processes:
        process.release()
    encode = perfetto.process_encoder(plan.processes)
    assert [_joined(encode(process)) for process in plan.processes] == alone
    parsed = pb.Trace()
    parsed.ParseFromString(b"".join(alone))
    assert parsed.SerializeToString() == b"".join(alone)
