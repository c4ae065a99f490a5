"""Columns of plain arrays in one ``.npz`` file: the columnar sidecar of large plans.

A plan of a million tasks is a few hundred megabytes of YAML, and reading it back makes tens of
millions of Python objects. Above a size threshold a plan therefore keeps its task list in a
sidecar file beside it (``streammap.plan`` decides what the columns are and when); this module
only knows how to write and read named one-dimensional NumPy arrays safely.

State: none. Policy:

* **Writing** goes through :func:`streammap.io.files.atomic_write` (a half-written sidecar never
  exists), uncompressed (``np.savez``: reading is a copy, not a decompression).
* **Reading** is of input that may come from someone else: at most :data:`MAX_COLUMNS_BYTES`,
  no pickled objects (``allow_pickle=False``, so no code runs on load), only one-dimensional
  arrays of numeric or boolean type, each stored uncompressed with a header that declares no more
  bytes than the member holds (:func:`_check_member`: NumPy allocates what a header declares
  before reading, and a deflated member inflates; either is gigabytes from a small file); anything else is a :class:`~streammap.errors.StreamMapError`
  (or the caller's subclass) naming the file, never a traceback.
* **Strings** travel as one UTF-8 byte array and an offsets array (:func:`encode_strings`,
  :func:`decode_strings`): no fixed-width Unicode columns (one long id would widen every row)
  and no object arrays (they would need pickle).
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from streammap.errors import StreamMapError
from streammap.io.files import atomic_write

__all__ = ["MAX_COLUMNS_BYTES", "write_columns", "read_columns", "encode_strings", "decode_strings"]

#: Largest sidecar read (a plan of a million tasks takes about 60 MB).
MAX_COLUMNS_BYTES = 8 * 1024**3
#: The array kinds a sidecar may hold: booleans, signed and unsigned integers, floats.
_KINDS = "biuf"


def write_columns(path, columns: dict[str, np.ndarray], *, what: str = "file") -> None:
    """Write ``columns`` (name -> 1-D array) to ``path`` as an uncompressed ``.npz``, atomically."""
    for name, col in columns.items():
        if col.ndim != 1 or col.dtype.kind not in _KINDS:
            raise ValueError(f"column {name!r}: a 1-D numeric or boolean array is expected, got {col.dtype}{col.shape}")
    atomic_write(path, lambda f: np.savez(f, **columns), binary=True, what=what)


def read_columns(path, error_cls=StreamMapError, what: str = "file") -> dict[str, np.ndarray]:
    """The columns of an ``.npz`` written by :func:`write_columns`.

    Raises
    ------
    StreamMapError (or ``error_cls``)
        If the file is missing, too large, not an ``.npz``, or holds anything but 1-D numeric or
        boolean arrays.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise error_cls(f"the {what} {path} does not exist", path=path,
                        hint="keep it beside the plan file it belongs to, or compile again") from None
    except OSError as exc:
        raise error_cls(f"cannot read the {what}: {exc.strerror or exc}", path=path) from None
    if size > MAX_COLUMNS_BYTES:
        raise error_cls(f"the {what} is too large: {size} bytes (limit: {MAX_COLUMNS_BYTES} bytes)", path=path,
                        hint="is this the right file?")
    columns = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for name in npz.files:
                _check_member(npz.zip, name, path, error_cls, what)
                col = npz[name]
                if col.ndim != 1 or col.dtype.kind not in _KINDS:
                    raise error_cls(f"column {name!r} of the {what} is not a 1-D numeric array "
                                    f"({col.dtype}{col.shape})", path=path, hint="compile the plan again")
                columns[name] = col
    except error_cls:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise error_cls(f"not a readable {what} ({type(exc).__name__}: {exc})", path=path,
                        hint="compile the plan again") from None
    return columns


def _check_member(archive: zipfile.ZipFile, name: str, path, error_cls, what: str) -> None:
    """Refuse column ``name`` of an ``.npz`` unless it is stored uncompressed and its ``.npy``
    header declares at most the bytes the member holds (read before the array is allocated)."""
    try:
        info = archive.getinfo(f"{name}.npy")
    except KeyError:
        raise error_cls(f"member {name!r} of the {what} is not a .npy column", path=path,
                        hint="compile the plan again") from None
    if info.compress_type != zipfile.ZIP_STORED:
        raise error_cls(f"column {name!r} of the {what} is compressed (StreamMAP writes it uncompressed)",
                        path=path, hint="compile the plan again")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
        declared = math.prod(shape) * dtype.itemsize
        held = info.file_size - member.tell()
    if declared > held:
        raise error_cls(f"column {name!r} of the {what} declares {declared} bytes but holds {held}",
                        path=path, hint="compile the plan again")


def encode_strings(values) -> tuple[np.ndarray, np.ndarray]:
    """``(utf8, offsets)``: the UTF-8 bytes of ``values`` end to end, and ``offsets`` (one more
    than there are values) such that value i is ``utf8[offsets[i]:offsets[i + 1]]``."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets


def decode_strings(utf8: np.ndarray, offsets: np.ndarray, error_cls=StreamMapError, path=None,
                   name: str = "strings") -> list[str]:
    """The strings :func:`encode_strings` encoded; an error naming ``name`` if the offsets do not
    cut ``utf8`` into valid UTF-8 pieces."""
    n = utf8.size
    if (offsets.size == 0 or offsets[0] != 0 or offsets[-1] != n or (np.diff(offsets) < 0).any()
            or utf8.dtype != np.uint8):
        raise error_cls(f"column {name!r}: offsets do not cut its bytes into strings", path=path,
                        hint="compile the plan again")
    data = utf8.tobytes()
    bounds = offsets.tolist()
    if data.isascii():
        # one character per byte: cut the decoded text, not a bytes object per string to decode
        text = data.decode("ascii")
        return [text[a:b] for a, b in zip(bounds, bounds[1:])]
    try:
        return [data[a:b].decode("utf-8") for a, b in zip(bounds, bounds[1:])]
    except UnicodeDecodeError:
        raise error_cls(f"column {name!r} holds bytes that are not UTF-8", path=path,
                        hint="compile the plan again") from None
