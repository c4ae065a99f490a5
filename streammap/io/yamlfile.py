"""YAML read with line numbers, and pydantic errors turned into ``file:line`` errors.

Cluster and plan files are validated with pydantic. A pydantic error knows the *field path*
(``nodes.0.devices.2.memory``) but not where that field is in the file, so we compose the YAML
ourselves and remember the line of every mapping key and sequence item.

Policy: every YAML file StreamMAP reads (cluster, plan, tenants, jobs, alerts) comes through
:func:`load_yaml`, which reads only *bounded* YAML, because these files may come from someone else
(a plan handed over, a tenant's job):

* at most :data:`MAX_YAML_BYTES` of UTF-8 text (a stray byte, a NUL or a binary file is a clean
  error, not a decode traceback);
* **no aliases** (``*name``): ten lines of nested aliases expand to billions of nodes (the
  "billion laughs"), and ``&x [*x]`` to a structure that contains itself. The composed node graph
  is checked before anything is built from it, so an alias costs nothing but its error;
* nesting at most :data:`MAX_YAML_DEPTH` levels (the constructor and the validators recurse).
"""

from __future__ import annotations

from pathlib import Path

import pydantic
import yaml

from streammap.errors import StreamMapError
from streammap.io.files import read_text_bounded

#: Largest YAML file read (a plan of 200,000 tasks is about 60 MB).
MAX_YAML_BYTES = 256 * 1024 * 1024
#: Deepest nesting of mappings and sequences (plans nest arg specs a few levels).
MAX_YAML_DEPTH = 100

# libyaml's parser when PyYAML was built with it (10x faster on large plans), else the pure one.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load_yaml(path, error_cls=StreamMapError):
    """Read a YAML file; return ``(data, lines)`` where ``lines`` maps a field path to its line.

    Raises ``error_cls`` naming the file and line for unreadable or malformed YAML.
    """
    path = Path(path)
    text = read_text_bounded(path, MAX_YAML_BYTES, error_cls, what="YAML file")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        lines: dict[tuple, int] = {}
        if node is not None:
            _walk(node, lines, path, error_cls)         # before building: refuses aliases
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        raise error_cls(f"not valid YAML: {exc.problem or exc}", path=path, line=line, col=col,
                        hint="fix the YAML syntax at this position") from None
    except yaml.YAMLError as exc:               # reader errors (a NUL, a control character)
        raise error_cls(f"not valid YAML: {exc}", path=path,
                        hint="a YAML file is printable UTF-8 text") from None
    except (ValueError, OverflowError, RecursionError) as exc:   # a timestamp like 2024-99-99
        raise error_cls(f"not valid YAML: {exc}", path=path) from None
    finally:
        loader.dispose()
    return data, lines


def _walk(root, lines: dict, path, error_cls) -> None:
    """Record the line of every field path; refuse aliases and too deep nesting.

    Iterative, so that nesting is measured before anything recurses. An alias shows up in the
    composed graph as a node reached a second time.
    """
    seen: set[int] = set()
    stack = [(root, (), root.start_mark.line + 1)]     # (node, field path, line it is used on)
    while stack:
        node, prefix, used_on = stack.pop()
        if id(node) in seen:
            raise error_cls("YAML aliases (*name) are not allowed", path=path, line=used_on,
                            hint="write the value out in full: aliases can expand a few lines "
                                 "into billions of values")
        seen.add(id(node))
        line = node.start_mark.line + 1
        if len(prefix) > MAX_YAML_DEPTH:
            raise error_cls(f"YAML nested more than {MAX_YAML_DEPTH} levels deep", path=path,
                            line=line, hint="is this the right file?")
        lines.setdefault(prefix, line)
        if isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                k = key.value if isinstance(key, yaml.ScalarNode) else f"<{key.tag}>"
                key_line = key.start_mark.line + 1
                lines[prefix + (k,)] = key_line
                if not isinstance(key, yaml.ScalarNode):
                    stack.append((key, prefix + (k,), key_line))   # keys can hold aliases too
                stack.append((value, prefix + (k,), key_line))
        elif isinstance(node, yaml.SequenceNode):
            for i in range(len(node.value) - 1, -1, -1):
                item = node.value[i]
                lines[prefix + (i,)] = item.start_mark.line + 1
                stack.append((item, prefix + (i,), line))


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
