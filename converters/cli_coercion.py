"""Option values of the `et-convert` command turned into Python values without pydantic.

Recent typer (0.2x) coerces every parameter through a pydantic `TypeAdapter`, built for each
parameter of the command that runs, given or not: importing pydantic and building some 30
adapters cost ~0.1 s of every command, more than a small conversion itself. Our options take
plain values (str, int, float, bool, Path, lists of str or Path), which need no pydantic.

`quicken(params)` gives each typer parameter a coercion that handles those values in the
obvious way: an int written as digits, a float written as digits with an optional fraction,
a non-empty path, a string. Anything else (a malformed number, `1e3`, an empty path, a value
typer would refuse) goes to typer's own coercion, built on first need, so every accepted value
is what typer would give and every error message is typer's own. With a typer that coerces
otherwise (older versions: click types) this does nothing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")  # no leading zeros, far below any int limit
_FLOAT = re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,15})?")
_UNSURE = object()  # the quick path leaves the value to typer


def quicken(params) -> None:
    """Install the quick coercion on every typer parameter of a command whose values it knows.

    It reads typer's private parameter attributes: a typer that has other ones (AttributeError)
    keeps its own coercion, slower but right."""
    for param in params:
        try:
            if _typer_would_build_an_adapter(param) and _plain_type(param) is not None:
                param._runtime_param = _QuickValues(param)
        except AttributeError:
            continue


def _typer_would_build_an_adapter(param) -> bool:
    # typer.core._TyperParameter builds its coercion lazily into `_runtime_param`
    return hasattr(param, "get_runtime_param") and getattr(param, "_runtime_param", _UNSURE) is None


def _plain_type(param):
    """The element type (str, int, float, bool, Path) of a parameter without constraints, or None."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        return None
    info = descriptor.parameter_info
    constrained = (
        info.parser is not None or info.min is not None or info.max is not None
        or getattr(info, "click_type", None) is not None
    )
    if constrained or descriptor.is_file or descriptor.is_choice or descriptor.is_tuple:
        return None
    annotation = descriptor.annotation
    if descriptor.is_list:
        annotation = getattr(annotation, "__args__", (None,))[0]
    if annotation is Path and _path_options_requested(info):
        return None  # typer checks existence, permissions ...: its own coercion does it
    return annotation if annotation in (str, int, float, bool, Path) else None


def _path_options_requested(info) -> bool:
    return bool(
        getattr(info, "exists", False) or getattr(info, "resolve_path", False)
        or getattr(info, "writable", False) or getattr(info, "path_type", None) is not None
        or not getattr(info, "file_okay", True) or not getattr(info, "dir_okay", True)
        or getattr(info, "allow_dash", False)
    )


class _QuickValues:
    """Stands in for typer's runtime coercion of one parameter (`coerce(value, param, ctx)`)."""

    def __init__(self, param) -> None:
        self.element = _plain_type(param)
        self.many = param.multiple or param.nargs == -1
        self.descriptor = param.type_descriptor
        self._typer_own = None

    def coerce(self, value: Any, param, ctx) -> Any:
        if value is None:
            return () if self.many else None
        if self.many:
            quick = self._list(value, param, ctx)
        else:
            quick = self._one(value, param, ctx)
        if quick is _UNSURE:
            return self.typer_own(param).coerce(value, param=param, ctx=ctx)
        return quick

    def typer_own(self, param):
        """typer's own coercion of `param`, built by typer as it would have been without us."""
        if self._typer_own is None:
            param._runtime_param = None
            try:
                self._typer_own = param.get_runtime_param()
            finally:
                param._runtime_param = self
        return self._typer_own

    def _list(self, value: Any, param, ctx) -> Any:
        if not isinstance(value, (list, tuple)):
            return _UNSURE
        items = [self._one(item, param, ctx) for item in value]
        return _UNSURE if any(item is _UNSURE for item in items) else items

    def _one(self, value: Any, param, ctx) -> Any:
        element = self.element
        if element is str:
            return value if isinstance(value, str) else _UNSURE
        if element is int:
            if type(value) is int:
                return value
            return int(value) if isinstance(value, str) and _INT.fullmatch(value) else _UNSURE
        if element is float:
            if type(value) is float:
                return value
            return float(value) if isinstance(value, str) and _FLOAT.fullmatch(value) else _UNSURE
        if element is bool:
            return value if type(value) is bool else _UNSURE
        if element is Path and isinstance(value, str) and value:
            # typer's own path checks (readable when it exists), without its pydantic Path step,
            # which makes Path(value) of a non-empty string
            try:
                from typer._param_types import coerce_cli_path
            except ImportError:  # another typer: its own coercion does it all
                return _UNSURE
            return coerce_cli_path(Path(value), self.descriptor.parameter_info, path_type=Path, param=param, ctx=ctx)
        return _UNSURE
