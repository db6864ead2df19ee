"""api.read, api.convert and api.report pause the cyclic GC while they make the model, and leave it as it was."""

from __future__ import annotations

import gc
import importlib
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


def test_left_off_when_it_was_off_and_paused_on_a_cluster_too():
    gc.disable()
    try:
        with api._collector_paused(Options()):
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with api._collector_paused(Options(cluster="local:1")):
        assert not gc.isenabled()


def test_the_cluster_client_collects_young_cycles_while_paused():
    from converters.builders import cluster

    with api._collector_paused(Options(cluster="local:1")):
        garbage = _Cyclic()
        garbage.me = garbage  # as Dask's event loop makes for each task
        alive = weakref.ref(garbage)
        del garbage
        assert alive() is not None  # paused: nothing collects it by itself
        cluster._collect_young()  # what the client does after each result
        assert alive() is None and not gc.isenabled()


def test_read_and_convert_leave_it_on(tmp_path):
    api.read(LOG)
    assert gc.isenabled()
    api.convert(LOG, tmp_path / "w", to="chakra")
    assert gc.isenabled()


def test_report_schedules_and_writes_its_page_with_the_collector_paused(tmp_path, monkeypatch):
    report = importlib.import_module("converters.report")  # the package (`converters.report` is the function)
    seen = []
    real_build, real_write = report.build_runs, report.write_page
    monkeypatch.setattr(report, "build_runs", lambda *a, **k: (seen.append(gc.isenabled()), real_build(*a, **k))[1])
    monkeypatch.setattr(report, "write_page", lambda *a, **k: (seen.append(gc.isenabled()), real_write(*a, **k))[1])
    api.report(SAMPLES / "chakra_data", tmp_path / "r.html")
    assert seen == [False, False] and gc.isenabled()
    assert (tmp_path / "r.html").read_bytes().startswith(b"<!DOCTYPE html>")
