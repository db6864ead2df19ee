"""Chrome JSON trace (`.json`, `.json.gz`) for ui.perfetto.dev and chrome://tracing.

Layout, threads, slices and flows come from `layout_chrome.plan_trace` (shared with the
native Perfetto writer); this module only prints them:

    {"traceEvents": [M events, then X slices per rank], "displayTimeUnit": "ms", "metadata": {...}}

Times are µs printed from integer ns: ns / 1000 is the double nearest to the 3-decimal
value, and orjson prints the shortest text that reads back as that double, so 1234567 ns
prints as 1234.567. `dur` is taken from the same integers as `ts`, so a child never ends
after its parent (see `dur_us` for the few durations printed with more digits). Flows are
v2 (`bind_id` with `flow_out` / `flow_in`, both for a middle link of a collective chain) on
the X slices themselves.

Printing is byte for byte what orjson prints for each event dict, but from pieces encoded
once: per layout (times and threads shared by the ranks of a stage) and per distinct name
and args; a rank is a list of those pieces (`_SliceEncoder`), written in batches as it is
made. Args shared by ranks (a stage's node list) are dicts encoded once each; a rank with a
node list of its own (each rank of a log: a distinct dict per node) prints its args from
`ArgsRows` instead: a %-format per args shape, filled with its nodes' own fields
(`row_texts`), and no dict is made per slice.

Big traces (--jobs, or all cores from `forked.PARALLEL_MIN_NODES` drawn nodes) are drawn by
forked workers that share the model copy-on-write (`forked.draw_in_workers`): each places
and prints a contiguous block of the drawn ranks; this process merges their comm slices in
drawn order for the flows and writes the blocks in order. The bytes and messages do not
depend on the number of workers (tests/test_chrome_parallel.py). A `.json.gz` is compressed
here, as the blocks arrive: one deflate stream whatever the number of workers.
"""

from __future__ import annotations

import contextlib
import gzip
import math
import operator
from itertools import compress, count, repeat
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import orjson

from ..diagnostics import Diagnostics
from ..gc_pause import paused_gc
from ..timeline import Timeline
from .atomic import atomic_file
from .forked import draw, write_processes
from .layout_chrome import (
    FLOW_IN, FLOW_OUT, FLOW_STEP, OWN_FIELDS, TID_STRIDE, ArgsRows, ArgsShape, Plan, Process, encoder_by_process,
    lookup_encoded, report_iteration, start_plan,
)

LARGE_JSON = 1_000_000_000
SLICES_PER_BLOCK = 4096  # slices printed at a time (`_SliceEncoder.process_parts`)
ARGS_CACHE_BYTES = 32 << 20  # encoded args kept for reuse by the next ranks


def write(trace, output, options=None, diagnostics: Diagnostics | None = None, timeline: Timeline | None = None) -> None:
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    output = Path(output)
    start = start_plan(trace, options, diagnostics, timeline)
    with open_output(output) as out:
        plan = draw(start, out, options, output.parent, write_head, process_encoder)
        write_tail(plan, out)
        json_bytes = out.tell()  # a .json.gz's too: GzipFile counts what it was given
    warn_if_large(plan, json_bytes, output, diagnostics)
    report_iteration(plan, diagnostics)


@contextlib.contextmanager
def open_output(output: Path) -> Iterator[BinaryIO]:
    """The output, written whole or not at all (`atomic_file`); gzip-compressed for `.gz`."""
    with atomic_file(output) as raw:
        if output.name.lower().endswith(".gz"):
            # mtime=0 and no file name inside: the same trace gives the same bytes
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
                yield gz
        else:
            yield raw


def warn_if_large(plan: Plan, json_bytes: int, output: Path, diagnostics: Diagnostics) -> None:
    """Warn when the JSON written (before any gzip) is more than the Perfetto UI loads well."""
    if json_bytes > LARGE_JSON:
        diagnostics.warn(
            "chrome-large",
            f"{output.name}: {json_bytes / 1e9:.1f} GB of JSON ({plan.slice_count:,} slices); "
            "the Perfetto UI holds about 2 GB per tab: write a .pftrace instead, or draw fewer ranks with --ranks",
        )


