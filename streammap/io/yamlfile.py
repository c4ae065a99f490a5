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
* nesting at most :data:`MAX_YAML_DEPTH` levels (the constructor and the validators recurse);
* **no repeated keys** in a mapping: PyYAML keeps the last value silently, so a file would mean
  something its author does not see; the second occurrence is the error's line.

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
checks), with one exception: a string holding U+0085 (NEL) is written double-quoted, as PyYAML
writes it single-quoted where its own reader reads a space back. The C emitter writes the same bytes as the Python one on every sample plan; where it
would not (a bare scalar document; strings with control, separator or astral characters) the
Python emitter writes the nodes. A plan's task list skips the nodes altogether when it holds only
bare identifiers, numbers and small collections: :func:`dump_mapping_yaml` and
:func:`block_sequence_text` below, the same bytes again.
"""

from __future__ import annotations

import io
import re
from collections.abc import Hashable, Mapping
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


def _represent_str(representer, data: str):
    # U+0085 (NEL): PyYAML's emitter may write it inside single quotes, where its reader folds it
    # to a space, so the string would read back changed (a plan's string param, then refused by
    # its params digest). Double quotes write it escaped (``\N``).
    if "\x85" in data:
        return representer.represent_scalar(_STR, data, style='"')
    return yaml.SafeDumper.represent_str(representer, data)


class PureSafeDumper(yaml.SafeDumper):
    """PyYAML's pure safe dumper, but for strings holding U+0085 (:func:`_represent_str`)."""


PureSafeDumper.add_representer(str, _represent_str)
Dumper = PureSafeDumper
if hasattr(yaml, "CSafeDumper"):
    class _CSafeDumper(yaml.CSafeDumper):
        """libyaml's safe dumper, but for strings holding U+0085 (:func:`_represent_str`)."""

    _CSafeDumper.add_representer(str, _represent_str)
    Dumper = _CSafeDumper


def load_yaml(path, error_cls=StreamMapError, *, long_list: str | None = None):
    """Read a YAML file; return ``(data, lines)`` where ``lines`` maps a field path to its line.

    Raises ``error_cls`` naming the file and line for unreadable or malformed YAML.

    ``long_list`` names a top-level key whose block list (a plan's ``tasks``) is read by
    :func:`read_block_list` when it has the shapes :func:`block_sequence_text` writes: the same
    data and lines, without a node per value. Any other text there goes through the loader.
    """
    path = Path(path)
    text = read_text_bounded(path, MAX_YAML_BYTES, error_cls, what="YAML file")
    if long_list is not None:
        fast = _load_with_long_list(text, long_list, path, error_cls)
        if fast is not None:
            return fast
    data, lines, _ = _load_text(text, path, error_cls)
    return data, lines


def _load_text(text: str, path: Path, error_cls):
    """``(data, lines, root node)`` of ``text``, bounded as the module docstring says."""
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
    return data, lines, node


def _load_with_long_list(text: str, key: str, path: Path, error_cls):
    """:func:`load_yaml` of ``text`` with the block list under the top-level ``key`` read by
    :func:`read_block_list`, or ``None`` when the text is not of that shape.

    The list's lines are blanked out and ``key: []`` put in their place, so the rest of the file
    is read by the loader with every line where it was; the result is used only if the loader
    finds ``key`` once, as a key of a block mapping at the root, on that line, with that empty
    list. The lines of the fields are :class:`_LinesOnDemand`: found (by the loader, over the
    whole text) only when a message needs one.
    """
    opening = f"\n{key}:\n"
    at = text.find(opening)
    if at < 0 or text.find(opening, at + 1) >= 0:
        return None
    key_line = text.count("\n", 0, at) + 2                 # 1-based line of ``key:``
    body_start = at + len(opening)
    end = body_start
    while end < len(text) and text[end] in "- ":         # lines of the list start with "-" or " "
        nl = text.find("\n", end)
        end = len(text) if nl < 0 else nl + 1
    if end == body_start or not (end == len(text) or _KEY_START.match(text, end)):
        return None
    with gc_paused():                   # a large list is many new containers and no garbage
        items = read_block_list(text[body_start:end])
    if items is None:
        return None
    blanked = text[:at] + f"\n{key}: []\n" + "\n" * text.count("\n", body_start, end) + text[end:]
    data, _, node = _load_text(blanked, path, error_cls)
    if not _holds_empty_list_at(node, key, key_line):
        return None
    data[key] = items
    return data, _LinesOnDemand(text, path, error_cls)


