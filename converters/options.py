"""Every option a reader, builder, scheduler or writer may need, in one place.

The CLI fills it from flags; library users build it directly. Fields left at None mean
"not given: use what the input says, or the documented default".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import UsageError


@dataclass
class Options:
    # job layout the input may not carry
    num_npus: int | None = None  # ASTRA-sim text workloads carry no rank count
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    ep: int | None = None
    passes: int = 1
    tick_ns: float = 1.0  # ASTRA-sim 1.0 compute ticks, in ns
    bytes_per_element: int = 4  # NeuSight comm sizes are element counts
    num_layers: int | None = None  # NeuSight: replicate the block
    mode: str = "stage"  # workload tables: "stage" (per-stage graphs) or "simai"
    schedule: str = "1f1b"  # pipeline schedule: "1f1b" or "gpipe"
    # training logs
    step: int | None = None  # OptimusPrime: which step (default: the median one)
    bwd_factor: float = 2.0  # OptimusPrime: backward = k x forward
    p2p_bytes: int | None = None  # activation bytes between stages when the input has none
    keep_broadcast: bool = False  # workload tables: BROADCAST becomes a Chakra BROADCAST, not no collective
    retime: bool = False  # Megatron scaling-mode logs: re-time with the scheduler
    merge_compute: bool = True  # PyTorch profiler traces: consecutive kernels of a stream as one node
    # output
    ranks: str | None = None  # Chrome: which ranks to draw, e.g. "0-15,1008" or "all"
    network: Path | None = None  # network cost model (TOML)
    network_overrides: dict[str, object] = field(default_factory=dict)  # from CLI shortcuts
    jobs: int | None = None
    cluster: str | None = None  # Dask: "local:N" or a scheduler address "tcp://host:8786"
    # --memory: what this machine's processes of the run may take together, in bytes or as a size
    # such as "400M" (`memory_bytes`)
    memory: int | float | str | None = None
    force: bool = False  # write a Chakra set even when the validator finds errors
    strict: bool = False  # a cut-off last log line is an error, not a warning
    verbose: bool = False


# The least value of each counted option (None: not given, always fine).
AT_LEAST = {"num_npus": 1, "tp": 1, "dp": 1, "pp": 1, "ep": 1, "passes": 1, "bytes_per_element": 1,
            "num_layers": 1, "step": 0, "jobs": 1}
ABOVE_ZERO = ("tick_ns", "bwd_factor", "p2p_bytes")
CHOICES = {"mode": ("stage", "simai"), "schedule": ("1f1b", "gpipe")}


_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(?:([KMGT])(?:i?B)?|B?)", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """The bytes of a size written as 400M, 1.5G, 512MiB or 1000000; K, M, G and T are powers of
    1024 with or without B or iB, as in Slurm's --mem. ValueError for anything else."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"expected a size such as 400M or 2G, found {text!r}")
    number, unit = found.groups()
    return int(float(number) * _SIZE_UNITS[(unit or "").upper()])


def memory_bytes(options) -> int | None:
    """--memory in bytes; None when not given (checked by `check`)."""
    value = getattr(options, "memory", None)
    if value is None:
        return None
    return parse_size(value) if isinstance(value, str) else int(value)  # (a float from Python: whole bytes)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check(options: Options) -> None:
    """Every option's value and file, before any input is read or output written.

    A `--network` file that is not valid TOML or names unknown keys fails here whatever the
    output, also one (such as `--to chakra`) that needs no schedule. Raises UsageError, or
    InputError naming the network file's line.
    """
    for name, least in AT_LEAST.items():
        value = getattr(options, name)
        if value is not None and value < least:
            raise UsageError(f"{flag(name)} must be at least {least}, got {value}")
    for name in ABOVE_ZERO:
        value = getattr(options, name)
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise UsageError(f"{flag(name)} must be above 0, got {value}")
    for name, allowed in CHOICES.items():
        if getattr(options, name) not in allowed:
            raise UsageError(f"unknown {flag(name)} {getattr(options, name)!r}; expected {' or '.join(allowed)}")
    _check_ranks(options.ranks)
    _check_memory(options)
    if options.network is not None or options.network_overrides:  # else the built-in defaults, known good
        from .scheduler.network import load_network  # (the scheduler is imported only when needed)

        load_network(options.network, options.network_overrides)


def _check_memory(options: Options) -> None:
    """--memory: a size string, or a finite number of bytes (`memory_bytes` reads it), of 1 byte or more."""
    value = options.memory
    if not isinstance(value, (str, int, float, type(None))) or isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"--memory: expected bytes or a size such as 400M or 2G, found {value!r}")
    try:
        size = memory_bytes(options)
    except ValueError as e:
        raise UsageError(f"--memory: {e}") from None
    if size is not None and size < 1:
        raise UsageError(f"--memory must be at least 1 byte, got {value!r}")


def _check_ranks(spec: str | None) -> None:
    """The syntax of --ranks (which ranks exist is known only once the input is read)."""
    from .ranks import parse_rank_list

    if spec is None or spec.strip().lower() == "all":
        return
    try:
        parse_rank_list(spec.strip())
    except ValueError as e:
        raise UsageError(f"--ranks {spec.strip()}: {e}; expected e.g. 0-15,1008 or all") from None
