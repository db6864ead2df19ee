"""Our Chakra schema compiles to exactly mlc-chakra's descriptor, so both modules live in one process."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT

IMPORT_BOTH = """
import {first} as a
import {second} as b
assert a.DESCRIPTOR.serialized_pb == b.DESCRIPTOR.serialized_pb
assert a.Node is b.Node
print("ok")
"""
OURS = "converters._proto.et_def_pb2"
THEIRS = "chakra.schema.protobuf.et_def_pb2"


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_our_descriptor_is_byte_identical_to_mlc_chakra():
    from chakra.schema.protobuf import et_def_pb2 as theirs

    from converters._proto import et_def_pb2 as ours

    assert ours.DESCRIPTOR.name == "et_def.proto"
    assert ours.DESCRIPTOR.package == "ChakraProtoMsg"
    assert ours.DESCRIPTOR.serialized_pb == theirs.DESCRIPTOR.serialized_pb


def test_ours_then_theirs_import_in_one_process():
    done = run_python(IMPORT_BOTH.format(first=OURS, second=THEIRS))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_theirs_then_ours_import_in_one_process():
    done = run_python(IMPORT_BOTH.format(first=THEIRS, second=OURS))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_generated_module_is_protobuf_6_31_1_gencode_and_pinned():
    text = (ROOT / "converters/_proto/et_def_pb2.py").read_text()
    assert "# Protobuf Python Version: 6.31.1" in text
    assert "# source: et_def.proto" in text
    assert "grpcio-tools==1.74.0" in (ROOT / "Makefile").read_text()
    assert re.search(r'"protobuf>=6\.31\.1"', (ROOT / "pyproject.toml").read_text())


def test_schema_names_the_documented_fields():
    from converters._proto import et_def_pb2 as pb

    node = {f.name: f.number for f in pb.Node.DESCRIPTOR.fields}
    assert node == {
        "id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
        "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10,
    }
    assert pb.COMM_COLL_NODE == 7 and pb.REDUCE_SCATTER == 7 and pb.ALL_TO_ALL == 6 and pb.BARRIER == 9