class _LinesOnDemand(Mapping):
    """The ``lines`` of :func:`load_yaml` for a text, found when first looked up.

    Lines serve error messages only; recording one per field was most of the time a large
    list took to read. State: the text until the lines are found, then the lines.
    """

    def __init__(self, text: str, path: Path, error_cls):
        self._text: str | None = text
        self._where = (path, error_cls)
        self._lines: dict[tuple, int] = {}

    def _found(self) -> dict[tuple, int]:
        if self._text is not None:
            _, self._lines, _ = _load_text(self._text, *self._where)
            self._text = None
        return self._lines

    def __getitem__(self, loc):
        return self._found()[loc]

    def __iter__(self):
        return iter(self._found())

    def __len__(self) -> int:
        return len(self._found())

    def __bool__(self) -> bool:         # ``lines or {}`` must not look them up
        return True


#: A line that starts a top-level key (what may follow a long list).
_KEY_START = re.compile(r"[A-Za-z_]")


def _holds_empty_list_at(root, key: str, line: int) -> bool:
    """Whether ``root`` is a block mapping whose ``key`` is on ``line`` with ``[]`` as its value."""
    if not isinstance(root, MappingNode) or root.flow_style:
        return False
    found = [(k, v) for k, v in root.value if isinstance(k, ScalarNode) and k.value == key]
    if len(found) != 1:                     # a repeated key: the loader keeps the last one
        return False
    key_node, value = found[0]
    return (key_node.tag == _STR and key_node.start_mark.line + 1 == line and key_node.start_mark.column == 0
            and isinstance(value, SequenceNode) and not value.value)


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
                dumper = PureSafeDumper        # the cases where libyaml writes other bytes: see _EMITTERS_DIFFER
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
                if "\x85" in data:         # as _represent_str: single quotes would lose it
                    return ScalarNode(_STR, data, style='"')
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
        # The representer's flow style: flow when every key and value is a plain scalar (one of
        # no style of its own: a NEL string's double quotes count as one).
        flow = self.flow if self.flow is not None else all(
            type(k) is ScalarNode and k.style is None and type(v) is ScalarNode and v.style is None
            for k, v in value)
        return MappingNode(_MAP, value, flow_style=flow)

    def _sequence(self, data: list):
        value = [self._node(x) for x in data]
        flow = self.flow if self.flow is not None else all(type(x) is ScalarNode and x.style is None for x in value)
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
            _refuse_repeated_keys(node, path, error_cls)
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


def _refuse_repeated_keys(node: MappingNode, path, error_cls) -> None:
    """Refuse a mapping that has a key twice, at the second one.

    YAML says keys are unique, but PyYAML keeps the last value silently: a cluster file with
    ``memory:`` twice, or a plan with ``params:`` twice, would be read as something its reader
    never sees. Keys are compared as the loader resolves them (``1`` and ``"1"`` differ); the
    merge key ``<<`` is the constructor's business.
    """
    first: dict[tuple, int] = {}
    for key, _ in node.value:
        if not isinstance(key, ScalarNode) or key.tag in _CONSTRUCTOR_KEYS:
            continue
        ident = (key.tag, key.value)
        line = key.start_mark.line + 1
        if ident in first:
            raise error_cls(f"duplicate key '{key.value[:100]}' (first on line {first[ident]})", path=path,
                            line=line, col=key.start_mark.column + 1,
                            hint="a key may appear once in a mapping: remove one of them (YAML readers "
                                 "disagree on which one wins)")
        first[ident] = line


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


# ---------------------------------------------------------------------- a long list, written directly
#
# A plan's task list is nearly all of a large plan's YAML, and made of a few shapes only: block
# mappings of identifiers, numbers and flow lists of identifiers (``deps: [t1, t2]``), with the
# occasional flow mapping (``{ref: t1}``). Building a node per value and handing the tree to the
# emitter cost 60 % of ``compile``'s time on 10,000 tasks; :func:`block_sequence_text` writes such
# a list straight to text, following the emitter's layout rules for exactly these shapes (the
# indentation of nested block collections, the representer's flow style, the line break before a
# flow item that starts past the line width). Anything else (a string that is not a bare
# identifier, a block list inside a block list, a non-string key) makes it give up, and the caller
# writes the list with :func:`dump_yaml`: the fast path never decides how odd text is quoted.

