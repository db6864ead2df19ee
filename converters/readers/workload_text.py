"""ASTRA-sim 1.0 text workloads and their SimAI/AICB dialect: parse into plain records.

Line 1 is the policy keyword and its header fields, line 2 the row count, then one row per
line with 12 whitespace-separated columns (13 for HYBRID_CUSTOMIZED, whose last column, after
the update delay, is the row's own policy: where ASTRA-sim 1.0 and SimAI read it). `BROADCAST`
is read as a comm type of its own; the builders decide what it becomes. See FORMATS.md §5.
This module only parses and checks; what the rows mean for each rank is decided in
`converters.builders.workload`.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics import Diagnostics, InputError, at
from .text import BOM, read_lines

POLICIES = (
    "MICRO", "DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_TRANSFORMER",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_DLRM", "HYBRID_DLRM_ENHANCED", "HYBRID_CUSTOMIZED",
    "DISTRIBUTED_INFERENCE",
)
# Policies a HYBRID_CUSTOMIZED row may name for itself.
ROW_POLICIES = ("DATA", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_TRANSFORMER")
COLLECTIVES = ("ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL")
# AICB writes it; the simulators read it as no collective (an unknown keyword to them).
BROADCAST = "BROADCAST"
SCOPES = ("EP", "DP_EP")  # SimAI suffixes naming the group: X_EP, X_DP_EP
COLUMNS = (
    "name", "reserved", "fwd_compute", "fwd_comm_type", "fwd_comm_size", "ig_compute",
    "ig_comm_type", "ig_comm_size", "wg_compute", "wg_comm_type", "wg_comm_size", "update_delay",
)
# Header keys that only SimAI/AICB files carry (ASTRA-sim 1.0 files never do).
SIMAI_KEYS = ("all_gpus", "pp", "ga", "ep", "vpp", "pp_comm")
INT_KEYS = ("model_parallel_NPU_group", "all_gpus", "pp", "ga", "ep", "vpp", "DLRM_LAST_BOTTOM_LAYER")
LIST_KEYS = ("checkpoints", "checkpoint_initiates")  # count, then that many row indices
KNOWN_KEYS = (*INT_KEYS, "pp_comm", *LIST_KEYS)
# Detection reads the first two non-blank lines; blank lines before them are rare.
SNIFF_LINES = 64
# Times and sizes end up in int64 fields of Chakra nodes; a larger number is a broken file.
MAX_NUMBER = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Comm:
    """One collective of a row: `kind` is ALLREDUCE/ALLGATHER/REDUCESCATTER/ALLTOALL,
    `scope` is "" (the column's default group), "EP" or "DP_EP" (SimAI suffixes)."""

    kind: str
    scope: str
    size: int  # bytes as written (ALLGATHER: SimAI writes the total gathered bytes)
    column: str  # fwd, ig or wg


@dataclass(slots=True)
class Row:
    name: str
    line: int
    fwd_compute: int
    fwd_comm: Comm | None  # None = NONE
    ig_compute: int
    ig_comm: Comm | None
    wg_compute: int
    wg_comm: Comm | None
    update_delay: int
    policy: str | None = None  # HYBRID_CUSTOMIZED: the row's own policy
    # Comms written with size 0 (a real comm type but nothing to send), per column.
    zero_size: tuple[str, ...] = ()
    zero_kinds: tuple[str, ...] = ()


@dataclass
class Workload:
    path: str  # as given, for messages
    dialect: str  # "simai" or "astra"
    policy: str
    header: dict[str, int | float | list[int]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    def where(self, line: int | None = None) -> str:
        return at(self.path, line)


# ---------------------------------------------------------------- sniffing


def _first_lines(head: bytes) -> list[str] | None:
    """The first two non-blank lines of the head: all that detection looks at.

    Only these are decoded, and leniently: a byte that is not UTF-8 further down (or even in
    these lines) is for the reader to report at its line and column, not a reason to leave
    the format unknown.
    """
    head = head.removeprefix(BOM)
    lines = [raw.decode("utf-8", errors="replace") for raw in head.splitlines()[:SNIFF_LINES] if raw.strip()]
    return lines[:2] if len(lines) >= 2 else None


def _header_keys(tokens: list[str]) -> set[str]:
    return {tok.rstrip(":") for tok in tokens}


def _known_keys(tokens: list[str]) -> set[str]:
    """Header keys written as keys (`name:`) that the readers know."""
    return {tok[:-1] for tok in tokens if tok.endswith(":") and tok[:-1] in KNOWN_KEYS}


def _near_policy(word: str) -> bool:
    """A policy keyword, or a misspelling of one (`HYBRID_TRANSFORMR`, `DATTA`)."""
    return word in POLICIES or bool(difflib.get_close_matches(word.upper(), POLICIES, n=1, cutoff=0.8))


def _looks_like_workload(head: bytes) -> tuple[bool, set[str]]:
    """Whether the head is a workload table, even one with a broken header, and its header keys.

    A table is claimed on its shape, not its correctness, so that the reader can name the
    bad line: line 1 starts with a policy (or a near miss of one, or leaves it out and starts
    with header keys) and either carries known header keys or is followed by a line that
    starts with the row count (`557`, or a broken `557 rows`).
    """
    lines = _first_lines(head)
    if not lines:
        return False, set()
    tokens, count = lines[0].split(), lines[1].split()
    if not tokens:
        return False, set()
    known = _known_keys(tokens)
    starts_like_header = _near_policy(tokens[0]) or (tokens[0][:-1] in known and len(known) >= 2)
    count_follows = bool(count) and count[0][:1].isascii() and count[0][:1].isdigit()
    ok = starts_like_header and (count_follows or bool(known))
    return ok, _header_keys(tokens) if ok else set()


def sniff_simai(head: bytes, path: Path) -> bool:
    ok, keys = _looks_like_workload(head)
    return ok and bool(keys & set(SIMAI_KEYS))


def sniff_astra(head: bytes, path: Path) -> bool:
    ok, keys = _looks_like_workload(head)
    return ok and not keys & set(SIMAI_KEYS)


# ---------------------------------------------------------------- parsing


def parse(path: Path, dialect: str, diagnostics: Diagnostics) -> Workload:
    """Parse a workload file (`dialect` "simai" or "astra") into a `Workload`."""
    lines = read_lines(path)
    name = str(path)
    numbered = [(i + 1, line.split()) for i, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise InputError(name, "file is empty")
    header_line, header_tokens = numbered[0]
    workload = Workload(name, dialect, "")
    workload.policy, workload.header = parse_header(workload, header_line, header_tokens, diagnostics)
    if len(numbered) < 2:
        raise InputError(at(name, header_line), "expected the row count on the next line, found the end of the file")
    count_line, count_tokens = numbered[1]
    if len(count_tokens) != 1 or not (count_tokens[0].isascii() and count_tokens[0].isdigit()):
        raise InputError(at(name, count_line), f"expected the row count (one whole number), found {' '.join(count_tokens)!r}")
    count = int(count_tokens[0])
    if count == 0:
        raise InputError(at(name, count_line), "the workload has no rows")
    body = numbered[2:]
    if len(body) < count:
        last = body[-1][0] if body else count_line
        raise InputError(at(name, last), f"the file ends after {len(body)} of the {count} rows line {count_line} "
                                         "announces (truncated?)")
    if len(body) > count:
        body = _announced_rows_only(name, count_line, count, body, diagnostics)
    customized = workload.policy == "HYBRID_CUSTOMIZED"
    workload.rows = [parse_row(workload, line, tokens, customized) for line, tokens in body]
    return workload


def _announced_rows_only(name: str, count_line: int, count: int, body: list, diagnostics: Diagnostics) -> list:
    """The announced rows; the simulators read that many and never look at the rest."""
    diagnostics.warn(
        "extra-rows",
        f"{at(name, body[count][0])}: line {count_line} announces {count} rows, found {len(body)}; "
        f"converted the first {count} and ignored the rest, as the simulators do",
    )
    return body[:count]


def parse_header(workload: Workload, line: int, tokens: list[str], diagnostics: Diagnostics):
    where = workload.where(line)
    policy = tokens[0]
    if policy not in POLICIES:
        raise InputError(where, f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    header: dict[str, int | float | list[int]] = {}
    i = 1
    if policy in ("HYBRID_DLRM", "HYBRID_DLRM_ENHANCED") and len(tokens) > 1 and _is_int(tokens[1]):
        header["DLRM_LAST_BOTTOM_LAYER"] = int(tokens[1])  # the bare-number form
        i = 2
    while i < len(tokens):
        key = tokens[i].rstrip(":")
        if key in INT_KEYS:
            header[key] = _header_int(where, key, tokens, i + 1)
            i += 2
        elif key == "pp_comm":
            header[key] = _header_number(where, key, tokens, i + 1)
            i += 2
        elif key in LIST_KEYS:
            n = _header_int(where, key, tokens, i + 1)
            values = [_header_int(where, key, tokens, i + 2 + k) for k in range(n)]
            header[key] = values
            i += 2 + n
        elif tokens[i].endswith(":"):
            # The simulators skip keys they do not know; say so rather than guess a meaning.
            diagnostics.warn(f"header-key:{key}", f"{where}: ignored unknown header key {tokens[i]!r}")
            i += 2
        else:
            raise InputError(where, f"expected a header key such as 'model_parallel_NPU_group:', found {tokens[i]!r}")
    return policy, header


def _header_int(where: str, key: str, tokens: list[str], i: int) -> int:
    if i >= len(tokens):
        raise InputError(where, f"{key}: expected a number after it, found the end of the line")
    value = tokens[i]
    if not _is_int(value) or int(value) < 0:
        raise InputError(where, f"{key}: expected a whole number >= 0, found {value!r}")
    return _not_absurd(where, key, int(value))


def _header_number(where: str, key: str, tokens: list[str], i: int) -> int:
    """A byte count SimAI may write as a float (`8388608.0`)."""
    if i >= len(tokens):
        raise InputError(where, f"{key}: expected a number after it, found the end of the line")
    try:
        value = float(tokens[i])
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise InputError(where, f"{key}: expected a whole number of bytes, found {tokens[i]!r}")
    return _not_absurd(where, key, int(value))


def _is_int(token: str) -> bool:
    return token.isascii() and token.removeprefix("-").isdigit()  # one sign at most: "--1" is no number


def parse_row(workload: Workload, line: int, tokens: list[str], customized: bool) -> Row:
    where = workload.where(line)
    expected = 13 if customized else 12
    if len(tokens) != expected:
        names = ("name, reserved, fwd_compute, ..., update_delay, policy" if customized
                 else "name, reserved, fwd_compute, fwd_comm_type, ...")
        raise InputError(where, f"expected {expected} columns ({names}), found {len(tokens)}")
    policy = _row_policy(where, tokens) if customized else None
    if not _is_int(tokens[1]):
        raise InputError(where, f"reserved: expected a whole number (usually -1), found {tokens[1]!r}")
    number = lambda col: _row_int(where, COLUMNS[col], tokens[col])  # noqa: E731
    zero_size: list[str] = []
    zero_kinds: list[str] = []

    def comm(col: int, column: str) -> Comm | None:
        kind, scope = _comm_type(workload, where, COLUMNS[col], tokens[col])
        size = number(col + 1)
        if kind is None:
            return None
        if size == 0:
            zero_size.append(column)
            zero_kinds.append(tokens[col])
            return None
        return Comm(kind, scope, size, column)

    fwd, ig, wg = comm(3, "fwd"), comm(6, "ig"), comm(9, "wg")
    return Row(
        name=tokens[0], line=line, fwd_compute=number(2), fwd_comm=fwd, ig_compute=number(5), ig_comm=ig,
        wg_compute=number(8), wg_comm=wg, update_delay=number(11), policy=policy,
        zero_size=tuple(zero_size), zero_kinds=tuple(zero_kinds),
    )


def _row_policy(where: str, tokens: list[str]) -> str:
    """A HYBRID_CUSTOMIZED row's own policy: the 13th token, after the update delay, where
    ASTRA-sim 1.0 and SimAI read it. A policy in the second column is a file written for
    another reader; the simulators would take it as `reserved` and fail on the 13th token."""
    policy = tokens[12]
    if tokens[1] in ROW_POLICIES:
        raise InputError(where, f"row policy {tokens[1]!r} is in column 2 (reserved); ASTRA-sim 1.0 and SimAI "
                                "read it from column 13, after update_delay: move it to the end of the row")
    if policy not in ROW_POLICIES:
        raise InputError(where, f"policy (column 13, after update_delay): unknown row policy {policy!r}; "
                                f"expected one of {', '.join(ROW_POLICIES)}")
    return policy


def _row_int(where: str, column: str, token: str) -> int:
    if not (token.isascii() and token.isdigit()):
        raise InputError(where, f"{column}: expected a whole number >= 0, found {token!r}")
    return _not_absurd(where, column, int(token))


def _not_absurd(where: str, what: str, value: int) -> int:
    if value > MAX_NUMBER:
        raise InputError(where, f"{what}: {value} is too large (at most 2^63 - 1)")
    return value


def _comm_type(workload: Workload, where: str, column: str, token: str) -> tuple[str | None, str]:
    if token == "NONE":
        return None, ""
    base, scope = token, ""
    for suffix in SCOPES:  # DP_EP before EP would matter only if EP were checked first
        if token.endswith("_" + suffix) and token[: -len(suffix) - 1] in (*COLLECTIVES, BROADCAST):
            base, scope = token[: -len(suffix) - 1], suffix
            break
    if scope and workload.dialect != "simai":
        raise InputError(where, f"{column}: {token!r} is a SimAI comm type; ASTRA-sim 1.0 knows only "
                                f"{', '.join(COLLECTIVES)} and NONE (give --from simai if this is a SimAI file)")
    if base == "ALLREDUCEALLTOALL":
        raise InputError(where, f"{column}: ALLREDUCEALLTOALL is parsed by ASTRA-sim 1.0 but it cannot run it; "
                                "use ALLREDUCE or ALLTOALL")
    if base not in COLLECTIVES and base != BROADCAST:
        extra = " (optionally with _EP or _DP_EP)" if workload.dialect == "simai" else ""
        raise InputError(where, f"{column}: unknown comm type {token!r}; expected "
                                f"{', '.join(COLLECTIVES)}{extra} or NONE")
    return base, scope
