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
"""

# The validate subpackage is imported before the function of the same name: importing it
# later (as api.validate does) would otherwise rebind `converters.validate` to the package.
from . import validate as _validate_package  # noqa: F401
from . import simulate as _simulate_module  # noqa: F401  (the same for converters/simulate.py)
from . import report as _report_package  # noqa: F401  (and converters/report/)
from . import sweep as _sweep_module  # noqa: F401  (and converters/sweep.py)
from .api import convert, read, report, schedule, simulate, sweep, validate, write
from .diagnostics import Diagnostics, InputError
from .model import CollType, ExecutionTrace, Group, Node, NodeKind, Parallel, Rank
from .options import Options

__version__ = "0.1.0"

__all__ = [
    "convert", "read", "report", "schedule", "simulate", "sweep", "validate", "write",
    "Diagnostics", "InputError", "Options",
    "CollType", "ExecutionTrace", "Group", "Node", "NodeKind", "Parallel", "Rank",
    "__version__",
]