#: Strings written plain without a second thought: an identifier-like word the resolver reads back
#: as a string (not a number, timestamp, boolean or null: it starts with a letter or ``_`` and is
#: none of :data:`_RESOLVED_WORDS`), with no indicator, space or character YAML treats specially.
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_./\-]*\Z")
_RESOLVED_WORDS = frozenset("yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF "
                            "null Null NULL".split())
#: PyYAML writes a key plain on the key's line only when it is shorter than this.
_SIMPLE_KEY_MAX = 128


#: Keys already found bare (field names, remembered up to a bound: a long-lived process writes
#: other lists too).
_GOOD_KEYS: set[str] = set()
_GOOD_KEYS_MAX = 256


class _Giveup(Exception):
    """Data :func:`block_sequence_text` does not write itself."""


def block_sequence_text(items: list, *, width: int) -> str | None:
    """The YAML of ``items`` as a block sequence at column 0, or ``None`` if it holds other shapes.

    The text is what :func:`dump_yaml` (``default_flow_style=None``, ``sort_keys=False``, the
    given ``width``) writes for ``items`` as a top-level list, and for ``items`` as the value of a
    key of a top-level mapping (``tasks:`` then this text: a block list there is not indented).

    Parameters
    ----------
    items : list
        Dicts, lists and scalars; strings must be bare identifiers (:data:`_BARE`).
    width : int
        The emitter's line width: a flow item that would start past it goes on the next line.

    Returns
    -------
    str or None
        ``None`` for an empty list or one with anything else (then use :func:`dump_yaml`).
    """
    return _block_sequence_text(items, width, set())


def _block_sequence_text(items: list, width: int, seen: set[int]) -> str | None:
    if type(items) is not list or not items or _is_flow(items):
        return None
    writer = _BlockWriter(width, seen)
    try:
        writer.block_sequence(items, indent=0)
    except _Giveup:
        return None
    return "".join(writer.out)


def _scalar_text(x) -> str:
    kind = type(x)
    if kind is str:
        if _BARE.match(x) is None or x in _RESOLVED_WORDS:
            raise _Giveup
        return x
    if kind is float:
        return _float_text(x)
    if kind is bool:
        return "true" if x else "false"
    if kind is int:
        return str(x)
    if x is None:
        return "null"
    if kind is dict or kind is list:
        raise TypeError("not a scalar")
    raise _Giveup


def _is_scalar(x) -> bool:
    kind = type(x)
    return not (kind is dict or kind is list)


def _is_flow(x) -> bool:
    """The representer's flow style: a collection of scalars alone (keys included) is flow."""
    if type(x) is dict:
        return all(_is_scalar(v) for v in x.values())   # keys: checked as keys are written
    return all(_is_scalar(v) for v in x)


