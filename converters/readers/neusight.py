"""NeuSight-style workload tables (`samples/neusight_gpt2_block.tsv`): parse into plain records.

Tab-separated, one header row naming 11 columns, then one FX node per row in forward
order. Times are predicted latencies in ms (floats); comm sizes are element counts; `None`
means no communication (FORMATS.md §4). Units are converted by the builder, not here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import InputError, at
from .text import read_lines

COLUMNS = (
    "name", "forward_compute_time", "forward_comm_type", "forward_comm_size", "backward_compute_time",
    "backward_comm_type", "backward_comm_size", "weight_grad_compute_time", "weight_grad_comm_type",
    "weight_grad_comm_size", "process_time",
)
COLLECTIVES = ("ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL")
# Times become int64 nanoseconds and sizes int64 bytes in Chakra nodes; more is a broken file.
MAX_NS = (1 << 63) - 1
MAX_MS = MAX_NS // 1_000_000
MAX_ELEMENTS = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class NeuComm:
    kind: str  # ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL
    asynchronous: bool  # written with an _ASYNC suffix
    elements: int
    token: str  # as written, e.g. ALLREDUCE_ASYNC


@dataclass(slots=True)
class NeuRow:
    name: str
    line: int
    forward_ms: float
    forward_comm: NeuComm | None
    backward_ms: float
    backward_comm: NeuComm | None
    weight_grad_ms: float
    weight_grad_comm: NeuComm | None
    process_ms: float


def sniff(head: bytes, path: Path) -> bool:
    first = head.removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0].rstrip(b"\r")
    return first.split(b"\t")[:2] == [b"name", b"forward_compute_time"]


def parse(path: Path) -> list[NeuRow]:
    lines = read_lines(path)
    name = str(path)
    if not lines or lines[0].split("\t") != list(COLUMNS):
        found = lines[0].split("\t") if lines else []
        raise InputError(at(name, 1), f"expected the header row {' '.join(COLUMNS[:3])} ... ({len(COLUMNS)} tab-separated "
                                      f"columns), found {' '.join(found[:3]) or 'nothing'}{' ...' if len(found) > 3 else ''}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        rows.append(parse_row(name, number, line.split("\t")))
    if not rows:
        raise InputError(at(name, 1), "the table has a header but no rows")
    return rows


def parse_row(path: str, line: int, cells: list[str]) -> NeuRow:
    where = at(path, line)
    if len(cells) != len(COLUMNS):
        raise InputError(where, f"expected {len(COLUMNS)} tab-separated columns (name, forward_compute_time, "
                                f"forward_comm_type, ...), found {len(cells)}")
    ms = lambda i: _ms(where, COLUMNS[i], cells[i])  # noqa: E731
    comm = lambda i: _comm(where, COLUMNS[i], cells[i], cells[i + 1])  # noqa: E731
    return NeuRow(cells[0], line, ms(1), comm(2), ms(4), comm(5), ms(7), comm(8), ms(10))


def _ms(where: str, column: str, cell: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(where, f"{column}: expected a time in ms >= 0, found {cell!r}")
    if value > MAX_MS:
        raise InputError(where, f"{column}: {cell} ms is too long (at most {MAX_MS} ms)")
    return value


def _comm(where: str, column: str, kind_cell: str, size_cell: str) -> NeuComm | None:
    size_column = column.replace("_type", "_size")
    try:
        size = float(size_cell)
    except ValueError:
        size = math.nan
    if not math.isfinite(size) or size < 0 or size != int(size):
        raise InputError(where, f"{size_column}: expected a whole element count >= 0, found {size_cell!r}")
    if size > MAX_ELEMENTS:
        raise InputError(where, f"{size_column}: {size_cell} elements is too many (at most 2^63 - 1)")
    if kind_cell == "None":
        return None
    base = kind_cell.removesuffix("_ASYNC")
    if base not in COLLECTIVES:
        raise InputError(where, f"{column}: unknown comm type {kind_cell!r}; expected None or one of "
                                f"{', '.join(COLLECTIVES)} (optionally with _ASYNC)")
    return NeuComm(base, kind_cell.endswith("_ASYNC"), int(size), kind_cell)
