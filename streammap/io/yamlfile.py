"""YAML read with line numbers, and pydantic errors turned into ``file:line`` errors.

Cluster and plan files are validated with pydantic. A pydantic error knows the *field path*
(``nodes.0.devices.2.memory``) but not where that field is in the file, so we compose the YAML
ourselves and remember the line of every mapping key and sequence item.
"""

from __future__ import annotations

from pathlib import Path

import pydantic
import yaml

from streammap.errors import StreamMapError

# libyaml's parser when PyYAML was built with it (10x faster on large plans), else the pure one.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_yaml(path, error_cls=StreamMapError):
    """Read a YAML file; return ``(data, lines)`` where ``lines`` maps a field path to its line.

    Raises ``error_cls`` naming the file and line for unreadable or malformed YAML.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error_cls(f"file not found: {path}", hint="check the path") from None
    except OSError as exc:
        raise error_cls(f"cannot read {path}: {exc.strerror}") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        raise error_cls(f"not valid YAML: {exc.problem or exc}", path=path, line=line, col=col,
                        hint="fix the YAML syntax at this position") from None
    finally:
        loader.dispose()
    lines: dict[tuple, int] = {}
    if node is not None:
        _walk(node, (), lines)
    return data, lines


def _walk(node, prefix: tuple, lines: dict) -> None:
    lines.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            k = key.value
            lines[prefix + (k,)] = key.start_mark.line + 1
            _walk(value, prefix + (k,), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[prefix + (i,)] = item.start_mark.line + 1
            _walk(item, prefix + (i,), lines)


def line_of(lines: dict, loc: tuple) -> int | None:
    """The line of the deepest known prefix of ``loc``."""
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def field_name(loc) -> str:
    """``nodes[0].devices[2].memory`` for a pydantic location tuple."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def validation_error(exc: pydantic.ValidationError, path, lines: dict, error_cls=StreamMapError, what="file"):
    """The first pydantic error as a ``file:line`` error that names the field."""
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if err["type"] == "extra_forbidden":
        msg = f"unknown field '{loc[-1]}'"
    elif err["type"] == "missing":
        msg = f"missing required field '{loc[-1]}'"
    more = len(exc.errors()) - 1
    hint = f"and {more} more problem(s) in this {what}" if more else None
    return error_cls(f"{field_name(loc)}: {msg}", path=path, line=line_of(lines, loc), hint=hint)