class _BlockWriter:
    """Text of block collections, as PyYAML's emitter lays them out for the shapes it accepts.

    State: the pieces written so far and the current column (the emitter's line-width rule
    depends on it). Indents follow the emitter: a block mapping's keys sit two columns in from its
    parent (on the ``- `` line for a list item), a block list under a key is not indented, and a
    flow collection's wrapped items sit two columns in from the block collection holding it.
    """

    def __init__(self, width: int, seen: set[int]):
        self.width = width
        self.seen = seen          # ids of containers written: one met twice is an alias (give up)
        self.out: list[str] = []
        self.column = 0

    def write(self, text: str) -> None:
        self.out.append(text)
        self.column += len(text)

    def newline(self, indent: int) -> None:
        self.out.append("\n" + " " * indent)
        self.column = indent

    def key(self, k) -> str:
        if type(k) is not str or len(k) >= _SIMPLE_KEY_MAX:
            raise _Giveup
        if k in _GOOD_KEYS:                # a plan repeats a handful of keys on every task
            return k
        if len(_GOOD_KEYS) < _GOOD_KEYS_MAX:
            _GOOD_KEYS.add(_scalar_text(k))
        return _scalar_text(k)

    def visit(self, container) -> None:
        if id(container) in self.seen:
            raise _Giveup
        self.seen.add(id(container))

    def block_sequence(self, items: list, indent: int) -> None:
        """Items each on a ``- `` line at ``indent``; the cursor is at the end of a line."""
        self.visit(items)
        for item in items:
            if self.out:
                self.newline(indent)
            self.write("-")
            if _is_scalar(item):
                self.write(" " + _scalar_text(item))
            elif _is_flow(item):
                self.flow(item, indent + 2)
            elif type(item) is dict:
                self.write(" ")               # the item's first key on the dash's line
                self.block_mapping(item, indent + 2, first_on_line=True)
            else:                             # a block list in a block list: not written here
                raise _Giveup

    def block_mapping(self, data: dict, indent: int, first_on_line: bool = False) -> None:
        self.visit(data)
        for n, (k, v) in enumerate(data.items()):
            if not (first_on_line and n == 0):
                self.newline(indent)
            self.write(self.key(k) + ":")
            if _is_scalar(v):
                self.write(" " + _scalar_text(v))
            elif _is_flow(v):
                self.flow(v, indent + 2)
            elif type(v) is dict:
                self.block_mapping(v, indent + 2)
            else:                             # a block list under a key keeps the key's indent
                self.block_sequence(v, indent)

    def flow(self, data, indent: int) -> None:
        """``[a, b]`` or ``{k: v}`` after a key or dash; items past the width go on a new line."""
        self.visit(data)
        is_map = type(data) is dict
        texts = ([self.key(k) + ": " + _scalar_text(v) for k, v in data.items()] if is_map
                 else [_scalar_text(x) for x in data])
        # The emitter's rule, on a local column: a comma after each item but the last; the next
        # item on a new line at ``indent`` when the column is already past the width, else after
        # a space (the first item too may move to a new line).
        pieces = [" {" if is_map else " ["]
        column, width = self.column + 2, self.width
        for n, text in enumerate(texts):
            if n:
                pieces.append(",")
                column += 1
            if column > width:
                pieces.append("\n" + " " * indent)
                column = indent
            elif n:
                pieces.append(" ")
                column += 1
            pieces.append(text)
            column += len(text)
        pieces.append("}" if is_map else "]")
        self.out.append("".join(pieces))
        self.column = column + 1


def dump_mapping_yaml(data: dict, *, long_key: str, width: int) -> str:
    """``dump_yaml(data, sort_keys=False, default_flow_style=None, width=width, allow_unicode=True)``,
    byte for byte, with ``data[long_key]`` (a plan's task list) written by :func:`block_sequence_text`.

    The keys before and after ``long_key`` are written by :func:`dump_yaml` as mappings of their
    own: a top-level block mapping's text is the text of its keys one after the other. When that
    does not hold (either part alone would be a flow mapping, or a container appears twice: an
    alias) or the list has other shapes, the whole of ``data`` goes to :func:`dump_yaml`.
    """
    options = dict(sort_keys=False, default_flow_style=None, width=width, allow_unicode=True)
    if type(data) is not dict or long_key not in data or type(long_key) is not str or not _BARE.match(long_key):
        return dump_yaml(data, **options)
    keys = list(data)
    at = keys.index(long_key)
    head = {k: data[k] for k in keys[:at]}
    tail = {k: data[k] for k in keys[at + 1:]}
    seen = _container_ids(head, tail)
    body = None
    if seen is not None and not any(part and _is_flow(part) for part in (head, tail)):
        body = _block_sequence_text(data[long_key], width, seen)
    if body is None:
        return dump_yaml(data, **options)
    return "".join((dump_yaml(head, **options) if head else "", f"{long_key}:\n{body}\n",
                    dump_yaml(tail, **options) if tail else ""))


def _container_ids(*parts) -> set[int] | None:
    """Ids of every dict and list in ``parts`` (not the parts themselves); ``None`` if one repeats."""
    seen: set[int] = set()
    stack = [v for part in parts for v in part.values()]
    while stack:
        x = stack.pop()
        if type(x) is dict or type(x) is list:
            if id(x) in seen:
                return None
            seen.add(id(x))
            stack.extend(x.values() if type(x) is dict else x)
    return seen


# -- reading a block list back ---------------------------------------------------------------------

#: The characters :func:`block_sequence_text` writes (bare identifiers, numbers, indicators of
#: block and flow collections). A list with any other (a quote, a comment, an anchor, a tab, a
#: carriage return, a non-ASCII letter) is left to the loader.
_NOT_WRITTEN = re.compile(r"[^A-Za-z0-9_./:,\[\]{} \n+\-]")
_INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_FLOAT_TEXT = re.compile(r"-?[0-9]+\.[0-9]*(?:e[-+][0-9]+)?\Z")
#: Scalars whose text is a word: what YAML 1.1 resolves them to.
_WORD_VALUES = {"null": None, "true": True, "false": False, ".inf": float("inf"), "-.inf": float("-inf"),
                ".nan": float("nan")}


