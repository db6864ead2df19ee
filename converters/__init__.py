"""et-convert: training logs and workload tables to Chakra execution traces and Perfetto timelines.

The small public API (see README "Use it from Python"):

    read(inputs, fmt="auto", **options)      -> ExecutionTrace
    schedule(trace)                          -> Timeline
    validate(trace)                          -> list of findings
    write(trace, output, to=None)
    convert(inputs, output, to=None, **options)
    simulate(inputs, astra_sim, **options)   -> Simulation (ASTRA-sim's finish times beside ours)
    report(inputs, "report.html", **options) -> one self-contained HTML page about the run
    sweep(trace, {"tp.bandwidth_gbps": [100, 200]}) -> {"sweep": [...]} (one schedule per grid point)
    stats_for(inputs, fmt="auto", **options) -> what `et-convert stats --json` prints

Every name is imported on first use (PEP 562), so `import converters` and a command that
needs little (e.g. a log to a Chrome trace) do not pay for the validator, the scheduler, the
report or the simulator.
"""

import importlib
import sys
import types

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing; type checkers know the name)
if TYPE_CHECKING:  # the names for type checkers and editors; at run time `__getattr__` imports them
    from .api import convert, read, report, schedule, simulate, stats_for, sweep, validate, write
    from .diagnostics import Diagnostics, InputError
    from .model import CollType, ExecutionTrace, Group, Node, NodeKind, Parallel, Rank
    from .options import Options

__version__ = "0.1.0"

# Where each public name lives; `converters.X` imports its module when first asked for.
_HOMES = {
    **dict.fromkeys(["convert", "read", "report", "schedule", "simulate", "stats_for", "sweep", "validate", "write"],
                    ".api"),
    **dict.fromkeys(["Diagnostics", "InputError"], ".diagnostics"),
    **dict.fromkeys(["CollType", "ExecutionTrace", "Group", "Node", "NodeKind", "Parallel", "Rank"], ".model"),
    "Options": ".options",
}

# Submodules named like a function of the API (converters/validate/, converters/report/,
# simulate.py, sweep.py): `converters.validate` is always the function, whichever is imported first.
_API_NAMES_OF_SUBMODULES = frozenset({"validate", "report", "simulate", "sweep"})

__all__ = [
    "convert", "read", "report", "schedule", "simulate", "stats_for", "sweep", "validate", "write",
    "Diagnostics", "InputError", "Options",
    "CollType", "ExecutionTrace", "Group", "Node", "NodeKind", "Parallel", "Rank",
    "__version__",
]


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package module, which keeps the API functions bound when a submodule of the same
    name is imported: importing `converters.validate` (the package) sets the attribute
    `converters.validate` to it, which would hide the function `etc.validate`."""

    def __setattr__(self, name: str, value) -> None:
        if name in _API_NAMES_OF_SUBMODULES and isinstance(value, types.ModuleType):
            return  # the submodule stays reachable through sys.modules and `import converters.x`
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
