"""Start-up: what `import converters` and a small conversion import, and what stays the same.

The package imports its API on first use, the CLI coerces option values without pydantic and
format detection imports the Chakra reader only for a head that could be one; each check runs
in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import converters
from converters.formats import INPUT_FORMATS, could_be_chakra, could_be_et_json, could_be_kineto, read_head, resolve

from conftest import ROOT, SAMPLES

# Modules a conversion of a Megatron log to a Chrome trace has no use for.
UNUSED_BY_A_LOG_TO_CHROME = [
    "converters.validate", "converters.report", "converters.simulate", "converters.sweep", "converters.scheduler",
    "converters.readers.chakra", "converters.readers.et_json", "converters.readers.kineto", "converters._proto.et_def_pb2",
    "google.protobuf", "pydantic", "rich",
]
PUBLIC_FUNCTIONS = ["convert", "read", "report", "schedule", "simulate", "stats_for", "sweep", "validate", "write"]


def imported_after(code: str) -> set[str]:
    """The modules in sys.modules after running `code` in a fresh interpreter."""
    script = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_converters_imports_none_of_its_modules():
    modules = imported_after("import converters")
    ours = {m for m in modules if m.startswith("converters.")}
    assert ours == set()
    assert not {"typer", "pydantic", "orjson", "google.protobuf"} & modules


def test_a_small_log_to_chrome_conversion_imports_only_what_it_uses(tmp_path):
    log, out = SAMPLES / "megatron_rank4_pp_tp2.log", tmp_path / "x.json"
    modules = imported_after(
        "import sys\n"
        f"sys.argv = ['et-convert', {str(log)!r}, '-o', {str(out)!r}, '-q']\n"
        "from converters.cli import run\n"
        "try:\n    run()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
    )
    assert out.exists()
    assert "converters.writers.chrome" in modules  # it did convert
    assert [m for m in UNUSED_BY_A_LOG_TO_CHROME if m in modules] == []


def test_version_and_help_import_no_conversion_code(cli):
    for args in (["--version"], ["--help"]):
        modules = imported_after(
            f"import sys\nsys.argv = ['et-convert', *{args!r}]\nfrom converters.cli import run\n"
            "try:\n    run()\nexcept SystemExit:\n    pass\n"
        )
        assert not {"converters.api", "converters.model", "pydantic"} & modules, args


@pytest.mark.parametrize("first", ["", "import converters.validate, converters.report, converters.simulate, converters.sweep"])
def test_every_public_name_resolves_and_the_functions_stay_functions(first):
    """`etc.validate` is the function, also when the package converters/validate/ (or report/,
    simulate.py, sweep.py) was imported first, before or after the name was used."""
    script = f"""
{first}
import converters as etc
import converters.validate, converters.report, converters.simulate, converters.sweep
from converters import *
from converters import validate, report, simulate, sweep
import inspect, sys
names = {converters.__all__!r}
assert all(getattr(etc, n) is not None for n in names)
for f in (validate, report, simulate, sweep):
    assert inspect.isfunction(f) and f.__module__ == "converters.api", f
for n in {PUBLIC_FUNCTIONS!r}:
    assert inspect.isfunction(getattr(etc, n)) and getattr(etc, n) is globals()[n], n
assert inspect.ismodule(sys.modules["converters.validate"]) and sys.modules["converters.validate"].run_checks
assert etc.Options().passes == 1 and etc.__version__
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError):
        converters.no_such_name  # noqa: B018
    assert not hasattr(converters, "api_typo")


# ---------------------------------------------------------------- detection without the reader


def sniffed(fmt_name: str, head: bytes, path: Path) -> bool:
    fmt = next(f for f in INPUT_FORMATS if f.name == fmt_name)
    return resolve(fmt.sniff)(head, path)


def every_sample_file() -> list[Path]:
    return sorted(p for p in SAMPLES.rglob("*") if p.is_file())


def test_the_cheap_tests_never_refuse_a_sample_the_sniffers_accept():
    for path in every_sample_file():
        head = read_head(path)
        assert could_be_chakra(head) or not sniffed("chakra", head, path), path
        assert could_be_et_json(head) or not sniffed("et-json", head, path), path
        assert could_be_kineto(head) or not sniffed("kineto", head, path), path
    chakra_file = next((SAMPLES / "chakra_data").glob("*.et"))
    assert could_be_chakra(read_head(chakra_file)) and sniffed("chakra", read_head(chakra_file), chakra_file)


def test_the_cheap_tests_refuse_text_inputs():
    for name in ("megatron_rank4_pp_tp2.log", "simai_tp8_pp16_1024gpu.txt", "optimusprime_llama1b_pp8.log",
                 "neusight_gpt2_block.tsv"):
        head = read_head(SAMPLES / name)
        assert not could_be_chakra(head) and not could_be_et_json(head) and not could_be_kineto(head), name