def read_block_list(text: str):
    """The list :func:`block_sequence_text` wrote as ``text``, or ``None`` for any other text.

    The inverse of the writer, for its shapes alone: block lists and mappings, flow lists and
    mappings of scalars (wrapped over lines as the emitter wraps them), bare identifiers,
    ``null``, ``true``, ``false``, decimal ints and floats as the representer writes them. Such
    text is YAML, and the result is what the loader builds of it; any other text (which may be
    YAML too, or not) gives ``None``: the loader reads it then, and refuses it with its message.

    Parameters
    ----------
    text : str
        The list's lines: each item starts with ``- `` at column 0.

    Returns
    -------
    list or None
    """
    if _NOT_WRITTEN.search(text):
        return None
    rows = text.split("\n")
    if rows[-1] == "":                              # the text's last newline
        rows.pop()
    reader = _ListReader(rows)
    try:
        items = reader.block_sequence(0, 1)
    except _Giveup:
        return None
    return items if reader.at == len(rows) else None


class _ListReader:
    """Reads the block collections :class:`_BlockWriter` writes, a row (line) at a time.

    State: the rows and the index of the next one. Anything the writer would not have written
    raises :class:`_Giveup`. ``depth`` is the nesting of what is being read (as the loader
    bounds it: :data:`MAX_YAML_DEPTH`, too deep is left to the loader to refuse).
    """

    def __init__(self, rows: list[str]):
        self.rows = rows
        self.at = 0
        # scalar text -> value, and per indent a "key: scalar" row -> (key, value): kernels,
        # devices and times repeat from task to task (containers are never shared: built anew)
        self.scalars: dict[str, object] = {}
        self.scalar_rows: dict[int, dict[str, tuple]] = {}
        self.flows: dict[str, tuple] = {}          # a one-row flow's text -> its items

    def scalar(self, text: str):
        """:func:`_scalar_value` of ``text``, remembered."""
        try:
            return self.scalars[text]
        except KeyError:
            value = self.scalars[text] = _scalar_value(text)
            return value

    def block_sequence(self, indent: int, depth: int) -> list:
        """Rows ``- item`` at ``indent``, from the current row on."""
        if depth >= MAX_YAML_DEPTH:
            raise _Giveup
        dash = " " * indent + "- "
        items: list = []
        rows = self.rows
        while self.at < len(rows) and rows[self.at].startswith(dash):
            items.append(self.value(rows[self.at][indent + 2:], indent + 2, depth + 1, in_list=True))
        if not items:
            raise _Giveup
        return items

    def block_mapping(self, first: str | None, indent: int, depth: int) -> dict:
        """``key: value`` rows at ``indent``; ``first`` is the first one's text when it follows a
        dash on the current row."""
        if depth >= MAX_YAML_DEPTH:
            raise _Giveup
        data: dict = {}
        rows = self.rows
        margin = " " * indent
        known = self.scalar_rows.setdefault(indent, {})
        text, whole_row = first, None
        while True:
            if text is None:
                if self.at >= len(rows):
                    break
                row = whole_row = rows[self.at]
                pair = known.get(row)
                if pair is not None:                # "key: scalar" read before at this indent
                    if pair[0] in data:
                        raise _Giveup
                    data[pair[0]] = pair[1]
                    self.at += 1
                    continue
                if not (row.startswith(margin) and _KEY_START.match(row, indent)):
                    break
                text = row[indent:]
            key, colon, rest = text.partition(":")
            if not colon or key in data or key not in _KNOWN_KEYS and not _is_bare(key):
                raise _Giveup
            if rest == "":                          # a block collection on the next rows
                self.at += 1
                data[key] = self.nested(indent, depth + 1)
            elif rest[0] != " ":
                raise _Giveup
            elif rest[1:2] == "[" or rest[1:2] == "{":
                data[key] = self.flow(rest[1:], indent + 2, depth + 1)
            else:                                   # a scalar: most rows of a plan
                data[key] = value = self.scalar(rest[1:])
                if whole_row is not None:           # not the key on a dash's row
                    known[whole_row] = (key, value)
                self.at += 1
            text = whole_row = None
        if not data:
            raise _Giveup
        return data

    def nested(self, indent: int, depth: int):
        """The block value of a key at ``indent``: a list at the same indent or a mapping deeper."""
        if self.at >= len(self.rows):
            raise _Giveup
        row = self.rows[self.at]
        if row.startswith(" " * indent + "- "):
            return self.block_sequence(indent, depth)
        deeper = indent + 2
        if row.startswith(" " * deeper) and _KEY_START.match(row, deeper):
            return self.block_mapping(None, deeper, depth)
        raise _Giveup

    def value(self, text: str, indent: int, depth: int, in_list: bool):
        """The value whose text starts ``text`` on the current row (after a dash or a key); moves
        past its last row. A flow collection's wrapped rows are at ``indent``."""
        first = text[:1]
        if first == "[" or first == "{":
            return self.flow(text, indent, depth)
        if in_list and ":" in text:                 # a mapping whose first key is on the dash's row
            return self.block_mapping(text, indent, depth)
        self.at += 1
        return self.scalar(text)

    def flow(self, text: str, indent: int, depth: int):
        """``[a, b]`` or ``{k: v}``, perhaps wrapped over rows at ``indent``."""
        if depth >= MAX_YAML_DEPTH:
            raise _Giveup
        seen = self.flows.get(text)
        if seen is not None:                        # read before: a new container of the same items
            self.at += 1
            return dict(seen) if text[0] == "{" else list(seen)
        value = self._flow(text, indent)
        is_map = text[0] == "{"
        if len(text) > 1 and text.endswith("}" if is_map else "]"):       # on one row: remembered
            self.flows[text] = tuple(value.items()) if is_map else tuple(value)
        return value

    def _flow(self, text: str, indent: int):
        """:meth:`flow`, read."""
        is_map = text[0] == "{"
        close = "}" if is_map else "]"
        inner = text[1:]
        if not inner.endswith(close):
            inner = self._wrapped(inner, close, indent)
        self.at += 1
        inner = inner[:-1]
        if _BRACKETS.search(inner):                 # the writer's flows hold scalars alone
            raise _Giveup
        if inner == "" or inner == "\n":
            return {} if is_map else []
        # The writer's separators: ", " or, where the emitter wrapped, "," and a line break (the
        # indent is cut already); the first item may also move to the next line.
        if inner[0] == "\n":
            inner = inner[1:]
        items = inner.replace(",\n", ", ").split(", ")
        scalar = self.scalar
        if not is_map:
            return [scalar(item) for item in items]
        data = {}
        for item in items:
            key, sep, rest = item.partition(": ")
            if not sep or key in data or key not in _KNOWN_KEYS and not _is_bare(key):
                raise _Giveup
            data[key] = scalar(rest)
        return data

    def _wrapped(self, inner: str, close: str, indent: int) -> str:
        """A flow collection's text from its rows (joined by line breaks, the indent cut), from
        after its opening bracket up to and with its closing one."""
        parts = [inner]
        margin = " " * indent
        while not parts[-1].endswith(close):
            self.at += 1
            if self.at >= len(self.rows):
                raise _Giveup
            row = self.rows[self.at]
            if not row.startswith(margin) or row[indent:indent + 1] in ("", " "):
                raise _Giveup
            parts.append(row[indent:])
        return "\n".join(parts)


_BRACKETS = re.compile(r"[\[\]{}]")
#: Keys already read as bare (a plan repeats a handful on every task), up to a bound.
_KNOWN_KEYS: set[str] = set()


def _is_bare(key: str) -> bool:
    """Whether ``key`` is a bare identifier the writer writes plain; remembered if so."""
    if _BARE.match(key) is None or key in _RESOLVED_WORDS:
        return False
    if len(_KNOWN_KEYS) < _GOOD_KEYS_MAX:
        _KNOWN_KEYS.add(key)
    return True


def _scalar_value(text: str):
    """What YAML 1.1 reads a scalar the writer wrote as; other texts give up."""
    if text in _WORD_VALUES:
        return _WORD_VALUES[text]
    if _BARE.match(text):
        if text in _RESOLVED_WORDS:
            raise _Giveup
        return text
    if _INT_TEXT.match(text):
        return int(text)
    if _FLOAT_TEXT.match(text):
        return float(text)
    raise _Giveup
