"""The `et-convert` command: a thin layer over `converters.api`.

`et-convert INPUT... -o OUTPUT` converts; `validate` and `stats` are subcommands. The plain
form works beside the subcommands because an unknown first word means "convert".
"""

# No `from __future__ import annotations`: typer reads every command's parameters from their
# annotations, and evaluating them from strings took 6 ms of each run.
import signal
import sys
import traceback
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from . import __version__, exiting
from .cli_coercion import quicken
from .diagnostics import Diagnostics, InputError, InterruptedAfterWriting, UsageError
from .options import Options


class _QuickValues:
    """Option values coerced without pydantic (see `cli_coercion.py`: 0.1 s of every run)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        quicken(self.params)

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)  # made on first use, then kept
        if option is not None:
            quicken([option])
        return option


class _Command(_QuickValues, TyperCommand):
    pass


class _ConvertByDefault(_QuickValues, TyperGroup):
    """Route `et-convert FILE ...` to the `convert` command."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args.insert(0, "convert")
        elif not args:
            args.insert(0, "convert")
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx, args):
        # Global flags (--version, --help) stay with the group; anything else goes to a command.
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args.insert(0, "convert")
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_ConvertByDefault,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help=(
        "Convert training logs and workload tables into Chakra execution traces and "
        "Perfetto timelines, and validate them.\n\n"
        "Examples:\n\n"
        "  et-convert samples/simai_tp8_pp16_1024gpu.txt -o out.json\n\n"
        "  et-convert samples/megatron_rank4_pp_tp2.log --to chakra -o out/rank4\n\n"
        "  et-convert validate out/rank4.*.et"
    ),
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"et-convert {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = None,
) -> None:
    """Convert training logs and workload tables into Chakra traces and Perfetto timelines."""


# Options shared by every command that reads input.
Inputs = Annotated[list[Path], typer.Argument(help="Input files or directories.", show_default=False)]
From = Annotated[str, typer.Option("--from", help="Input format (auto detects from content).")]
NumNpus = Annotated[Optional[int], typer.Option(help="Rank count (ASTRA-sim text workloads carry none).")]
Tp = Annotated[Optional[int], typer.Option(help="Tensor-parallel size, when the input does not say.")]
Dp = Annotated[Optional[int], typer.Option(help="Data-parallel size, when the input does not say.")]
Pp = Annotated[Optional[int], typer.Option(help="Pipeline stages, when the input does not say.")]
Ep = Annotated[Optional[int], typer.Option(help="Expert-parallel size, when the input does not say.")]
Passes = Annotated[int, typer.Option(help="Training passes (iterations) to emit.")]
TickNs = Annotated[float, typer.Option(help="ASTRA-sim 1.0 compute tick in ns.")]
BytesPerElement = Annotated[int, typer.Option(help="NeuSight: bytes per element of comm sizes.")]
NumLayers = Annotated[Optional[int], typer.Option(help="NeuSight: replicate the block this many times.")]
Mode = Annotated[str, typer.Option(help="Workload tables: 'stage' (per-stage graphs) or 'simai'.")]
Schedule = Annotated[str, typer.Option(help="Pipeline schedule: 1f1b or gpipe.")]
Step = Annotated[Optional[int], typer.Option(
    help="OptimusPrime: the step to draw (default: median); PyTorch profiler traces: the ProfilerStep#N to convert "
    "(default: every step).")]
BwdFactor = Annotated[float, typer.Option(help="OptimusPrime: backward time = factor x forward.")]
P2pBytes = Annotated[Optional[int], typer.Option(help="Bytes sent between stages when the input has none.")]
KeepBroadcast = Annotated[bool, typer.Option(
    help="Workload tables: write BROADCAST rows as Chakra BROADCAST nodes (default: no collective, as SimAI and "
         "ASTRA-sim 1.0 read them).")]
Network = Annotated[Optional[Path], typer.Option(help="Network cost model (TOML).")]
NetSet = Annotated[Optional[list[str]], typer.Option(
    "--net", help="Network parameter KEY=VALUE, KIND.KEY=VALUE or size.N.KEY=VALUE (bandwidth_gbps=50, "
    "tp.latency_ns=1000, size.8.chunks=2); repeatable; wins over --network.")]
Sweep = Annotated[Optional[list[str]], typer.Option(
    help="Re-schedule for every value of a network key: KEY=V1,V2,... (tp.bandwidth_gbps=100,200); "
    "repeat for a grid.")]
Verbose = Annotated[bool, typer.Option("-v", "--verbose", help="Say more (detected format, every assumption made).")]
Debug = Annotated[bool, typer.Option(help="Show tracebacks.")]
Quiet = Annotated[bool, typer.Option("-q", "--quiet", help="No warnings, progress or iteration time.")]


