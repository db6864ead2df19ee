"""The library API: everything the CLI does, callable from Python.

    import converters as etc
    trace = etc.read("samples/simai_tp8_pp16_1024gpu.txt")
    timeline = etc.schedule(trace)
    findings = etc.validate(trace)
    etc.write(trace, "out/w", to="chakra")
    etc.convert("samples/megatron_rank4_pp_tp2.log", "rank4.json")
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Iterable

from . import progress
from .diagnostics import Diagnostics
from .formats import detect, expand_inputs, input_format, output_format, refuse_overwriting_inputs, resolve
from .model import ExecutionTrace
from .options import Options, check


def _as_paths(inputs: str | Path | Iterable[str | Path]) -> list[Path]:
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    return expand_inputs(list(inputs))


def read(
    inputs: str | Path | Iterable[str | Path],
    fmt: str = "auto",
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
    **option_values,
) -> ExecutionTrace:
    """Read one input (files or a directory) into the model. `fmt="auto"` detects the format."""
    options = replace(options or Options(), **option_values)
    check(options)
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    paths = _as_paths(inputs)
    name = detect(paths) if fmt in (None, "auto") else input_format(fmt).name
    diagnostics.note(f"reading {', '.join(p.name for p in paths[:3])}{' ...' if len(paths) > 3 else ''} as {name}")
    with progress.bar(f"reading {paths[0].name}{f' and {len(paths) - 1} more' if len(paths) > 1 else ''} as {name}"):
        trace = resolve(input_format(name).load)(paths, options, diagnostics)
    trace.source.format = trace.source.format or name
    if not trace.source.files:
        trace.source.files = [p.name for p in paths]
    if not trace.source.sha256:
        trace.source.sha256 = sha256_of(paths)
    diagnostics.list_assumptions(trace.assumptions)  # shown with -v
    return trace


def sha256_of(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def schedule(trace: ExecutionTrace, options: Options | None = None):
    """A timeline for every node: measured times when the input has them, else the scheduler's."""
    from .timeline import timeline_for

    return timeline_for(trace, options or Options())


def validate(trace: ExecutionTrace, options: Options | None = None):
    """Findings about the trace (the checks and their codes: the package `converters/validate/`)."""
    from .validate import run_checks

    return run_checks(trace, options or Options())


def write(
    trace: ExecutionTrace,
    output: str | Path,
    to: str | None = None,
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
) -> None:
    """Write the trace; `to` defaults from the output name (.json, .json.gz, .pftrace)."""
    output = Path(output)
    fmt = output_format(to, output)
    options = options or Options()
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    if fmt.name == "chakra":
        with progress.bar("checking the set before writing it"):
            _gate_chakra_set(trace, options, diagnostics)
    with progress.bar(f"writing {output} ({fmt.name})"):
        resolve(fmt.write)(trace, output, options, diagnostics)


def _gate_chakra_set(trace: ExecutionTrace, options: Options, diagnostics: Diagnostics) -> None:
    """Refuse to write a Chakra set a simulator would stall on (unless --force).

    A set restored from an et-json dump is gated like any other input: a faulty dump is
    restored, faults included, only with --force.
    """
    from .validate import gate

    gate(trace, options, diagnostics)


def convert(
    inputs: str | Path | Iterable[str | Path],
    output: str | Path,
    to: str | None = None,
    fmt: str = "auto",
    options: Options | None = None,
    diagnostics: Diagnostics | None = None,
    **option_values,
) -> ExecutionTrace:
    """Read `inputs` and write `output` in one call; returns the model that was written.

    An unusable output name or option value, or an output that would replace an input, fails
    before any reading.
    """
    options = replace(options or Options(), **option_values)
    check(options)  # a bad option fails before any input is read, whatever the output
    diagnostics = diagnostics if diagnostics is not None else Diagnostics()
    paths = _as_paths(inputs)
    refuse_overwriting_inputs(paths, Path(output), output_format(to, Path(output)))
    trace = read(paths, fmt, options, diagnostics)
    write(trace, output, to, options, diagnostics)
    return trace
