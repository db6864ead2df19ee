"""Timelines are printed a block at a time: Chrome SLICES_PER_BLOCK slices, `.pftrace`
EVENTS_PER_BLOCK packets. A log's rank has a distinct args text per slice (about 400 bytes),
so a 72,000-node rank would otherwise hold 30 MB of them while it is printed. The bytes must
not depend on the block size."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from converters.api import read
from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.writers import chrome, forked, perfetto
from converters.writers.layout_chrome import plan_trace

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
BLOCK = {chrome: ("SLICES_PER_BLOCK", 3, 4), perfetto: ("EVENTS_PER_BLOCK", 5, 3)}  # (name, small size, pieces per item)


def written(trace, writer, monkeypatch, block: int | None = None) -> tuple[bytes, list[int]]:
    """The trace's bytes and the number of pieces of every block printed, with blocks of
    `block` slices or packets (None: the writer's own size)."""
    name, _, _ = BLOCK[writer]
    if block is not None:
        monkeypatch.setattr(writer, name, block)
    sizes: list[int] = []
    real = forked.write_parts

    def counting(out, blocks):
        blocks = list(map(list, blocks))
        sizes.extend(map(len, blocks))
        real(out, blocks)

    monkeypatch.setattr(forked, "write_parts", counting)
    out = io.BytesIO()
    writer.write_plan(plan_trace(trace, Options(ranks="all"), Diagnostics()), out)
    monkeypatch.undo()
    return out.getvalue(), sizes


@pytest.mark.parametrize("writer", [chrome, perfetto], ids=["chrome", "perfetto"])
@pytest.mark.parametrize("sample", ["megatron_tp1_pp2_dp2", "pytorch_gloo_4rank", "simai_tp8_pp16_1024gpu.txt"])
def test_the_bytes_do_not_depend_on_the_block_size(sample, writer, monkeypatch):
    # logs: a node list per rank (args rows); profiler traces: drawn-only spans too; SimAI:
    # ranks of a stage share one layout (its pieces are kept whole)
    trace = read(SAMPLES / sample)
    whole, whole_sizes = written(trace, writer, monkeypatch)
    _, small, per_item = BLOCK[writer]
    blocked, sizes = written(trace, writer, monkeypatch, small)
    assert blocked == whole
    if sample != "simai_tp8_pp16_1024gpu.txt":
        assert len(sizes) > 3 * len(whole_sizes)  # many blocks a process, not one
        assert max(sizes) <= small * per_item