def write_plan(plan: Plan, out: BinaryIO, jobs: int = 1, beside: Path | None = None) -> None:
    """The JSON of `plan`; with `jobs` > 1 the processes' events are encoded by forked workers
    (`forked.write_processes`: contiguous blocks, written in order), the same bytes."""
    with paused_gc():
        write_head(plan, out)
        write_processes(out, plan.processes, process_encoder, jobs, beside, _SLICE_COUNT)
    write_tail(plan, out)


def write_head(plan: Plan, out: BinaryIO) -> None:
    """What comes before the processes' events: the array's start and the metadata events
    (`plan.processes` may be ProcessHeads)."""
    out.write(b'{"traceEvents":[')
    out.write(orjson.dumps(metadata_events(plan))[1:-1])


def write_tail(plan: Plan, out: BinaryIO) -> None:
    out.write(b'],"displayTimeUnit":"ms","metadata":')
    out.write(metadata_json(plan))
    out.write(b"}\n")


def process_encoder(processes: list[Process], encoder: _SliceEncoder | None = None):
    """`encode(process)`: the X events of each of `processes` in turn, as pieces to join
    (`layout_chrome.encoder_by_process`: args and layouts freed as they are done). `encoder`:
    one kept from earlier calls (`new_encoder`), whose texts serve these processes too; the
    bytes do not depend on it."""
    encoder = encoder or _SliceEncoder()
    return encoder_by_process(processes, lambda process, later: encoder.process_parts(process, later > 0),
                              encoder.finished)


def new_encoder() -> "_SliceEncoder":
    """An encoder for `process_encoder` to keep from call to call."""
    return _SliceEncoder()


_SLICE_COUNT = operator.attrgetter("slice_count")


def metadata_json(plan: Plan) -> bytes:
    # metadata comes from readers (trace.metadata): allow int keys, print unknown types as text
    return orjson.dumps(plan.metadata, default=str, option=orjson.OPT_NON_STR_KEYS)


_SLOT_DIGITS = len(str(TID_STRIDE)) - 1  # tid = pid * 10^k + slot prints as the pid, then k digits
_LEAD = b',{"ph":"X","pid":'  # every X event follows the metadata events, so each starts with a comma
_END = b"}"
_FLOW_TEXT = {
    FLOW_OUT: b',"bind_id":%d,"flow_out":true}',
    FLOW_IN: b',"bind_id":%d,"flow_in":true}',
    FLOW_STEP: b',"bind_id":%d,"flow_out":true,"flow_in":true}',
}


