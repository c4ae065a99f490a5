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

Speed: libyaml's parser and emitter are used when PyYAML was built with them (``CSafeLoader``,
``CSafeDumper``), the pure-Python ones otherwise. The C loader gives every node the same
``start_mark`` line as the pure one, so the line map and the alias check are unchanged; the
checked node graph is then built into Python data by :func:`_build` (plain tags here, any other
through the loader's constructor: the same data as ``construct_document``, faster). Writing
goes through :func:`dump_yaml`: PyYAML's representer (pure Python even under ``CSafeDumper``)
was most of the two seconds a 10,000-task plan took to write, so plain JSON-like data (what
``model_dump(mode="json")`` gives) is turned into YAML nodes by a short loop that makes exactly
the nodes ``SafeRepresenter`` makes; anything else, or a container reached twice (which the
representer would write as an anchor and alias), takes PyYAML's own path. Either way the bytes
are those of ``yaml.dump(data, Dumper=yaml.SafeDumper, ...)`` (``tests/io/test_yamlfile.py``
checks). The C emitter writes the same bytes as the Python one on every sample plan; where it
would not (a bare scalar document; strings with control, separator or astral characters) the
Python emitter writes the nodes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Hashable
from pathlib import Path

import pydantic
import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from streammap.errors import StreamMapError
from streammap.io.bulk import gc_paused
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
    with gc_paused():
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            lines: dict[tuple, int] = {}
            if node is not None:
                _walk(node, lines, path, error_cls)         # before building: refuses aliases
            data = _build(loader, node) if node is not None else None
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


def dump_yaml(data, *, default_flow_style=False, width=None, allow_unicode=None, sort_keys=True,
              dumper=Dumper) -> str:
    """``yaml.dump(data, Dumper=dumper, ...)``, byte for byte, faster for JSON-like data.

    Parameters
    ----------
    data : object
        What to write; dicts, lists, str, int, float, bool and None take the fast path.
    default_flow_style, width, allow_unicode, sort_keys :
        As for :func:`yaml.dump`.
    dumper : type
        A dumper class with ``SafeRepresenter`` semantics (default: libyaml's when present).

    Returns
    -------
    str
    """
    options = dict(default_flow_style=default_flow_style, width=width, allow_unicode=allow_unicode)
    # One pause over building, writing and dropping the node tree: were the collector switched
    # back on while the tree is alive, its next pass would walk every node once, for nothing
    # (a third of the time a 10,000-task plan took to write).
    text = None
    with gc_paused():
        nodes = _Nodes(default_flow_style, sort_keys)
        node = nodes.node(data)
        if node is not None:
            if isinstance(node, ScalarNode) or not nodes.emitters_agree:
                dumper = yaml.SafeDumper    # the cases where libyaml writes other bytes: see _EMITTERS_DIFFER
            stream = io.StringIO()
            emitter = dumper(stream, **options)
            try:
                emitter.open()
                emitter.serialize(node)
                emitter.close()
            finally:
                emitter.dispose()
            text = stream.getvalue()
        del node, nodes
    if text is None:                    # not plain data, or shared containers: PyYAML's own path
        return yaml.dump(data, Dumper=dumper, sort_keys=sort_keys, **options)
    return text


#: Characters libyaml's emitter writes otherwise than PyYAML's Python emitter (found by comparing
#: both on every character up to U+30FF and on samples above, in strings alone, inside words and
#: in long folded lines): control characters (tab and newline included), DEL, C1, U+2028/9, the
#: BOM, non-characters and everything beyond the BMP. A string with one goes to the Python one.
_EMITTERS_DIFFER = re.compile("[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd]")

_STR, _INT, _FLOAT, _BOOL, _NULL, _SEQ, _MAP = (f"tag:yaml.org,2002:{t}" for t in
                                                 ("str", "int", "float", "bool", "null", "seq", "map"))


class _Nodes:
    """The YAML nodes ``SafeRepresenter`` makes for plain data, or ``None`` when it would do more.

    State: the ids of the containers already turned into nodes (a second visit is an alias the
    representer would anchor, so the fast path gives up), and whether every string is one that
    libyaml's emitter writes as the Python emitter does (:data:`_EMITTERS_DIFFER`).
    """

    def __init__(self, default_flow_style, sort_keys):
        self.flow = default_flow_style
        self.sort_keys = sort_keys
        self.seen: set[int] = set()
        self.emitters_agree = True

    def node(self, data):
        try:
            return self._node(data)
        except _NotPlain:
            return None

    def _node(self, data):
        kind = type(data)
        if kind is str:
            if not (data.isascii() and data.isprintable()) and _EMITTERS_DIFFER.search(data):
                self.emitters_agree = False
            return ScalarNode(_STR, data)
        if kind is dict or kind is list:
            if id(data) in self.seen:
                raise _NotPlain
            self.seen.add(id(data))
            return self._mapping(data) if kind is dict else self._sequence(data)
        if kind is bool:
            return ScalarNode(_BOOL, "true" if data else "false")
        if kind is int:
            return ScalarNode(_INT, str(data))
        if kind is float:
            return ScalarNode(_FLOAT, _float_text(data))
        if data is None:
            return ScalarNode(_NULL, "null")
        raise _NotPlain

    def _mapping(self, data: dict):
        items = data.items()
        if self.sort_keys:
            try:
                items = sorted(items)
            except TypeError:                 # keys of mixed types: the representer keeps the order
                pass
        value = [(self._node(k), self._node(v)) for k, v in items]
        # The representer's flow style: flow when every key and value is a plain scalar.
        flow = self.flow if self.flow is not None else all(
            type(k) is ScalarNode and type(v) is ScalarNode for k, v in value)
        return MappingNode(_MAP, value, flow_style=flow)

    def _sequence(self, data: list):
        value = [self._node(x) for x in data]
        flow = self.flow if self.flow is not None else all(type(x) is ScalarNode for x in value)
        return SequenceNode(_SEQ, value, flow_style=flow)


class _NotPlain(Exception):
    """Data the fast path does not write as the representer would."""


def _float_text(x: float) -> str:
    """``SafeRepresenter.represent_float``'s text."""
    if x != x:
        return ".nan"
    if x == float("inf"):
        return ".inf"
    if x == float("-inf"):
        return "-.inf"
    text = repr(x).lower()
    if "." not in text and "e" in text:       # 1e+20 -> 1.0e+20, which YAML 1.1 reads as a float
        text = text.replace("e", ".0e", 1)
    return text


def _build(loader, node):
    """The Python data of ``node``, as ``loader.construct_document`` builds it, faster.

    Plain maps, sequences, strings, null, booleans, ints and floats are built here (the
    constructor's generic path, with a generator per mapping, was a quarter of reading a large
    plan); any other tag, a merge key (``<<``), a ``=`` key or an unhashable key is left to the
    loader's own constructor, which builds it or raises its usual error. Called after
    :func:`_walk`, so the recursion is at most :data:`MAX_YAML_DEPTH` deep and no node is shared.
    """
    tag = node.tag
    if tag == _STR:
        return node.value
    if tag == _MAP:
        data = {}
        for key_node, value_node in node.value:
            if key_node.tag in _CONSTRUCTOR_KEYS:
                return loader.construct_object(node, deep=True)
            key = _build(loader, key_node)
            if not isinstance(key, Hashable):
                return loader.construct_object(node, deep=True)
            data[key] = _build(loader, value_node)
        return data
    if tag == _SEQ:
        return [_build(loader, item) for item in node.value]
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return loader.bool_values[node.value.lower()]
    if tag == _INT:
        return loader.construct_yaml_int(node)
    if tag == _FLOAT:
        return loader.construct_yaml_float(node)
    return loader.construct_object(node, deep=True)


#: Mapping keys the constructor treats specially (merge ``<<``, value ``=``).
_CONSTRUCTOR_KEYS = frozenset({"tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"})


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