def test_an_et_json_dump_and_a_gzipped_set_pass_the_cheap_tests(tmp_path):
    dump = tmp_path / "d.json"
    converters.convert(SAMPLES / "chakra_data", dump, to="et-json")
    assert could_be_et_json(read_head(dump)) and sniffed("et-json", read_head(dump), dump)
    et = next((SAMPLES / "chakra_data").glob("*.et"))
    zipped = tmp_path / "w.0.et.gz"
    zipped.write_bytes(gzip.compress(et.read_bytes()))
    assert could_be_chakra(read_head(zipped)) and sniffed("chakra", read_head(zipped), zipped)


CHAKRA_HEAD = read_head(next((SAMPLES / "chakra_data").glob("*.et")))


@settings(max_examples=400, deadline=None)
@given(prefix=st.binary(max_size=6), cut=st.integers(0, 64), tail=st.binary(max_size=40))
def test_could_be_chakra_is_false_only_where_the_sniffer_is(tmp_path_factory, prefix, cut, tail):
    """Heads near a real Chakra file's start (its first bytes replaced) and random ones."""
    path = tmp_path_factory.mktemp("h") / "x.et"
    for head in (prefix + CHAKRA_HEAD[len(prefix):], prefix + CHAKRA_HEAD[cut:], prefix + tail):
        path.write_bytes(head)
        if not could_be_chakra(head):
            assert not sniffed("chakra", head, path), head[:16]


@given(st.binary(max_size=300))
def test_could_be_et_json_is_false_only_where_the_sniffer_is(head):
    if not could_be_et_json(head):
        assert not sniffed("et-json", head, Path("x.json"))


KINETO_HEAD = gzip.decompress((SAMPLES / "pytorch_gloo_4rank" / "rank-0.pt.trace.json.gz").read_bytes())[:1000]


@given(cut=st.integers(0, 400), junk=st.binary(max_size=20), zipped=st.booleans())
def test_could_be_kineto_is_false_only_where_the_sniffer_is(cut, junk, zipped):
    head = junk + KINETO_HEAD[cut:]
    head = gzip.compress(head) if zipped else head
    if not could_be_kineto(head):
        assert not sniffed("kineto", head, Path("x.json"))


# ---------------------------------------------------------------- option values without pydantic


def command_params():
    import typer.main

    from converters.cli import app

    group = typer.main.get_command(app)
    for command in [group, *group.commands.values()]:
        for param in command.params:
            yield command.name, param


VALUES = {
    int: ["0", "4", "-3", "007", "2.0", "1e3", "abc", "", " 5", "99999999999999999999999", "٣", 4],
    float: ["1", "2.5", "-0.5", "1e-3", "inf", "nan", ".5", "5.", "x", "", 2.0, 1],
    str: ["auto", "", "chakra", "ü"],
    Path: ["out.json", "", "samples", "samples/megatron_rank4_pp_tp2.log", "/nonexistent/x", "-"],
    bool: [True, False],
}


def outcome(runtime, value, param, ctx):
    from typer._click.exceptions import BadParameter

    try:
        result = runtime.coerce(value, param=param, ctx=ctx)
        return ("ok", type(result), repr(result))  # repr: nan == nan
    except BadParameter as e:
        return ("error", e.format_message())


def test_the_quick_coercion_gives_what_typer_gives():
    pytest.importorskip("typer._coercion")
    from typer._click import Context
    from typer._coercion import build_runtime_param

    from converters.cli_coercion import _QuickValues

    import typer.main

    from converters.cli import app

    group = typer.main.get_command(app)
    checked = 0
    for command_name, param in command_params():
        quick = param._runtime_param
        if not isinstance(quick, _QuickValues):
            continue
        own = build_runtime_param(param.type_descriptor)
        ctx = Context(group)
        element = quick.element
        for value in VALUES[element] + [None]:
            given = [value, value] if quick.many and value is not None else value
            assert outcome(quick, given, param, ctx) == outcome(own, given, param, ctx), (command_name, param.name, given)
            checked += 1
    assert checked > 100


def test_a_typer_without_the_attributes_we_read_keeps_its_own_coercion():
    from converters.cli_coercion import _QuickValues, quicken

    class Param:  # a parameter of a typer whose descriptors look otherwise
        _runtime_param = None
        type_descriptor = object()

        def get_runtime_param(self):
            return "typer's own"

    param = Param()
    quicken([param])
    assert param._runtime_param is None  # typer builds its own when asked

    class Fallback:
        def coerce(self, value, param, ctx):
            return ("typer", value)

    class Known(Param):
        def get_runtime_param(self):
            return Fallback()

    known = Known()
    quick = _QuickValues.__new__(_QuickValues)
    quick.element, quick.many, quick._typer_own = int, False, None
    known._runtime_param = quick
    assert quick.coerce("12", known, None) == 12
    assert quick.coerce("1e3", known, None) == ("typer", "1e3")  # left to typer's own, built by typer
    assert known._runtime_param is quick
