"""api.read records the sha256 of the input bytes (all files, in the order given), hashed on a
thread while the reader parses them, or in place beside --jobs workers."""

from __future__ import annotations

import hashlib
import threading

import pytest

from conftest import SAMPLES
from converters import api
from converters.diagnostics import Diagnostics, InputError


def _sha256(paths) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.parametrize("name,jobs", [("megatron_tp1_pp2_dp2", None), ("megatron_tp1_pp2_dp2", 2),
                                       ("simai_tp8_pp16_1024gpu.txt", None), ("pytorch_gloo_4rank", None)])
def test_the_hash_is_of_every_input_byte_in_order(name, jobs):
    paths = api._as_paths(SAMPLES / name)
    trace = api.read(SAMPLES / name, jobs=jobs, diagnostics=Diagnostics())
    assert trace.source.sha256 == _sha256(paths)


def test_the_hashing_thread_is_joined_and_a_vanished_file_is_hashed_again(tmp_path):
    log = tmp_path / "r.log"
    log.write_bytes((SAMPLES / "megatron_rank4_pp_tp2.log").read_bytes())
    trace = api.read(log, diagnostics=Diagnostics())
    assert trace.source.sha256 == _sha256([log])
    assert not [t for t in threading.enumerate() if t.name == "et-convert sha256"]
    hashing = api._HashOnAThread([tmp_path / "missing.log"])
    with pytest.raises(FileNotFoundError):  # the thread's failure is not hidden by a wrong hash
        hashing.result()


def test_an_unreadable_input_still_fails_with_the_readers_error(tmp_path):
    bad = tmp_path / "w.txt"
    bad.write_text("DATA\nnot a number\n")
    with pytest.raises(InputError, match=r"w\.txt:2"):
        api.read(bad, fmt="astra-text", diagnostics=Diagnostics())
