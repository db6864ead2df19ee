"""The `.pftrace` writer's C loops (`converters/writers/_pftrace.c`) are its Python code, faster.

Each C function gives what the Python it stands for gives, or None where it leaves the work to
Python (a value or a format it does not take): `annotation_pieces` is `_Annotations.column`
(and fills the same cache), `format_bodies` is `format % row` per begin, and the writer's
bytes are the same with the module as without it, on the samples, on a synthetic log whose
annotation cache fills up again and again, and on random traces.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters.api import read
from converters.diagnostics import Diagnostics
from converters.options import Options
from converters.writers import perfetto
from converters.writers.layout_chrome import plan_trace
from helpers.megatron_synth import write_run
from test_perfetto import random_trace

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
C = perfetto._pftrace
needs_c = pytest.mark.skipif(C is None, reason="the .pftrace writer's C module was not built (no C compiler)")

# what a log's own fields hold, and what the C leaves to Python: bools, floats, ints past int64's
# positive half (negative ones, 2^63 and up), strings that are not UTF-8 (a lone surrogate)
VALUES = st.one_of(st.none(), st.integers(0, 300), st.integers(0, 2**63 - 1), st.integers(-(2**64), 2**64),
                   st.text(max_size=12), st.text(min_size=130, max_size=200), st.booleans(), st.floats(),
                   st.sampled_from(["\ud800", "node-7", ""]))


def taken(value) -> bool:
    if value is None:
        return True
    if type(value) is int:
        return 0 <= value < 2**63
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return False


def python_column(key: str, values: list) -> list[bytes]:
    return perfetto._Annotations({key: 7}).column(key, values)


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, max_size=30), st.data())
def test_annotation_pieces_are_the_columns_annotations(column, data):
    positions = data.draw(st.lists(st.integers(0, len(column) - 1), max_size=40)) if column else []
    annotations = perfetto._Annotations({"node": 7})
    cache = annotations.field_cache("node")
    pieces = C.annotation_pieces(column, positions, cache, cache.name_field)
    values = [column[p] for p in positions]
    if pieces is None:
        assert not all(map(taken, values))
        return
    assert all(map(taken, values))
    assert pieces == python_column("node", values)
    # the cache holds what `_FieldPieces` would make of each value
    assert all(cache[v] == perfetto._FieldPieces(7)[v] for v in values)


@needs_c
def test_annotation_pieces_use_the_cache_and_refuse_what_is_not_theirs():
    cache = perfetto._FieldPieces(3)
    cache[5] = b"cached"
    assert C.annotation_pieces([5, None, 6], [0, 1, 2, 0], cache, cache.name_field) == [
        b"cached", b"", perfetto._FieldPieces(3)[6], b"cached"]
    assert C.annotation_pieces([1, True], [0, 1], cache, cache.name_field) is None
    with pytest.raises(IndexError):
        C.annotation_pieces([1], [1], cache, cache.name_field)
    with pytest.raises(TypeError):
        C.annotation_pieces((1,), [0], cache, cache.name_field)


CONVERSIONS = st.sampled_from([b"%b", b"%.0b"])
FIXED = st.binary(max_size=6).map(lambda text: text.replace(b"%", b"%%"))


@st.composite
def formats(draw, width: int) -> tuple[bytes, bool]:
    """A shape's format (`shape_format`): fixed text with `width` conversions; now and then one
    too many or too few, or another conversion (`%s`, a bare % at the end). With whether it
    is one `shape_format` could make."""
    extra = draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
    parts = []
    for _ in range(width + extra):
        parts += [draw(FIXED), draw(CONVERSIONS)]
    parts.append(draw(FIXED))
    other = draw(st.sampled_from([b"", b"", b"", b"%s", b"%"]))
    return b"".join(parts) + other, not extra and not other


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4), st.integers(0, 6), st.data())
def test_format_bodies_are_each_format_of_its_row(columns_count, n, data):
    width = columns_count + 2
    columns = [data.draw(st.one_of(st.none(), st.lists(st.binary(max_size=5), min_size=n, max_size=n)))
               for _ in range(columns_count)]
    names, tails = (data.draw(st.lists(st.binary(max_size=4), min_size=n, max_size=n)) for _ in range(2))
    drawn = data.draw(st.lists(formats(width), min_size=n, max_size=n))
    fmts = [fmt for fmt, _ in drawn]
    made = C.format_bodies(fmts, columns, names, tails)
    rows = list(zip(*[[b""] * n if c is None else c for c in columns], names, tails))
    try:
        expected = [fmt % row for fmt, row in zip(fmts, rows)]
    except (TypeError, ValueError):  # Python refuses it: so must the C, and leave it to Python
        assert made is None
        return
    assert made is None or made == expected
    if all(proper for _, proper in drawn):
        assert made == expected  # the formats `shape_format` makes are all taken


def written(trace_or_paths, monkeypatch, with_c: bool) -> bytes:
    """The .pftrace bytes of a plan of every rank, with the C module or without it."""
    monkeypatch.setattr(perfetto, "_pftrace", C if with_c else None)
    trace = trace_or_paths if not isinstance(trace_or_paths, list) else read(trace_or_paths)
    out = io.BytesIO()
    perfetto.write_plan(plan_trace(trace, Options(ranks="all"), Diagnostics(), None), out)
    return out.getvalue()


@needs_c
@pytest.mark.parametrize("inputs", [
    ["megatron_tp2_pp2_dp1"], ["megatron_tp1_pp4_dp1"], ["megatron_rank4_pp_tp2.log"], ["pytorch_gloo_4rank"],
])
def test_the_samples_bytes_are_the_same_with_and_without_c(inputs, monkeypatch):
    paths = [SAMPLES / name for name in inputs]
    assert written(paths, monkeypatch, True) == written(paths, monkeypatch, False)


@needs_c
def test_a_long_log_with_a_full_cache_is_the_same_with_and_without_c(tmp_path, monkeypatch):
    # an annotation cache refilled many times over (its limit made small), values of every
    # varint length (sizes of 1 to 4 bytes)
    paths = write_run(tmp_path, stages=2, tp=2, microbatches=16, layers=4, iterations=3, one_file=True)
    monkeypatch.setattr(perfetto, "MAX_ANNOTATION_PIECES", 300)
    sizes = {len(perfetto.varint(node.size)) for rank in read(paths).ranks.values() for node in rank.nodes}
    assert {1, 4} <= sizes
    assert written(paths, monkeypatch, True) == written(paths, monkeypatch, False)


@needs_c
@settings(max_examples=60, deadline=None)
@given(random_trace())
def test_random_traces_are_the_same_with_and_without_c(trace):
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert written(trace, monkeypatch, True) == written(trace, monkeypatch, False)


@needs_c
def test_frame_block_refuses_what_does_not_fit():
    heads = perfetto._Prefixed(b"H")
    rests = {0: b"end"}
    with pytest.raises(ValueError, match="fewer bodies than begins"):
        C.frame_block([1], 0, 1, 1, [0], rests, [], heads, heads, [2])
    with pytest.raises(ValueError, match="fewer times"):
        C.frame_block([0, 0], 0, 2, 1, [0], rests, [], heads, heads, [2])
    with pytest.raises(ValueError, match="out of range"):
        C.frame_block([5], 0, 1, 1, [0], rests, [], heads, heads, [2])
    # an end, then a begin with its body: packet head by size, timestamp field, rest
    stamps = perfetto.timestamp_fields([2, 300])
    assert C.frame_block([0, 1], 0, 9, 1, [0], rests, [b"body"], heads, heads, [2, 300]) == (
        heads[2 + 3] + stamps[0] + b"end" + heads[3 + len(heads[4]) + 4] + stamps[1] + heads[4] + b"body")
    # a time that is not a uint64: left to Python
    for time in (-1, 2**64, 2.0):
        assert C.frame_block([0], 0, 1, 1, [0], rests, [], heads, heads, [time]) is None


@needs_c
def test_times_past_uint64_are_framed_by_python_as_before(monkeypatch):
    # a layout whose times begin before the trace's origin: the C leaves the block to Python
    columns = perfetto._Columns.__new__(perfetto._Columns)
    columns.codes, columns.layout_slots, columns.times, columns.size = [0, 1], [0], [-5, 7], 2
    encoder = perfetto._EventEncoder()
    encoder.start_sequence(1)
    framed = encoder.frame(columns, lambda positions: [b"body"] * len(positions), 0, 2)
    assert len(framed) == 6  # Python's pieces, 3 a packet
    monkeypatch.setattr(perfetto, "_pftrace", None)
    assert framed == encoder.frame(columns, lambda positions: [b"body"] * len(positions), 0, 2)
    assert framed[1] == b"\x40" + perfetto.varint(-5)  # a negative time: its 10-byte varint
