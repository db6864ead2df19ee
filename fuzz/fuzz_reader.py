"""Fuzz one input format with atheris: any exception other than our InputError is a bug.
For Chakra, `stats` of a set read as node columns must also equal `stats` of its Nodes
(`converters/stats.py`: measured_set_stats against stats_of), or the input is a crash.

    python fuzz/fuzz_reader.py FORMAT CORPUS_DIR... [libFuzzer flags, e.g. -max_total_time=600]

Each input is written to a file and given to the format's loader (reader and builder), as
`et-convert --from FORMAT` would, once with each of the format's option variants (`seeds.VARIANTS`). `fuzz/run.py` (what `make fuzz` calls) runs this for every
format in `converters.formats.INPUT_FORMATS` and writes the seed corpus first (`fuzz/seeds.py`).

Every module of the `converters` package is imported inside `atheris.instrument_imports()`,
readers and builders included: the registry names them as strings and `formats.resolve`
imports them only when a format is used, which would be after instrumentation has closed and
leave libFuzzer blind inside the parsers.
"""

from __future__ import annotations

import os
import pkgutil
import sys
import tempfile
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

with atheris.instrument_imports(include=["converters"]):
    import converters
    from converters.diagnostics import Diagnostics, InputError, UsageError
    from converters.formats import INPUT_FORMATS, input_format, resolve

    for _module in pkgutil.walk_packages(converters.__path__, "converters."):
        if _module.name != "converters.cli":  # typer's import time, and never called here
            __import__(_module.name)
    for _fmt in INPUT_FORMATS:  # a format whose code lives outside the package is found too
        resolve(_fmt.sniff), resolve(_fmt.load)

from seeds import input_name, option_variants  # noqa: E402 (after the instrumented imports)


def main() -> None:
    fmt = input_format(sys.argv[1]).name
    load = resolve(input_format(fmt).load)
    variants = option_variants(fmt)
    path = Path(tempfile.mkdtemp(prefix="etfuzz.")) / input_name(fmt)

    def one_input(data: bytes) -> None:
        path.write_bytes(data)
        for options in variants:
            try:
                trace = load([path], options, Diagnostics())
            except (InputError, UsageError):
                continue
            if fmt == "chakra":
                same_stats_both_ways(path, trace, options)

    atheris.Setup([sys.argv[0], *sys.argv[2:]], one_input)
    atheris.Fuzz()


def same_stats_both_ways(path: Path, trace, options) -> None:
    """`stats` by node columns, where the set is one they stand for, is `stats` by Nodes."""
    from converters.stats import measured_set_stats, stats_of
    from converters.timeline import timeline_for

    by_columns = measured_set_stats([path], "chakra", options, Diagnostics())
    if by_columns is not None and by_columns != stats_of(trace, timeline_for(trace, options)):
        raise AssertionError(f"stats by columns differ from stats by Nodes: {by_columns}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