class _SliceEncoder:
    """Prints X events as orjson would print their dicts, from bytes encoded once and reused.

    One X event is
        ,{"ph":"X","pid":P,"tid":P SSS,"ts":T,"dur":D,"name":N,"args":A <flow fields>}
    where the tid P SSS is the pid followed by the thread slot in 3 digits (tid = pid * 1000
    + slot). `SSS,"ts":T,"dur":D,"name":` is the same on every rank drawn with one layout and
    is encoded once per layout; names and args are encoded once per distinct value; a process
    is then a single join of those pieces, in drawing order.
    """

    def __init__(self) -> None:
        self.name_text: dict[str, bytes] = {}  # name -> `"N","args":`
        self.args_text: dict[int, bytes] = {}  # id(args) -> `{...}`
        self.args_kept: list[dict[str, Any]] = []  # the dicts of args_text: a freed dict's id could be reused
        self.args_bytes = 0  # size of the texts in args_text
        self.durations = _Durations()
        # the previous process's (layout, names or args in drawing order, their texts): the
        # next rank of a stage has mostly the same objects, compared faster than looked up
        self.last_names: tuple | None = None
        self.last_args: tuple | None = None

    def process_parts(self, process: Process, shared: bool) -> Iterator[list[bytes]]:
        """The X events of a process, in blocks of pieces to be joined (`layout_chrome.write_parts`),
        SLICES_PER_BLOCK slices a block. `shared`: a later process has its layout too, so the
        layout's heads are made whole and kept; else they are made a block at a time."""
        layout = process.layout
        n = len(layout.starts)
        if not n:
            return
        heads = layout.cache.get("chrome")
        if heads is None and shared:
            heads = layout.cache["chrome"] = self.layout_heads(layout, 0, n)
        names = self.names(process)
        pid = b"%d" % process.pid
        lead = _LEAD + pid + b',"tid":' + pid
        # one piece between two slices: the end of one (`}`, or its flow fields) and the start of the next
        between = [_END + lead] * n
        between[0] = lead
        last = _END
        if process.flows:
            drawn_index = layout.cache.get("drawn_index")
            if drawn_index is None:
                drawn_index = layout.cache["drawn_index"] = _drawn_index(layout)
            for i, code in process.flows.items():
                j = drawn_index[i]
                tail = _FLOW_TEXT[code & 3] % (code >> 2)  # see layout_chrome.flow_of
                if j + 1 < n:
                    between[j + 1] = tail + lead
                else:
                    last = tail
        for k, args in zip(range(0, n, SLICES_PER_BLOCK), self.args_blocks(process)):
            stop = k + len(args)
            parts: list[bytes] = [b""] * (4 * len(args))
            parts[0::4] = between[k:stop]
            parts[1::4] = heads[k:stop] if heads is not None else self.layout_heads(layout, k, stop)
            parts[2::4] = names[k:stop]
            parts[3::4] = args
            yield parts
        yield [last]

    def finished(self, layout) -> None:
        """Free what was encoded for a layout no later process has (each rank of a log has its own).

        Its args texts too: args carry the stage, so other layouts rarely share them.
        """
        layout.cache.pop("chrome", None)
        layout.cache.pop("drawn_index", None)
        self.last_names = self.last_args = None
        self.forget_args_texts()

    def forget_args_texts(self) -> None:
        self.args_text.clear()
        self.args_kept.clear()
        self.args_bytes = 0

    def layout_heads(self, layout, start: int, stop: int) -> list[bytes]:
        """`SSS,"ts":T,"dur":D,"name":` of the slices of a layout from `start` to `stop` in drawing order."""
        starts = layout.drawn(layout.starts, start, stop)
        ends = layout.drawn(layout.ends, start, stop)
        durations = self.durations
        # one orjson call per column prints every number exactly as it prints a single one
        ts = orjson.dumps([s / 1000 for s in starts])[1:-1].split(b",")
        dur = orjson.dumps([durations[e - s] for s, e in zip(starts, ends)])[1:-1].split(b",")
        slots = layout.drawn(layout.slots, start, stop)
        return [b'%0*d,"ts":%b,"dur":%b,"name":' % (_SLOT_DIGITS, slot, t, d) for slot, t, d in zip(slots, ts, dur)]

    def names(self, process: Process) -> list[bytes]:
        layout, last = process.layout, self.last_names
        if last is not None and last[0] is layout and last[1] is process.names:
            return last[2]  # one name list shared by the ranks of a stage

        def encode(name: str) -> bytes:
            return orjson.dumps(name) + b',"args":'

        names = layout.drawn(process.names)
        texts = lookup_encoded(self.name_text, names, names, encode)
        self.last_names = (layout, process.names, texts)
        return texts

    def args_blocks(self, process: Process) -> Iterator[list[bytes]]:
        """The args texts of a process in drawing order, SLICES_PER_BLOCK at a time.

        A node list of its own (a log's rank) has a distinct text per slice, about 400 bytes:
        they are made a block at a time, so a 72,000-node rank does not hold 30 MB of them.
        Texts shared by ranks (`args`) are made once and only cut into blocks.
        """
        layout = process.layout
        n = len(layout.starts)
        rows = process.arg_rows()
        if rows is None:
            texts = self.args(process)
            for k in range(0, n, SLICES_PER_BLOCK):
                yield texts[k:k + SLICES_PER_BLOCK]
            return
        self.last_args = None  # nothing to share with the next rank
        for k in range(0, n, SLICES_PER_BLOCK):
            yield row_texts(rows.drawn(layout, k, k + SLICES_PER_BLOCK))

    def args(self, process: Process) -> list[bytes]:
        """The args texts of a process whose args are dicts (`slice_args`), in drawing order."""
        # Ranks that share args dicts (one group, one stage) are close in rank order, so a
        # cache that starts over when large keeps the hits and bounds the memory (group
        # member lists can make one args text kilobytes long).
        if self.args_bytes > ARGS_CACHE_BYTES:
            self.forget_args_texts()

        layout, last = process.layout, self.last_args
        args = layout.drawn(process.slice_args)
        if last is None or last[0] is not layout:
            texts = self.args_texts(args)
        else:
            # only where this rank's args differ from the previous rank's
            texts = list(last[2])
            differ = list(compress(count(), map(operator.is_not, args, last[1])))
            changed = [args[j] for j in differ]
            for j, text in zip(differ, self.args_texts(changed)):
                texts[j] = text
        self.last_args = (layout, args, texts)
        return texts

    def args_texts(self, args: list[dict[str, Any]]) -> list[bytes]:
        def encode(a: dict[str, Any]) -> bytes:
            # a copy: orjson's own result keeps its whole write buffer (kilobytes) allocated
            text = bytes(memoryview(orjson.dumps(a)))
            self.args_bytes += len(text)
            self.args_kept.append(a)
            return text

        return lookup_encoded(self.args_text, list(map(id, args)), args, encode)


