"""`et-convert validate`: read the input, run the checks, print the report, return the exit code.

Exit codes: 0 no errors, 1 errors found, 2 unusable input (raised as InputError for the CLI).
A Chrome trace (`.json` / `.json.gz` with `traceEvents`, or a bare event array) is checked
against Perfetto's import rules; anything else is read into the model and checked there.
A Chrome trace with NaN or Infinity is not strict JSON (Perfetto rejects it): that is finding
E080, and the other rules are checked on what a lenient parser reads; a file no JSON parser
reads is unusable input.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
import zlib
from pathlib import Path

import orjson

from ..diagnostics import Diagnostics, InputError, UsageError, at
from ..model import ExecutionTrace, Group
from ..options import Options, check
from .findings import Finding, Report

# chrome_rules rule name -> finding code
CHROME_CODES = {
    "json": "E080", "pid": "E081", "tid": "E082", "names": "E083", "dur": "E084",
    "nesting": "E085", "flow": "E086", "args": "E087",
}


def run(inputs, from_: str, options: Options, diagnostics: Diagnostics, fmt: str = "text",
        max_per_check: int = 20, groups: Path | None = None, out=None) -> int:
    if fmt not in ("text", "json"):
        raise UsageError(f"--format must be text or json, not {fmt!r}")
    check(options)
    out = out or sys.stdout
    max_per_check = max(0, max_per_check)
    from ..formats import expand_inputs

    started = time.perf_counter()
    group_file = read_group_file(groups)  # a bad --groups file fails before the input is read
    paths = expand_inputs(list(inputs))
    if from_ in ("chrome",) or (from_ in (None, "auto") and all(_looks_like_chrome(p) for p in paths)
                                and not _profiler_traces(paths)):
        report = chrome_report(paths)
    else:
        from ..api import read
        from . import validate_trace

        trace = read(paths, from_, options, diagnostics)
        if group_file is not None:
            apply_group_file(trace, group_file)
        report = validate_trace(trace, options)
    report.seconds = time.perf_counter() - started  # what the user waited for, reading included
    if fmt == "json":
        out.write(report.json(max_per_check).decode())
    else:
        out.write(report.text(max_per_check))
    return 1 if report.errors else 0


def _profiler_traces(paths: list[Path]) -> bool:
    """PyTorch profiler traces are read into the model (collective checks); `--from chrome`
    checks them against Perfetto's import rules instead."""
    from ..formats import read_head
    from ..readers.kineto import sniff

    return all(sniff(read_head(p), p) for p in paths)


def _looks_like_chrome(path: Path) -> bool:
    name = path.name.lower()
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    if head.startswith(b"\x1f\x8b"):
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 1 << 16)
        except zlib.error:
            return False
    head = head.lstrip()
    return head.startswith(b"[") or b'"traceEvents"' in head[:4096]


def chrome_report(paths: list[Path]) -> Report:
    from .chrome_rules import check_chrome_trace

    started = time.perf_counter()
    findings: list[Finding] = []
    pids: set = set()
    for path in paths:
        obj, not_strict = _load_json(path)
        if not_strict is not None:
            findings.append(not_strict)
        events = obj.get("traceEvents", []) if isinstance(obj, dict) else obj
        if isinstance(events, list):
            pids.update(e.get("pid") for e in events if isinstance(e, dict) and isinstance(e.get("pid"), (int, str)))
        for line in check_chrome_trace(obj, None):
            rule, _, what = line.partition(": ")
            code = CHROME_CODES.get(rule, "E089")
            findings.append(Finding(code, "chrome", what or line, source=path.name))
    return Report(findings, ["chrome"], len(pids), time.perf_counter() - started, unit="process")


def _load_json(path: Path) -> tuple[object, Finding | None]:
    """The parsed trace, and an E080 finding when only a lenient parser (NaN, Infinity) reads it."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    if data.startswith(b"\x1f\x8b"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(str(path), f"broken gzip data: {e}") from None
    try:
        return orjson.loads(data), None
    except orjson.JSONDecodeError as e:
        strict = e  # kept past the except block, which unbinds `e`
    try:
        lenient = json.loads(data)
    except (ValueError, RecursionError):
        raise InputError(at(str(path), strict.lineno),
                         f"not JSON (Perfetto rejects NaN, Infinity and trailing commas): {strict}") from None
    return lenient, Finding("E080", "chrome", f"a strict parser stops at line {strict.lineno} column {strict.colno}: "
                                              f"{strict.msg} (NaN or Infinity?); Perfetto rejects the file",
                            source=at(path.name, strict.lineno))


def read_group_file(path: Path | None) -> dict[int, tuple[int, ...]] | None:
    """The groups of `--groups FILE`, or None without the option."""
    from ..readers.chakra import parse_group_file

    return None if path is None else parse_group_file(path)


def apply_group_file(trace: ExecutionTrace, group_file: dict[int, tuple[int, ...]]) -> None:
    """Replace the trace's groups with those of `--groups FILE` (keeping known kinds by id)."""
    groups: dict[int, Group] = {}
    for gid, members in group_file.items():
        old = trace.groups.get(gid)
        groups[gid] = Group(gid, old.kind if old else "", members, old.name if old else "")
    trace.groups = groups
