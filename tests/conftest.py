"""Shared test fixtures: where the samples are and how to run the CLI as a user would."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from converters.samples import MEGATRON_SETS

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

# The multi-rank Megatron log sets of samples/ (tests/fixtures/make_megatron_sets.py) and the
# layout options a user gives for them, as `make run` does.
LOG_SETS = MEGATRON_SETS


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: str | Path, cwd: Path | None = None) -> CliResult:
    """Run `et-convert ARGS` in a fresh interpreter, exactly as a user's shell would."""
    done = subprocess.run(
        [sys.executable, "-m", "converters.cli", *map(str, args)],
        capture_output=True, text=True, cwd=cwd or ROOT,
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def samples() -> Path:
    return SAMPLES
