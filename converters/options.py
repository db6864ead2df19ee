"""Every option a reader, builder, scheduler or writer may need, in one place.

The CLI fills it from flags; library users build it directly. Fields left at None mean
"not given: use what the input says, or the documented default".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


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
    force: bool = False  # write a Chakra set even when the validator finds errors
    strict: bool = False  # a cut-off last log line is an error, not a warning
    verbose: bool = False
