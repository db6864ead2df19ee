"""Readers fail only with our one-line InputError, whatever bytes they are given.

Random bytes and random mutations (truncation, flipped bytes, deleted lines) of every sample
go through every reader; anything but InputError would reach the user as a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SAMPLES
from converters.diagnostics import Diagnostics, InputError
from converters.formats import INPUT_NAMES, input_format, resolve
from converters.options import Options

SEED_FILES = {
    "simai": "simai_tp8_pp16_1024gpu.txt",
    "neusight": "neusight_gpt2_block.tsv",
    "megatron-log": "megatron_rank4_pp_tp2.log",
    "optimus-log": "optimusprime_llama1b_pp8.log",
}
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


@pytest.mark.parametrize("fmt", sorted(SEED_FILES))
@FUZZ
@given(cut=st.integers(min_value=0, max_value=10**6), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4))
def test_mutated_samples_give_input_error_or_a_model(fmt, cut, flips, tmp_path_factory):
    data = bytearray((SAMPLES / SEED_FILES[fmt]).read_bytes())
    data = data[: cut % (len(data) + 1)]
    for where, value in flips:
        if data:
            data[where % len(data)] = value
    load_bytes(fmt, bytes(data), tmp_path_factory.mktemp("mut"))


@pytest.mark.parametrize("fmt", sorted(SEED_FILES))
@FUZZ
@given(drop=st.integers(min_value=0, max_value=10**4))
def test_samples_with_a_line_removed_give_input_error_or_a_model(fmt, drop, tmp_path_factory):
    lines = (SAMPLES / SEED_FILES[fmt]).read_bytes().splitlines(keepends=True)
    del lines[drop % len(lines)]
    load_bytes(fmt, b"".join(lines), tmp_path_factory.mktemp("del"))