def row_texts(rows: ArgsRows) -> list[bytes]:
    """The args text of every position, as orjson prints each slice's args dict.

    A dict prints as its items, each `"key":value`, joined with commas: a shape's fixed
    items are printed once into a %-format whose `%b`s take the own fields' values, each
    printed by orjson on its own (`%.0b` swallows the fields a shape does not have).
    """
    formats = list(map(_FORMAT_OF, rows.shapes))
    for j in compress(count(), map(operator.is_, formats, repeat(None))):
        shape = rows.shapes[j]
        if shape.chrome_format is None:  # an earlier position may have the same shape
            shape.chrome_format = shape_format(shape)
        formats[j] = shape.chrome_format
    values = list(map(encoded_column, rows.columns))
    return list(map(operator.mod, formats, zip(*values)))


_FORMAT_OF = operator.attrgetter("chrome_format")
_NONE = type(None)


def encoded_column(values: list) -> list[bytes]:
    """Each value as orjson prints it."""
    kinds = set(map(type, values))
    if kinds <= {int, _NONE}:  # one call: ints and nulls print without commas
        return orjson.dumps(values)[1:-1].split(b",") if values else []
    if kinds <= {str, _NONE}:  # each distinct string printed once (sources repeat)
        return lookup_encoded({}, values, values, _copied_json)
    return list(map(_copied_json, values))


def _copied_json(value: Any) -> bytes:
    # a copy: orjson's own result keeps its whole write buffer (kilobytes) allocated
    return bytes(memoryview(orjson.dumps(value)))


def shape_format(shape: ArgsShape) -> bytes:
    """`{...}` with a `%b` per own field of the shape, a `%.0b` per other field, in OWN_FIELDS order."""
    parts = [b"{"]
    next_field = 0
    for k, (key, value, f) in enumerate(shape.items):
        comma = b"," if k else b""
        if f < 0:
            parts.append(comma + orjson.dumps({key: value})[1:-1].replace(b"%", b"%%"))
        else:
            parts.append(b"%.0b" * (f - next_field))
            parts.append(comma + orjson.dumps(key).replace(b"%", b"%%") + b":%b")
            next_field = f + 1
    parts.append(b"%.0b" * (len(OWN_FIELDS) - next_field) + b"}")
    return b"".join(parts)


def _drawn_index(layout) -> list[int]:
    """Position -> index in drawing order."""
    if layout.order is None:
        return list(range(len(layout.starts)))
    index = [0] * len(layout.order)
    for j, i in enumerate(layout.order):
        index[i] = j
    return index


class _Durations(dict):
    """ns -> printed µs (`dur_us`), remembered: ops repeat, so most lookups are hits."""

    def __missing__(self, ns: int) -> float:
        us = self[ns] = dur_us(ns)
        return us


def dur_us(ns: int) -> float:
    """`ns` in µs, printed so that both ways Perfetto reads a `dur` give back `ns`.

    Newer importers read the text (3 decimals, digits beyond ns cut off); some read it as a
    double and truncate `d * 1000`, which turns 1.001 into 1000 ns and can push a child 1 ns
    past its parent. For those values (about 0.6%) print the next double up instead
    (`1.0010000000000001`): its text still cuts to 1001 and its double no longer truncates.
    """
    us = ns / 1000
    if int(us * 1000.0) != ns:
        us = math.nextafter(us, math.inf)
    return us


def metadata_events(plan: Plan) -> list[dict[str, Any]]:
    """Process and thread names and their sort order (Perfetto ignores process labels)."""
    events: list[dict[str, Any]] = []
    for process in plan.processes:
        pid = process.pid
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process.name, **process.args}})
        events.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": process.rank}})
        for thread in process.threads:
            tid = thread.tid
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread.name}})
            events.append(
                {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": thread.sort_index}}
            )
    return events