def _net_overrides(values: list[str] | None) -> dict[str, object]:
    """--net KEY=VALUE pairs for the network cost model (checked by the scheduler)."""
    out: dict[str, object] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, found {item!r}", param_hint="--net")
        out[key.strip()] = value.strip()
    return out


def _run(action, debug: bool, quiet: bool, verbose: bool) -> int:
    """Run `action(diagnostics)`; turn bad input into one line on stderr and exit code 2."""
    diagnostics = Diagnostics()
    from . import progress

    progress.enable(False if quiet else None)  # --quiet: no progress line either
    try:
        code = action(diagnostics) or 0
    except (InputError, UsageError) as e:
        if debug:
            traceback.print_exc()
        if not quiet:
            diagnostics.emit(verbose=verbose)
        print(f"et-convert: error: {e}", file=sys.stderr)
        return 2
    except InterruptedAfterWriting as e:
        _exiting_on_interrupt()
        print(f"et-convert: interrupted once {e.written} was written (its files were being moved into place)",
              file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        _exiting_on_interrupt()
        print("et-convert: interrupted; earlier output left as it was", file=sys.stderr)
        return 130
    except MemoryError:
        if debug:
            raise
        print("et-convert: error: out of memory; earlier output left as it was (draw fewer ranks with --ranks, "
              "or convert a part of the input)", file=sys.stderr)
        return 3
    except Exception as e:  # a bug of ours, not the user's input: still one line unless --debug
        if debug:
            raise
        print(f"et-convert: internal error: {type(e).__name__}: {e} (run again with --debug for details)", file=sys.stderr)
        return 3
    if not quiet:
        diagnostics.emit(verbose=verbose)
    return code


@app.command(
    "convert",
    cls=_Command,
    help=(
        "Convert INPUT (log, workload table, Chakra set or JSON dump) into OUTPUT.\n\n"
        "The output format follows OUTPUT's name (.json/.json.gz: Chrome trace; .pftrace: "
        "Perfetto) or --to (chrome, perfetto, chakra, et-json).\n\n"
        "Examples:\n\n"
        "  et-convert samples/simai_tp8_pp16_1024gpu.txt -o out.json\n\n"
        "  et-convert samples/megatron_rank4_pp_tp2.log --to chakra -o out/rank4\n\n"
        "  et-convert out/rank4.*.et --to et-json -o dump.json"
    ),
)
def convert_command(
    inputs: Inputs,
    output: Annotated[Path, typer.Option("-o", "--output", help="Output file, or prefix for --to chakra.")],
    from_: From = "auto",
    to: Annotated[Optional[str], typer.Option("--to", help="chrome, perfetto, chakra or et-json.")] = None,
    num_npus: NumNpus = None,
    tp: Tp = None,
    dp: Dp = None,
    pp: Pp = None,
    ep: Ep = None,
    passes: Passes = 1,
    tick_ns: TickNs = 1.0,
    bytes_per_element: BytesPerElement = 4,
    num_layers: NumLayers = None,
    mode: Mode = "stage",
    schedule: Schedule = "1f1b",
    step: Step = None,
    bwd_factor: BwdFactor = 2.0,
    p2p_bytes: P2pBytes = None,
    keep_broadcast: KeepBroadcast = False,
    retime: Annotated[bool, typer.Option(help="Re-time scaling-mode logs with the scheduler.")] = False,
    merge_compute: Annotated[bool, typer.Option(
        help="PyTorch profiler traces: consecutive kernels (CPU ops) of one stream as one compute node.")] = True,
    ranks: Annotated[Optional[str], typer.Option(help="Ranks to draw: e.g. 0-15,1008 or all.")] = None,
    network: Network = None,
    net: NetSet = None,
    jobs: Annotated[Optional[int], typer.Option(help="Worker processes: N > 1 reads per-rank files in N processes, which also draw their ranks of a timeline; big outputs are written by N forked workers (default: a timeline of 32 MB of per-rank files or more is read and drawn on all cores, else this process reads and all cores write from 200,000 nodes; 1: this process only).")] = None,
    cluster: Annotated[Optional[str], typer.Option(
        help="Read per-rank logs on Dask: local:N workers here, or a scheduler tcp://host:8786 (pip install 'et-convert[cluster]')."
    )] = None,
    memory: Annotated[Optional[str], typer.Option(
        help="Memory the run's processes on this machine may take together, e.g. 400M or 2G (default: what "
             "the machine or the job's cgroup leaves). Less memory: workers build ranks again instead of "
             "keeping them, fewer forked writers.")] = None,
    force: Annotated[bool, typer.Option(help="Write a Chakra set even if validation finds errors.")] = False,
    strict: Annotated[bool, typer.Option(help="A cut-off last log line is an error.")] = False,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
) -> None:
    options = Options(
        num_npus=num_npus, tp=tp, dp=dp, pp=pp, ep=ep, passes=passes, tick_ns=tick_ns,
        bytes_per_element=bytes_per_element, num_layers=num_layers, mode=mode, schedule=schedule,
        step=step, bwd_factor=bwd_factor, p2p_bytes=p2p_bytes, keep_broadcast=keep_broadcast, retime=retime, ranks=ranks,
        network=network, network_overrides=_net_overrides(net), jobs=jobs, force=force, strict=strict, verbose=verbose,
        cluster=cluster, memory=memory,
        merge_compute=merge_compute,
    )

    def action(diagnostics: Diagnostics) -> int:
        from .api import convert

        convert(inputs, output, to, from_, options, diagnostics)
        return 0

    raise typer.Exit(_run(action, debug, quiet, verbose))


@app.command(
    "validate",
    cls=_Command,
    help=(
        "Check a trace, log or workload for what would make a simulator stall or lie.\n\n"
        "Exit code 0: no errors; 1: errors found; 2: unusable input.\n\n"
        "Examples:\n\n"
        "  et-convert validate samples/megatron_rank4_pp_tp2.log\n\n"
        "  et-convert validate samples/chakra_model --format json"
    ),
)
def validate_command(
    inputs: Inputs,
    from_: From = "auto",
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    max_per_check: Annotated[int, typer.Option(help="Findings shown per check.")] = 20,
    groups: Annotated[Optional[Path], typer.Option(help="comm_group.json for a Chakra set.")] = None,
    num_npus: NumNpus = None,
    tp: Tp = None,
    dp: Dp = None,
    pp: Pp = None,
    ep: Ep = None,
    network: Network = None,
    net: NetSet = None,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
) -> None:
    options = Options(num_npus=num_npus, tp=tp, dp=dp, pp=pp, ep=ep, network=network,
                      network_overrides=_net_overrides(net), verbose=verbose)

    def action(diagnostics: Diagnostics) -> int:
        from .validate.command import run

        return run(inputs, from_, options, diagnostics, fmt=fmt, max_per_check=max_per_check, groups=groups)

    raise typer.Exit(_run(action, debug, quiet, verbose))


@app.command(
    "stats",
    cls=_Command,
    help=(
        "Print the iteration time and per-rank compute, exposed communication and idle time.\n\n"
        "Examples:\n\n"
        "  et-convert stats samples/simai_tp8_pp16_1024gpu.txt\n\n"
        "  et-convert stats samples/neusight_gpt2_block.tsv --json\n\n"
        "  et-convert stats samples/chakra_data --network samples/network_astra_ring8.toml\n\n"
        "  et-convert stats samples/chakra_data --sweep bandwidth_gbps=25,50,100 --sweep chunks=1,4"
    ),
)
def stats_command(
    inputs: Inputs,
    from_: From = "auto",
    network: Network = None,
    net: NetSet = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    num_npus: NumNpus = None,
    tp: Tp = None,
    dp: Dp = None,
    pp: Pp = None,
    ep: Ep = None,
    passes: Passes = 1,
    keep_broadcast: KeepBroadcast = False,
    sweep: Sweep = None,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
) -> None:
    options = Options(num_npus=num_npus, tp=tp, dp=dp, pp=pp, ep=ep, passes=passes, network=network,
                      network_overrides=_net_overrides(net), keep_broadcast=keep_broadcast, verbose=verbose)

    def action(diagnostics: Diagnostics) -> int:
        if sweep:
            from .sweep import run as run_sweep

            return run_sweep(inputs, from_, options, diagnostics, sweep, as_json=as_json)
        from .stats import run

        return run(inputs, from_, options, diagnostics, as_json=as_json)

    raise typer.Exit(_run(action, debug, quiet, verbose))


@app.command(
    "simulate",
    cls=_Command,
    help=(
        "Run ASTRA-sim on a Chakra set (or any input, written as one first) and print every rank's finish time "
        "beside et-convert's prediction.\n\n"
        "Writes ASTRA-sim's network.yml, system.json and remote_memory.json from the network model (--network, "
        "--net; its default table only: ASTRA-sim's Ring has one set of link parameters). Exit code 0: every rank "
        "finished; 1: some rank did not (named), or the simulator failed; 2: unusable input.\n\n"
        "Examples:\n\n"
        "  export ASTRA_SIM=astra-sim/build/AstraSim_Analytical_Congestion_Unaware   # or --astra-sim BINARY\n\n"
        "  et-convert simulate samples/chakra_data --network samples/network_astra_ring8.toml\n\n"
        "  et-convert simulate samples/workloads/astra_data.txt --num-npus 4 --keep sim/"
    ),
)
def simulate_command(
    inputs: Inputs,
    astra_sim: Annotated[str, typer.Option(
        "--astra-sim", envvar="ASTRA_SIM", help="ASTRA-sim's analytical (congestion-unaware) binary.")],
    from_: From = "auto",
    network: Network = None,
    net: NetSet = None,
    keep: Annotated[Optional[Path], typer.Option(
        help="Keep the configs, the transcript (astra-sim.log) and a converted set in this directory.")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to let the simulator run.")] = 300.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
    num_npus: NumNpus = None,
    tp: Tp = None,
    dp: Dp = None,
    pp: Pp = None,
    ep: Ep = None,
    passes: Passes = 1,
    force: Annotated[bool, typer.Option(help="Simulate a converted set even if validation finds errors.")] = False,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
) -> None:
    options = Options(num_npus=num_npus, tp=tp, dp=dp, pp=pp, ep=ep, passes=passes, network=network,
                      network_overrides=_net_overrides(net), force=force, verbose=verbose)

    def action(diagnostics: Diagnostics) -> int:
        from .simulate import run

        return run(inputs, astra_sim, from_, options, diagnostics, keep=keep, timeout_s=timeout, as_json=as_json)

    raise typer.Exit(_run(action, debug, quiet, verbose))


@app.command(
    "report",
    cls=_Command,
    help=(
        "Write one self-contained HTML page about a run: where each rank's time goes, a timeline "
        "overview, traffic, the critical path, the slowest collectives, findings and assumptions.\n\n"
        "Examples:\n\n"
        "  et-convert report samples/simai_tp8_pp16_1024gpu.txt -o report.html\n\n"
        "  et-convert report samples/chakra_data -o compare.html --compare-network samples/network_astra_ring8.toml\n\n"
        "  et-convert report samples/chakra_data -o sweep.html --sweep bandwidth_gbps=25,50,100"
    ),
)
def report_command(
    inputs: Inputs,
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML page to write.")],
    from_: From = "auto",
    network: Network = None,
    net: NetSet = None,
    compare: Annotated[Optional[list[Path]], typer.Option(
        help="A second input to show beside the first (repeat for several files; a directory works).")] = None,
    compare_network: Annotated[Optional[Path], typer.Option(
        help="Show the same input scheduled on this network (TOML) beside the first.")] = None,
    sweep: Sweep = None,
    num_npus: NumNpus = None,
    tp: Tp = None,
    dp: Dp = None,
    pp: Pp = None,
    ep: Ep = None,
    passes: Passes = 1,
    verbose: Verbose = False,
    debug: Debug = False,
    quiet: Quiet = False,
) -> None:
    options = Options(num_npus=num_npus, tp=tp, dp=dp, pp=pp, ep=ep, passes=passes, network=network,
                      network_overrides=_net_overrides(net), verbose=verbose)

    def action(diagnostics: Diagnostics) -> int:
        from .api import report

        report(inputs, output, from_, options, diagnostics, compare=compare, compare_network=compare_network,
               sweep=sweep)
        return 0

    raise typer.Exit(_run(action, debug, quiet, verbose))


_AS_PROGRAM = False  # set by `run`: this process is the et-convert command, not a caller of `app`


def _exiting_on_interrupt() -> None:
    """Once interrupted, the program only says so and exits with 130: a Ctrl-C still pending
    (Python runs a signal's handler at its next step, and `signal.signal` runs pending ones
    first) or coming now must not end it by SIGINT after the message (seen under load in
    tests/test_writes.py, with forked writers stopping). A process that calls `app` itself keeps
    its own handler."""
    if not _AS_PROGRAM:
        return
    for _ in range(3):
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            break
        except KeyboardInterrupt:
            continue
    # CPython (3.11, 3.12) marks a KeyboardInterrupt that ends an exec() of a string (dataclasses
    # and namedtuples are made that way) as unhandled, even when caught later, and under
    # `python -m` then exits by SIGINT instead of with our 130. Each string exec clears that mark
    # first: this one does (the SIGINT is now ignored, no other can set it again).
    exec("pass")  # noqa: S102


def run() -> None:
    global _AS_PROGRAM
    _AS_PROGRAM = True
    try:
        app(prog_name="et-convert")
    except KeyboardInterrupt:  # one that came after the command's own handler, while exiting
        _exiting_on_interrupt()
        sys.exit(130)


def main() -> None:
    """The program (the `et-convert` script, `python -m converters.cli`): run(), then end the
    process without freeing the model it read (converters/exiting.py). Code that calls run()
    itself gets its SystemExit back as before."""
    exiting.enable()
    try:
        run()
    except SystemExit as e:  # how every command ends (typer's standalone mode)
        if e.code is None or isinstance(e.code, int):
            exiting.end_process(e.code or 0)
        raise


if __name__ == "__main__":
    main()
