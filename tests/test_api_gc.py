"""api.read and api.convert pause the cyclic GC while they make the model, and leave it as it was."""

from __future__ import annotations

import gc
import weakref

from conftest import SAMPLES
from converters import api
from converters.options import Options

LOG = SAMPLES / "megatron_rank4_pp_tp2.log"


class _Cyclic:
    pass


def test_collector_back_on_and_cycles_made_meanwhile_still_collected():
    assert gc.isenabled()
    with api._collector_paused(Options()):
        assert not gc.isenabled()
        garbage = _Cyclic()
        garbage.me = garbage  # a cycle only the cyclic GC frees
        alive = weakref.ref(garbage)
        del garbage
    assert gc.isenabled()
    gc.collect()
    assert alive() is None


def test_left_off_when_it_was_off_and_not_paused_on_a_cluster():
    gc.disable()
    try:
        with api._collector_paused(Options()):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with api._collector_paused(Options(cluster="local:1")):
        assert gc.isenabled()


def test_read_and_convert_leave_it_on(tmp_path):
    api.read(LOG)
    assert gc.isenabled()
    api.convert(LOG, tmp_path / "w", to="chakra")
    assert gc.isenabled()
