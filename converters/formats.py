"""Which formats et-convert reads and writes, how to tell them apart, and where their code lives.

Every input format has a reader module (`sniff(head, path) -> bool`, parsing) and a loader
`load(paths, options, diagnostics) -> ExecutionTrace` that runs the reader and its builder.
Every output format has a writer `write(trace, output, options, diagnostics)`.
Modules are imported only when their format is used, so start-up stays fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .diagnostics import InputError, UsageError

SNIFF_BYTES = 64 * 1024
CHAKRA_SUFFIXES = (".et", ".et.gz")


@dataclass(frozen=True)
class InputFormat:
    name: str
    sniff: str  # "module:function" taking (head: bytes, path: Path) -> bool
    load: str  # "module:function" taking (paths, options, diagnostics) -> ExecutionTrace
    # A cheap test of the head that is False only where `sniff` is False too, so that detecting
    # another format need not import this one's reader (None: always sniff).
    could_be: Callable[[bytes], bool] | None = None


GZIP_MAGIC = b"\x1f\x8b"
# Tags of GlobalMetadata's fields (1: version, 2: attr; both length-delimited), in a tag's
# first byte without its continuation bit (a tag may be written in more bytes than it needs).
GLOBAL_METADATA_TAGS = (1 << 3 | 2, 2 << 3 | 2)


def could_be_chakra(head: bytes) -> bool:
    """False when `head` cannot start a Chakra file, found without importing protobuf (25 ms).

    A Chakra file is length-prefixed messages, first a GlobalMetadata, which the sniffer
    accepts only when it parses with no unknown field: its first field must then be one of
    GlobalMetadata's two, length-delimited. Text rarely has that tag after a length prefix
    (e.g. a log starting "[2024": length '[', then '2', field 6 of wire type 2). A gzip head,
    an empty message or a head cut inside the prefix is left to the sniffer.
    """
    if head.startswith(GZIP_MAGIC):
        return True
    pos = 0
    length = 0
    while pos < len(head) and pos < 10:  # the message length, a varint
        byte = head[pos]
        length |= (byte & 0x7F) << (7 * pos)
        pos += 1
        if byte < 0x80:
            break
    else:
        return True  # cut inside the prefix (or one too long, which the sniffer refuses)
    if length == 0 or pos >= len(head):
        return True
    return head[pos] & 0x7F in GLOBAL_METADATA_TAGS


@dataclass(frozen=True)
class OutputFormat:
    name: str
    write: str  # "module:function" taking (trace, output, options, diagnostics)
    suffixes: tuple[str, ...] = ()


def could_be_et_json(head: bytes) -> bool:
    """False when `head` cannot start an et-json dump (whose reader imports the Chakra one's):
    the sniffer wants the dump's "format" value near the start."""
    return b'"et-convert.et-json"' in head


def could_be_kineto(head: bytes) -> bool:
    """False when `head` cannot start a PyTorch profiler trace (a Chrome trace: its reader takes
    10 ms to import): the sniffer wants the "traceEvents" key in the head, gzip looked into."""
    return head.startswith(GZIP_MAGIC) or b'"traceEvents"' in head


# Order matters only for the message that lists what was tried.
INPUT_FORMATS = [
    InputFormat("simai", "converters.readers.workload_text:sniff_simai", "converters.builders.workload:load_simai"),
    InputFormat("astra-text", "converters.readers.workload_text:sniff_astra", "converters.builders.workload:load_astra"),
    InputFormat("neusight", "converters.readers.neusight:sniff", "converters.builders.workload:load_neusight"),
    InputFormat("megatron-log", "converters.readers.megatron_log:sniff", "converters.builders.megatron:load"),
    InputFormat("optimus-log", "converters.readers.optimus_log:sniff", "converters.builders.optimus:load"),
    InputFormat("chakra", "converters.readers.chakra:sniff", "converters.readers.chakra:load", could_be_chakra),
    InputFormat("et-json", "converters.readers.et_json:sniff", "converters.readers.et_json:load", could_be_et_json),
    InputFormat("kineto", "converters.readers.kineto:sniff", "converters.builders.kineto:load", could_be_kineto),
]

OUTPUT_FORMATS = [
    OutputFormat("chrome", "converters.writers.chrome:write", (".json", ".json.gz")),
    OutputFormat("perfetto", "converters.writers.perfetto:write", (".pftrace",)),
    OutputFormat("chakra", "converters.writers.chakra:write", ()),
    OutputFormat("et-json", "converters.writers.et_json:write", ()),
    OutputFormat("report", "converters.report:write", (".html",)),
]

INPUT_NAMES = [f.name for f in INPUT_FORMATS]
OUTPUT_NAMES = [f.name for f in OUTPUT_FORMATS]


def resolve(ref: str) -> Callable:
    module, _, function = ref.partition(":")
    return getattr(importlib.import_module(module), function)


def expand_inputs(inputs: list[str | Path]) -> list[Path]:
    """Turn the user's INPUT arguments into files: a directory stands for the files in it.

    A `comm_group.json` is never an input of its own: the Chakra reader finds it beside the
    `.et` files.
    """
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files.extend(files_in_directory(path))
        elif path.exists():
            files.append(path)
        else:
            raise InputError(str(path), "no such file or directory")
    if not files:
        raise UsageError("no input files given")
    return files


def refuse_overwriting_inputs(paths: list[Path], output: Path, fmt: OutputFormat) -> None:
    """Fail before reading when writing `output` would replace (or, for a Chakra set, remove) one
    of the input files (`paths` as `expand_inputs` gives them)."""
    for path in paths:
        if _would_replace(path, Path(output), fmt.name == "chakra"):
            raise InputError(str(output), f"cannot write over the input {path}; choose another output name")


def _would_replace(path: Path, output: Path, chakra_set: bool) -> bool:
    if not chakra_set:
        return _same_file(path, output)
    from .writers.atomic import set_file_name

    return _same_file(path.parent, output.parent) and bool(set_file_name(output.name).match(path.name))


def _same_file(a: Path, b: Path) -> bool:
    """The same file or directory, also through links or another spelling of its path."""
    try:
        return a.resolve() == b.resolve() or (b.exists() and a.samefile(b))
    except OSError:
        return False


def files_in_directory(directory: Path) -> list[Path]:
    """The input files of a directory, by name; a Chakra set's `.et` files when it holds any.

    A set's directory often holds a README or notes too; they are not ranks of the set.
    """
    inside = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    inside = [p for p in inside if not p.name.endswith("comm_group.json")]
    if not inside:
        raise InputError(str(directory), "directory has no input files")
    return [p for p in inside if named_like_chakra(p)] or inside


def named_like_chakra(path: Path) -> bool:
    return path.name.lower().endswith(CHAKRA_SUFFIXES)


def read_head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None


def detect(paths: list[Path]) -> str:
    """Name the input format from the first file's content; fail clearly when unsure."""
    first = paths[0]
    head = read_head(first)
    if not head:
        raise InputError(str(first), "file is empty")
    matches = []
    for fmt in INPUT_FORMATS:
        if fmt.could_be is not None and not fmt.could_be(head):
            continue
        if resolve(fmt.sniff)(head, first):
            matches.append(fmt.name)
    if len(matches) == 1:
        return matches[0]
    if not matches and named_like_chakra(first):
        # A cut-off or damaged Chakra file fails the sniffer, but its name says what it is: the
        # Chakra reader then names the broken byte, which helps more than "cannot tell".
        return "chakra"
    tried = ", ".join(INPUT_NAMES)
    if not matches:
        raise InputError(None, f"cannot tell the format of {first}; tried {tried}; use --from")
    raise InputError(None, f"{first} could be {' or '.join(matches)}; use --from")


def input_format(name: str) -> InputFormat:
    for fmt in INPUT_FORMATS:
        if fmt.name == name:
            return fmt
    raise UsageError(f"unknown input format {name!r}; known: {', '.join(INPUT_NAMES)}")


def output_format(name: str | None, output: Path) -> OutputFormat:
    """The writer for `--to NAME`, or the one the output's suffix implies."""
    if name:
        for fmt in OUTPUT_FORMATS:
            if fmt.name == name:
                return fmt
        raise UsageError(f"unknown output format {name!r}; known: {', '.join(OUTPUT_NAMES)}")
    lowered = output.name.lower()
    for fmt in OUTPUT_FORMATS:
        if any(lowered.endswith(s) for s in fmt.suffixes):
            return fmt
    raise UsageError(
        f"cannot tell the output format from {output.name!r}; name it .json, .json.gz, "
        f".pftrace or .html, or give --to ({', '.join(OUTPUT_NAMES)})"
    )
