"""The seed corpus of each input format: inputs that reach deep into its reader and builder.

For a format named in `converters.formats.INPUT_FORMATS`, the seeds are
- every file under `samples/` and `tests/fixtures/` that the format's sniffer accepts, whole
  (a gzip file also inflated);
- when the format is also an output (chakra, et-json): what our writers make of every sample,
  so Chakra gets real `.et` files of every layout (logs, tables, per-stage graphs) and et-json
  real dumps;
- the malformed inputs of `tests/test_malformed.py` for the format: each sits just past one
  of the reader's checks.
The seeds name no format: a format added to the registry gets seeds from its samples (and is
fuzzed with default options until `VARIANTS` gives it others).
"""

from __future__ import annotations

import gzip
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from converters.diagnostics import Diagnostics, InputError, UsageError
from converters.formats import INPUT_FORMATS, OUTPUT_NAMES, detect, input_format, output_format, resolve
from converters.options import Options

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
FIXTURES = ROOT / "tests" / "fixtures"  # inputs made for the tests (profiler traces of GPU runs)
FILES_PER_SET = 3  # of a written Chakra set: ranks 0, 1, 2 (the others repeat their roles)
GZIP_MAGIC = b"\x1f\x8b"
MAX_RANKS_WRITTEN = 64  # a bigger sample's et-json dump is hundreds of MB: no seed to mutate


def options_for(fmt: str) -> Options:
    """What a format cannot be read without (ASTRA-sim text tables carry no rank count)."""
    return Options(num_npus=8) if fmt == "astra-text" else Options()


# Options that take a builder down other paths; the fuzzer loads each input once with every
# variant of its format. A format not named here is fuzzed with `options_for` alone.
VARIANTS = {
    "simai": [dict(mode="simai"), dict(schedule="gpipe", p2p_bytes=1 << 20, passes=2)],
    "astra-text": [dict(num_npus=4, tp=2, passes=2, tick_ns=2.5)],
    "neusight": [dict(pp=2, dp=2, num_layers=4, p2p_bytes=1 << 20), dict(tp=2, bytes_per_element=2, schedule="gpipe")],
    "megatron-log": [dict(strict=True), dict(retime=True), dict(tp=2)],
    "optimus-log": [dict(schedule="gpipe", bwd_factor=3.0, p2p_bytes=4096), dict(step=2)],
    "kineto": [dict(step=1), dict(merge_compute=False)],
}


def option_variants(fmt: str) -> list[Options]:
    base = options_for(fmt)
    return [base, *(replace(base, **changes) for changes in VARIANTS.get(fmt, []))]


def sample_files() -> list[Path]:
    return sorted(p for p in SAMPLES.rglob("*") if p.is_file() and not p.name.startswith("."))


def fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".py")


def accepted_samples(fmt: str) -> list[Path]:
    """The samples, then the test fixtures, that `fmt`'s sniffer accepts."""
    sniff = resolve(input_format(fmt).sniff)
    return [p for p in sample_files() + fixture_files() if sniff(p.read_bytes()[:1 << 16], p)]


def seed_name(path: Path) -> str:
    """A sample's name; a fixture's with its folder (the sets repeat `rank-0.json`)."""
    return path.name if path.is_relative_to(SAMPLES) else f"{path.parent.name}.{path.name}"


def input_name(fmt: str) -> str:
    """The name a fuzz input is given: that of the format's first sample, since readers may take
    the rank from a name (`workload.0.et`, `rank-3.json`); `input.txt` without a sample."""
    accepted = accepted_samples(fmt)
    return accepted[0].name if accepted else "input.txt"


def written_samples(fmt: str) -> dict[str, bytes]:
    """Every sample this tool reads, written as `fmt` (an output format too)."""
    from converters import api

    out: dict[str, bytes] = {}
    inputs = sorted({p.parent if p.suffix == ".et" else p for p in sample_files()})
    with tempfile.TemporaryDirectory() as tmp:
        for i, source in enumerate(inputs):
            try:
                trace = api.read(source, options=options_for(detect(api.expand_inputs([source]))))
            except (InputError, UsageError):
                continue  # not an input (a network file, the text a Chakra sample was made from)
            if len(trace.ranks) > MAX_RANKS_WRITTEN:
                continue
            prefix = Path(tmp) / f"s{i}" / "w"
            resolve(output_format(fmt, prefix).write)(trace, prefix, Options(), Diagnostics())
            for path in sorted(prefix.parent.iterdir(), key=rank_order)[:FILES_PER_SET]:
                out[f"{source.stem}.{path.name}"] = path.read_bytes()
    return out


def rank_order(path: Path) -> tuple[int, str]:
    """`w.10.et` after `w.2.et`; files without a rank number last."""
    parts = path.name.split(".")
    return (int(parts[1]), path.name) if len(parts) > 2 and parts[1].isdigit() else (1 << 30, path.name)


def malformed_inputs(fmt: str) -> dict[str, bytes]:
    """The broken inputs of the test suite's malformed corpus for `fmt`."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import test_malformed
    except ImportError:  # the test tools are not installed
        return {}
    out: dict[str, bytes] = {}
    for case in test_malformed.CASES:
        if case.fmt != fmt or case.xfail:
            continue
        files, _ = case.make()
        for name, data in files.items():
            if not name.endswith("comm_group.json"):
                out[f"malformed.{case.id}.{name}"] = data
    return out


def write_seeds(fmt: str, directory: Path) -> int:
    """Fill `directory` with the seeds of `fmt`; returns how many."""
    directory.mkdir(parents=True, exist_ok=True)
    seeds = {seed_name(p): p.read_bytes() for p in accepted_samples(fmt)}
    for name, data in list(seeds.items()):
        if data.startswith(GZIP_MAGIC):  # mutating the inflated text reaches the parser
            seeds[f"{name}.inflated"] = gzip.decompress(data)
    if fmt in OUTPUT_NAMES:
        seeds.update(written_samples(fmt))
    seeds.update(malformed_inputs(fmt))
    unique = {data: name for name, data in sorted(seeds.items())}  # a set's unbroken files repeat
    for data, name in unique.items():
        (directory / name).write_bytes(data)
    return len(unique)


if __name__ == "__main__":  # python fuzz/seeds.py DIR: look at the seeds
    for fmt in INPUT_FORMATS:
        print(fmt.name, write_seeds(fmt.name, Path(sys.argv[1]) / fmt.name))
