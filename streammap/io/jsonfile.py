"""JSON parsed strictly: a key repeated in an object is an error, not last-wins.

Policy: JSON that StreamMAP reads from someone else (run records, workflow files, the job
service's request bodies) is parsed by :func:`loads_strict`. ``json.loads`` keeps the last value of
a repeated key silently, so ``{"gpus": 1, "gpus": 1000}`` would be read as something its author
(or a reviewer of the file) does not see; YAML files get the same rule in
:mod:`streammap.io.yamlfile`.

Cost: the C scanner still parses; an ``object_pairs_hook`` builds each object and compares its
size with its pairs (a repeated key makes the dict smaller). Only on a repeat is the text parsed
again, by the pure-Python scanner, to find the line and column of the object that repeats it:
the error path pays for the position, the normal one does not.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner

from streammap.errors import StreamMapError


class DuplicateKeyError(ValueError):
    """A JSON object has ``key`` twice; ``line`` and ``col`` (1-based, when found) are where the
    object starts."""

    def __init__(self, key: str, line: int | None = None, col: int | None = None):
        super().__init__(f"duplicate key {key[:100]!r} in a JSON object")
        self.key = key
        self.line = line
        self.col = col


def _unique_pairs(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


class NotFiniteError(ValueError):
    """The JSON holds ``NaN``, ``Infinity`` or ``-Infinity`` (not JSON, but Python writes and reads them)."""

    def __init__(self, word: str):
        super().__init__(f"{word} is not a finite number (JSON numbers are finite)")
        self.word = word


def _refuse_constant(word: str):
    raise NotFiniteError(word)


def loads_strict(text: str | bytes, *, finite: bool = False):
    """``json.loads(text)``, refusing an object with a repeated key.

    Parameters
    ----------
    text : str or bytes
        The JSON document.
    finite : bool
        Refuse ``NaN`` and infinities too (``json.loads`` reads them): for what is stored and
        written back as JSON, where they cannot be written again.

    Raises
    ------
    DuplicateKeyError
        With the key, and the line and column of the object that repeats it.
    NotFiniteError
        With ``finite``, for ``NaN``, ``Infinity`` or ``-Infinity``.
    json.JSONDecodeError, RecursionError, ValueError
        As ``json.loads`` does.
    """
    try:
        if finite:
            return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except DuplicateKeyError as exc:
        raise _located(text, exc.key) from None


def _located(text: str | bytes, key: str) -> DuplicateKeyError:
    """``key``'s error with the position of the first object that repeats a key (the pure-Python
    scanner passes each object's start to ``parse_object``)."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder(object_pairs_hook=list)

    def parse_object(s_and_end, *args):
        s, start = s_and_end
        pairs, end = json.decoder.JSONObject(s_and_end, *args)
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            line = s.count("\n", 0, start) + 1
            col = start - (s.rfind("\n", 0, start) + 1)         # start is just after the brace
            raise DuplicateKeyError(next(k for i, k in enumerate(keys) if k in keys[:i]), line, col)
        return pairs, end

    decoder.parse_object = parse_object
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    try:
        decoder.decode(text)
    except DuplicateKeyError as exc:
        return exc
    except (ValueError, RecursionError):            # too deep for the Python scanner: no position
        pass
    return DuplicateKeyError(key)


def duplicate_key_error(exc: DuplicateKeyError, path=None, error_cls=StreamMapError, what: str = "JSON file"):
    """``exc`` as the ``file:line:col`` error every command prints."""
    return error_cls(f"duplicate key {exc.key[:100]!r} in an object of this {what}", path=path,
                     line=exc.line, col=exc.col,
                     hint="a key may appear once in a JSON object: remove one of them (readers disagree "
                          "on which one wins)")
