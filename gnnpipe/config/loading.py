"""``params.yaml`` read into ``Params``: YAML with unique keys, each value coerced to its field's
type and checked against its bounds, then the cross-field rules (rules.py, then the sampler
table's, samplers.py); and back to plain dicts.

A bad file raises a one-line ``ParamsError`` (a ``ValueError``) naming the file, the dotted key,
what was given and what is allowed: an unknown key lists the keys allowed where it stands.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from gnnpipe.config.errors import ParamsError
from gnnpipe.config.rules import check as check_rules
from gnnpipe.config.samplers import check as check_samplers
from gnnpipe.config.schema import Params

DEFAULT_PARAMS = "params.yaml"


# ---------------------------------------------------------------------------------- coercion
def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return "one of: " + ", ".join(str(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        return f"a non-empty list of {_type_name(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, empty_ok: bool = False) -> Any:
    """Value converted to ``tp`` or a ParamsError naming ``key``."""
    origin = typing.get_origin(tp)
    bad = ParamsError(f"params: {key}={value!r} is not valid; expected {_type_name(tp)}")
    if origin is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        raise bad
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if isinstance(value, float) and float in options:  # 1.0 stays a fraction, not a count
            return _coerce(value, float, key)
        for option in options:  # first match wins: int before float
            try:
                return _coerce(value, option, key)
            except ParamsError:
                continue
        raise bad
    if origin is tuple:  # tuple[int, ...]: a YAML list, kept a tuple so frozen params hash
        item_type = typing.get_args(tp)[0]
        if empty_ok and isinstance(value, (list, tuple)) and not value:
            return ()
        if not isinstance(value, (list, tuple)) or not value:
            raise ParamsError(f"params: {key}={value!r} is not valid; expected a non-empty list "
                              f"of {_type_name(item_type)}")
        return tuple(_coerce(v, item_type, f"{key}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ParamsError(f"params: {key} must be a mapping of keys, got {value!r}")
        return _build(tp, value, key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
            return int(value)  # 1e6 in YAML is a float; accept it as a count
        raise bad
    if tp is float:
        if isinstance(value, str):  # PyYAML reads "5e-4" as a string
            try:
                value = float(value)
            except ValueError:
                raise bad from None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN would pass every range check
                raise ParamsError(f"params: {key}={value!r} is not a finite number")
            return float(value)
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    raise TypeError(f"unsupported params type {tp!r} for {key}")  # programming error


def _check_range(value: Any, meta: typing.Mapping, key: str) -> None:
    if isinstance(value, tuple):  # a list param: the bounds hold for every item
        for i, item in enumerate(value):
            _check_range(item, meta, f"{key}[{i}]")
        return
    if not meta or not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    low, high = meta.get("low"), meta.get("high")
    if low is not None and (value < low or (meta["low_open"] and value == low)):
        op = ">" if meta["low_open"] else ">="
        raise ParamsError(f"params: {key}={value!r} is out of range; expected {op} {low}")
    if high is not None and (value > high or (meta["high_open"] and value == high)):
        op = "<" if meta["high_open"] else "<="
        raise ParamsError(f"params: {key}={value!r} is out of range; expected {op} {high}")


def _build(cls: type, raw: dict, prefix: str) -> Any:
    """``cls`` built from ``raw``: every key known, coerced and in range (``prefix``: its path)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ParamsError(
            f"params: unknown key {where}{unknown[0]}; allowed keys in "
            f"{prefix or 'the top level'}: {', '.join(fields)}")
    kwargs = {}
    for name, value in raw.items():
        key = f"{prefix}.{name}" if prefix else name
        kwargs[name] = _coerce(value, hints[name], key,
                               empty_ok=fields[name].metadata.get("empty_ok", False))
        _check_range(kwargs[name], fields[name].metadata, key)
    return cls(**kwargs)


def section_from_dict(cls: type, raw: dict, key: str) -> Any:
    """One section (``cls``, at dotted ``key``) from a plain mapping: types and ranges, not the
    cross-section rules (a trained model.pt's saved sections passed those when it was trained)."""
    return _build(cls, raw, key)


def check(params: Params) -> None:
    """Every cross-field rule on ``params``: rules.py's (the dataset's first), then the sampler
    table's; the first that fails raises its one-line ParamsError."""
    check_rules(params)
    check_samplers(params)


def params_from_dict(raw: dict) -> Params:
    """Params validated from a plain mapping (as parsed from YAML): types, ranges, then every
    cross-field rule."""
    if not isinstance(raw, dict):
        raise ParamsError(f"params: the file must hold a mapping of sections, got {type(raw).__name__}")
    params = _build(Params, raw, "")
    check(params)
    return params


# -------------------------------------------------------------------------------------- YAML
class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """safe_load that refuses a key repeated in one mapping (YAML would keep the last one);
    libyaml's parser where PyYAML has it (10x faster: every stage process reads the file)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ParamsError(f"params: key {key!r} appears twice in one section (line "
                                  f"{key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_params(path: str | Path = DEFAULT_PARAMS) -> Params:
    """Params read and validated from a YAML file (keys left out take their defaults)."""
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"params: file {path} not found")
    if path.is_dir():
        raise ParamsError(f"params: {path} is a directory; expected a file (--params)")
    text = path.read_text()
    # a stage reads the file twice (threads, then its run): the same text is parsed once
    if _last_loaded[:2] == [path.resolve(), text]:
        return _last_loaded[2]
    params = _parse(path, text)
    _last_loaded[:] = [path.resolve(), text, params]  # frozen dataclasses: safe to share
    return params


_last_loaded: list = [None, None, None]  # (resolved path, text, Params) of the last good load


def _parse(path: Path, text: str) -> Params:
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader) or {}
    except yaml.YAMLError as err:
        raise ParamsError(f"params: {path} is not valid YAML: {err}".replace("\n", " ")) from None
    except ParamsError as err:  # a repeated key
        raise ParamsError(str(err).replace("params:", f"{path}:", 1)) from None
    try:
        return params_from_dict(raw)
    except ParamsError as err:
        raise ParamsError(str(err).replace("params:", f"{path}:", 1)) from None


# --------------------------------------------------------------------- to dicts, and changed
def to_dict(params: Any) -> dict:
    """Plain nested dict of a params dataclass (for writing and hashing)."""
    return dataclasses.asdict(params)


def replace(params: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that reaches into sub-sections: a dict given for a dataclass field
    replaces inside it, e.g. ``replace(train, epochs=2, neighbor={"num_neighbors": (4, 3)})``."""
    for name, value in changes.items():
        current = getattr(params, name)
        if isinstance(value, dict) and dataclasses.is_dataclass(current):
            changes[name] = replace(current, **value)
    replaced = dataclasses.replace(params, **changes)
    if isinstance(replaced, Params):  # a whole params file again: its cross-field rules hold
        check(replaced)
    return replaced
