"""Bounded YAML reading: what a config or search-space file may cost before it is even validated.

A YAML file is text a user (or anyone who can write to a shared volume) hands us, so it is
read under limits, each refused with its own one-line `ConfigError`:

    size      at most MAX_BYTES on disk
    encoding  UTF-8 text
    depth     collections nested at most MAX_DEPTH deep
    aliases   the document, with every alias expanded, has at most MAX_NODES nodes
              (a 1-KB "billion laughs" file expands to ~10^9); no alias inside its own anchor
    keys      plain scalars, each at most once per mapping (YAML 1.1 would silently keep the
              last of two equal keys, dropping the first block)
    numbers   a whole number written with at most MAX_DIGITS digits (Python refuses to convert
              one of over 4,300 digits, past the point where any setting means anything);
              no base-60 number (YAML 1.1 reads `1:30` as 90, a typo's likely meaning is not that);
              a whole number in plain decimal (YAML 1.1 reads `010` as 8 and `0x10` as 16), and no
              `_` inside a number (`1_000` is 1000 to YAML 1.1, a string to YAML 1.2 and JSON)
    root      a mapping

The checks run on libyaml's event stream, which is iterative: a file nested 100,000 levels
deep is refused without recursion. Only a file that passes is constructed (safe loader: plain
types only, no Python objects).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.errors import ConfigError, cut, short_path, why_absent

MAX_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NODES = 100_000
MAX_DIGITS = 100
_LONG_NUMBER = re.compile(r"[-+]?[0-9][0-9_:]*")  # YAML 1.1 ints (decimal, octal, sexagesimal)
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")  # YAML 1.1's base 60: 1:30 is 90

_DECIMAL = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")

_MERGE = "<<"
_EXPONENT_FLOAT = re.compile(r"[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+|[-+]\.[0-9]+)")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader, reading `1e-3`, `2.5E4` and `-.5` as the numbers they are (YAML 1.2 does;
    YAML 1.1 wants a dot and a signed exponent, `1.0e-3`, and read them as text)."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789."))


@dataclass
class _Frame:
    """One open collection while walking the events."""

    is_mapping: bool
    anchor: str | None
    path: str
    size: int = 1  # expanded nodes in this collection so far, itself included
    items: int = 0  # sequences: items so far
    expect_key: bool = True  # mappings alternate key, value
    key: str = ""  # the key whose value comes next
    seen: set[str] = field(default_factory=set)


def read_yaml(path: str | Path, *, root_mapping: bool = True, shown: str | None = None) -> Any:
    """Read and safe-load a YAML file under the limits above; `{}` for an empty file. `shown`: the
    file as its user named it, in error lines (default: `path`)."""
    name, path = short_path(shown or path), Path(path)
    try:
        if not path.is_file():
            raise ConfigError(f"{name}: {why_absent(path)}")
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{name}: file is {size:,} bytes; a config file may have at most {MAX_BYTES:,}")
        with open(path, "rb") as f:  # a file whose size says 0 (/proc, a growing file) is read no further either
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ConfigError(f"{name}: file is over {MAX_BYTES:,} bytes; a config file may have at most {MAX_BYTES:,}")
    except OSError as err:
        raise ConfigError(f"{name}: cannot read: {err.strerror or err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{name}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); save the file as UTF-8") from None
    return load_yaml_text(text, name, root_mapping=root_mapping)


def load_yaml_text(text: str, source: str, *, root_mapping: bool = True) -> Any:
    """Safe-load YAML text under the limits; `source` names it in error lines. With
    `root_mapping`, an empty document is `{}` and anything but a mapping is refused."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:  # a command-line value with a byte that is not UTF-8 reaches Python as a surrogate
        raise ConfigError(f"{source}: holds {err.object[err.start]!a}, a byte that is not UTF-8 text; give the value "
                          "as UTF-8") from None
    try:
        check_events(text, source)
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: invalid YAML{_where(err)}: {_problem(err)}") from None
    except RecursionError:  # cannot happen after check_events; kept as a last line of defence
        raise ConfigError(f"{source}: nested too deeply") from None
    if data is None and root_mapping:
        data = {}
    if root_mapping and not isinstance(data, dict):
        raise ConfigError(f"{source}: <root>: must be a mapping of keys, got {kind_of(data)}")
    return data


