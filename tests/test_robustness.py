"""Readers fail only with our one-line InputError, whatever bytes they are given.

Random bytes and random mutations (truncation, flipped bytes, deleted lines) of every sample
go through every reader; anything but InputError would reach the user as a traceback. Random
valid models survive the et-json dump unchanged.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SAMPLES
from converters.diagnostics import Diagnostics, InputError
from converters.formats import INPUT_NAMES, input_format, resolve
from converters.options import Options
from converters.readers import et_json as et_json_reader
from converters.writers import chakra as chakra_writer
from converters.writers import et_json as et_json_writer
from test_chakra_writer import carried, models
from test_malformed import et_json_dump

SEED_FILES = {
    "simai": "simai_tp8_pp16_1024gpu.txt",
    "astra-text": "workloads/astra_transformer_recompute.txt",
    "neusight": "neusight_gpt2_block.tsv",
    "megatron-log": "megatron_rank4_pp_tp2.log",
    "optimus-log": "optimusprime_llama1b_pp8.log",
}
CHAKRA_SETS = ("chakra_data", "chakra_model")
SUFFIX = {"chakra": ".0.et", "et-json": ".json"}
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def load_bytes(fmt: str, data: bytes, tmp: Path) -> None:
    path = tmp / f"input{SUFFIX.get(fmt, '.txt')}"
    path.write_bytes(data)
    options = Options(num_npus=8) if fmt == "astra-text" else Options()
    try:
        resolve(input_format(fmt).load)([path], options, Diagnostics())
    except InputError as e:
        assert "\n" not in str(e), f"error message spans lines: {e!r}"


@pytest.mark.parametrize("fmt", INPUT_NAMES)
@FUZZ
@given(data=st.binary(max_size=2048))
def test_random_bytes_give_input_error_or_a_model(fmt, data, tmp_path_factory):
    load_bytes(fmt, data, tmp_path_factory.mktemp("rb"))


@functools.cache
def seed(fmt: str) -> bytes:
    """A valid input of `fmt` to mutate: a sample, or for et-json our dump of samples/chakra_data."""
    return et_json_dump() if fmt == "et-json" else (SAMPLES / SEED_FILES[fmt]).read_bytes()


CUTS = st.integers(min_value=0, max_value=10**6)
FLIPS = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4)


def mutated(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    """`data` cut short at `cut` (modulo its length + 1), then with bytes overwritten at `flips`."""
    out = bytearray(data[: cut % (len(data) + 1)])
    for where, value in flips:
        if out:
            out[where % len(out)] = value
    return bytes(out)


@pytest.mark.parametrize("fmt", [*sorted(SEED_FILES), "et-json"])
@FUZZ
@given(cut=CUTS, flips=FLIPS)
def test_mutated_samples_give_input_error_or_a_model(fmt, cut, flips, tmp_path_factory):
    load_bytes(fmt, mutated(seed(fmt), cut, flips), tmp_path_factory.mktemp("mut"))


@pytest.mark.parametrize("sample", CHAKRA_SETS)
@FUZZ
@given(rank=st.integers(0, 3), cut=CUTS, flips=FLIPS)
def test_a_chakra_set_with_one_mutated_rank_gives_input_error_or_a_model(sample, rank, cut, flips, tmp_path_factory):
    """One broken file among intact ones: the reader compares files with those read before."""
    directory = tmp_path_factory.mktemp("set")
    originals = sorted((SAMPLES / sample).glob("*.et"))
    for path in originals:
        data = path.read_bytes()
        (directory / path.name).write_bytes(mutated(data, cut, flips) if path.name == f"workload.{rank}.et" else data)
    try:
        resolve(input_format("chakra").load)(sorted(directory.glob("*.et")), Options(), Diagnostics())
    except InputError as e:
        assert "\n" not in str(e), f"error message spans lines: {e!r}"


@pytest.mark.parametrize("fmt", sorted(SEED_FILES))  # text formats only: a dump is one line
@FUZZ
@given(drop=st.integers(min_value=0, max_value=10**4))
def test_samples_with_a_line_removed_give_input_error_or_a_model(fmt, drop, tmp_path_factory):
    lines = (SAMPLES / SEED_FILES[fmt]).read_bytes().splitlines(keepends=True)
    del lines[drop % len(lines)]
    load_bytes(fmt, b"".join(lines), tmp_path_factory.mktemp("del"))


# -- property: random valid models survive the et-json dump ------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(trace=models())
def test_random_models_round_trip_through_the_et_json_dump(trace, tmp_path_factory):
    """model -> dump -> model keeps every field Chakra carries and every group, and the restored
    set's rank files are byte for byte those the model gives when written directly."""
    out = tmp_path_factory.mktemp("dump")
    et_json_writer.write(trace, out / "dump.json", Options(), Diagnostics())
    back = et_json_reader.load([out / "dump.json"], Options(), Diagnostics())
    assert sorted(back.ranks) == sorted(trace.ranks)
    for r, rank in trace.ranks.items():
        assert [carried(n) for n in back.ranks[r].nodes] == [carried(n) for n in rank.nodes]
    # Unlike a Chakra set (comm_group.json holds the groups nodes use), the dump keeps every group.
    assert {g: (x.kind, x.members) for g, x in back.groups.items()} == {
        g: (x.kind, x.members) for g, x in trace.groups.items()}
    chakra_writer.write(trace, out / "direct" / "w", Options(), Diagnostics())
    chakra_writer.write(back, out / "restored" / "w", Options(), Diagnostics())
    # Rank files only: a restored set writes every group it holds, the direct write those nodes use.
    direct = {p.name: p.read_bytes() for p in (out / "direct").glob("*.et")}
    assert {p.name: p.read_bytes() for p in (out / "restored").glob("*.et")} == direct
