"""A Chakra set written by forked workers while the validator's gate runs (api.write): the same
refusal, nothing left behind (no file, no folder made for it), the same bytes and messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import converters
from converters.diagnostics import Diagnostics, InputError
from converters.model import CollType, ExecutionTrace, Node, NodeKind, Rank
from converters.options import Options


def tp_pair(size_on_rank_1: int = 4096) -> ExecutionTrace:
    """Two ranks all-reducing in one group; a different size on rank 1 is an error (E042)."""
    trace = ExecutionTrace()
    group = trace.add_group("tp", [0, 1])
    for r in (0, 1):
        trace.ranks[r] = Rank(r, [
            Node(0, "fwd", NodeKind.COMPUTE, duration_ns=1000),
            Node(1, "ar", NodeKind.COLLECTIVE, deps=[0], coll=CollType.ALL_REDUCE,
                 size=size_on_rank_1 if r == 1 else 4096, group=group.id),
        ])
    return trace


@pytest.mark.parametrize("jobs", [1, 2])
def test_refused_with_nothing_left_behind(tmp_path, jobs):
    with pytest.raises(InputError, match="refusing to write a Chakra set .* E042"):
        converters.write(tp_pair(8), tmp_path / "new" / "deeper" / "w", to="chakra", options=Options(jobs=jobs))
    assert list(tmp_path.iterdir()) == []


def test_workers_and_one_process_write_the_same_bytes_and_messages(tmp_path):
    outputs = []
    for jobs, force, sizes in ((1, False, 4096), (2, False, 4096), (1, True, 8), (2, True, 8)):
        diagnostics = Diagnostics()
        out = tmp_path / f"j{jobs}{force}{sizes}"
        converters.write(tp_pair(sizes), out / "w", to="chakra", options=Options(jobs=jobs, force=force),
                         diagnostics=diagnostics)
        outputs.append(({p.name: p.read_bytes() for p in sorted(out.iterdir())}, diagnostics.messages()))
    assert outputs[0] == outputs[1] and outputs[2] == outputs[3]
    assert any("E042" in m and "--force" in m for m in outputs[2][1])
    assert sorted(outputs[0][0]) == ["w.0.et", "w.1.et", "w.comm_group.json"]


def test_a_refusal_with_workers_never_hangs(tmp_path):
    """The workers used to be a multiprocessing.Pool, whose terminate() after the refusal hung
    about once in 200-300 runs (a CI run stopped on it). In a child process, so a hang fails
    here rather than stopping the suite; it catches a return to the Pool only now and then."""
    code = (
        "import sys, tempfile, pathlib\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import converters\n"
        "from converters.diagnostics import InputError\n"
        "from converters.options import Options\n"
        "from test_chakra_gated_write import tp_pair\n"
        "for i in range(300):\n"
        "    try:\n"
        "        converters.write(tp_pair(8), pathlib.Path(sys.argv[2]) / str(i) / 'w', to='chakra',"
        " options=Options(jobs=2))\n"
        "    except InputError:\n"
        "        pass\n"
        "    else:\n"
        "        sys.exit('written')\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert list(tmp_path.iterdir()) == []