def check_events(text: str, source: str) -> None:
    """Walk the event stream once: depth, expanded size, recursive aliases, key rules."""
    anchors: dict[str, int] = {}  # anchor -> expanded node count of its (closed) node
    open_anchors: set[str] = set()
    stack: list[_Frame] = []
    total = 0  # expanded nodes of the closed top-level documents
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            parent = stack[-1] if stack else None
            if parent is not None and parent.is_mapping and parent.expect_key:
                raise ConfigError(f"{source}: {_at(parent, event)}: a key must be a plain value, not a collection")
            path = _child_path(parent)
            if len(stack) >= MAX_DEPTH:
                raise ConfigError(f"{source}: {path or '<root>'}: nested deeper than {MAX_DEPTH} levels")
            anchor = event.anchor
            if anchor is not None:
                open_anchors.add(anchor)
            stack.append(_Frame(isinstance(event, yaml.MappingStartEvent), anchor, path))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            done = stack.pop()
            if done.anchor is not None:
                anchors[done.anchor] = done.size
                open_anchors.discard(done.anchor)
            total = _add(stack, done.size, total, source)
        elif isinstance(event, yaml.ScalarEvent):
            frame = stack[-1] if stack else None
            if event.implicit[0] and len(event.value) > MAX_DIGITS and _LONG_NUMBER.fullmatch(event.value):
                where = _scalar_at(frame, event)
                raise ConfigError(f"{source}: {where}a number of {len(event.value):,} characters; "
                                  f"a whole number may have at most {MAX_DIGITS} digits")
            if event.implicit[0] and _SEXAGESIMAL.fullmatch(event.value):
                where = _scalar_at(frame, event) + _typed(frame, event.value)
                raise UnplainNumber(f"{source}: {where}a base-60 number to YAML 1.1 (1:30 reads as 90); write the "
                                    "number, or quote the text")
            if event.implicit[0] and (rule := _unplain_number(event.value)) is not None:
                where = _scalar_at(frame, event) + _typed(frame, event.value)
                raise UnplainNumber(f"{source}: {where}{rule}; write the number in plain decimal, or quote the text")
            if frame is not None and frame.is_mapping and frame.expect_key:
                key = event.value
                if key in frame.seen:  # `<<` twice too: the first merge's values would be dropped without a word
                    merge = "; merge several mappings with one `<<: [*a, *b]`" if key == _MERGE else ""
                    raise ConfigError(f"{source}: {_join(frame.path, key)}: duplicate key (line {event.start_mark.line + 1}); "
                                      f"each key may appear once{merge}")
                frame.seen.add(key)
                frame.key = key
            if event.anchor is not None:
                anchors[event.anchor] = 1
            total = _add(stack, 1, total, source)
        elif isinstance(event, yaml.AliasEvent):
            frame = stack[-1] if stack else None
            if frame is not None and frame.is_mapping and frame.expect_key:
                raise ConfigError(f"{source}: {_at(frame, event)}: a key must be a plain value, not an alias")
            if event.anchor in open_anchors:
                raise ConfigError(f"{source}: {_child_path(frame) or '<root>'}: alias *{cut(event.anchor, 40)} refers to "
                                  "a node that contains it (recursive alias)")
            if event.anchor not in anchors:
                raise ConfigError(f"{source}: invalid YAML at line {event.start_mark.line + 1}: "
                                  f"unknown alias *{cut(event.anchor, 40)}")
            total = _add(stack, anchors[event.anchor], total, source)


class UnplainNumber(ConfigError):
    """A number YAML 1.1 reads otherwise than it looks (`010`, `0x10`, `1_000`, `1:30`): refused,
    never read as text instead (as `--set` reads a value YAML cannot parse)."""


def _unplain_number(value: str) -> str | None:
    """Why a plain scalar YAML 1.1 reads as a number is not written plainly; None when it is."""
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False))
    if tag == "tag:yaml.org,2002:int" and not _DECIMAL.fullmatch(value):
        return ("a number with `_` in it (YAML 1.1 reads 1_000 as 1000)" if "_" in value else
                "a whole number in another base to YAML 1.1 (010 reads as 8, 0x10 as 16, 0b10 as 2)")
    if tag == "tag:yaml.org,2002:float" and "_" in value:
        return "a number with `_` in it (YAML 1.1 reads 1_000.5 as 1000.5)"
    return None


def _typed(frame: _Frame | None, value: str) -> str:
    """A refused scalar as a refusal shows it: the value a user typed alone (a `--set` value), never
    one of a file, whose key names it (the file may be a credentials file, the value its secret)."""
    return f"{cut(value, 40)}: " if frame is None else ""


def _scalar_at(frame: _Frame | None, event: yaml.ScalarEvent) -> str:
    """Where a scalar stands, as a refusal's prefix (`KEY: `): its key, its item's path, or `<root>`;
    nothing for a document that is the scalar alone (a `--set` value)."""
    if frame is None:
        return ""
    return (_at(frame, event) if frame.is_mapping and frame.expect_key else (_child_path(frame) or "<root>")) + ": "


def _add(stack: list[_Frame], nodes: int, total: int, source: str) -> int:
    """Count a closed node of `nodes` expanded nodes into its parent (or the document)."""
    if stack:
        parent = stack[-1]
        parent.size += nodes
        if parent.is_mapping:
            parent.expect_key = not parent.expect_key
        else:
            parent.items += 1
        grand = total + sum(f.size for f in stack)
    else:
        total += nodes
        grand = total
    if grand > MAX_NODES:
        raise ConfigError(f"{source}: expands to more than {MAX_NODES:,} values (aliases of aliases?); "
                          "a config file is refused beyond that")
    return total


def _child_path(parent: _Frame | None) -> str:
    if parent is None:
        return ""
    if parent.is_mapping:
        return _join(parent.path, parent.key)
    return f"{parent.path}[{parent.items}]"


def _join(path: str, key: str) -> str:
    key = cut(key, 40)
    return f"{path}.{key}" if path else key


def _at(frame: _Frame, event: yaml.Event) -> str:
    return f"{frame.path or '<root>'} (line {event.start_mark.line + 1})"


def _where(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _problem(err: yaml.YAMLError) -> str:
    problem = getattr(err, "problem", None) or (str(err).splitlines() or ["unreadable"])[0]
    return cut(problem, 120)


def kind_of(value) -> str:
    """What a document that is no mapping holds, without its text: the file may be anything a
    path can name (a netrc, a credentials file), and its first line a secret."""
    if isinstance(value, str):
        return f"text of {len(value):,} character{'s' * (len(value) != 1)}"
    if isinstance(value, list):
        return f"a list of {len(value):,} item{'s' * (len(value) != 1)}"
    return "nothing" if value is None else f"a {type(value).__name__}"
