"""Reading input files within bounds; writing output files so that a failure never leaves half a file behind.

Every input file StreamMAP parses (YAML, JSON) is read by :func:`read_text_bounded`: a size limit
first, then strict UTF-8, so that a huge, binary or mis-encoded file is an error naming it.

Every file StreamMAP writes (plans, cluster files, run records, task graphs, outputs) goes through
:func:`atomic_write`: the content goes to a temporary file beside the target, which replaces the
target only once it is complete. A path that cannot be written (a missing folder, no permission)
is the user's to fix, so it is a :class:`~streammap.errors.StreamMapError` naming the path, not a
traceback. One rule for every command's output path (:func:`check_output_path`): the folder
must exist (it is never created behind the user's back) and the path must name a file in it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Callable

from streammap.errors import StreamMapError


def read_text_bounded(path: Path, limit: int, error_cls=StreamMapError, what: str = "file") -> str:
    """The UTF-8 text of ``path``; errors for a missing, unreadable, binary or too large file."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise error_cls(f"{what} is too large: {size} bytes (limit: {limit} bytes)", path=path,
                            hint="is this the right file?")
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise error_cls(f"file not found: {path}", hint="check the path") from None
    except IsADirectoryError:
        raise error_cls(f"{path} is a folder, not a {what}", path=path,
                        hint="give the path of the file") from None
    except OSError as exc:
        raise error_cls(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error_cls(f"not a text file: byte {exc.start} is not UTF-8", path=path,
                        hint=f"a {what} is UTF-8 text; is this the right file?") from None


def check_output_path(path, what: str = "file") -> Path:
    """``path`` as a :class:`Path` once it can name a new file; a clear error otherwise.

    Commands call it before any work, so that ``-o missing/plan.yaml``, ``-o .`` or
    ``-o /etc/passwd/x.npz`` are refused at once, with the same message everywhere.
    """
    path = Path(path)
    if path.name in ("", ".", "..") or path.is_dir():
        raise StreamMapError(f"cannot write the {what} to {path}: it is a folder, not a file name",
                             path=path, hint="give a file path, e.g. FOLDER/NAME")
    parent = path.parent
    if not parent.exists():
        raise StreamMapError(f"cannot write the {what}: the folder {parent} does not exist", path=path,
                             hint=f"create it first (mkdir -p {parent}), or write elsewhere")
    if not parent.is_dir():
        raise StreamMapError(f"cannot write the {what}: {parent} is not a folder", path=path,
                             hint="give a path inside an existing folder")
    return path


def make_parent(path, what: str = "file") -> Path:
    """``path`` as a :class:`Path`, its folder created when missing (pictures and reports go where
    they are asked); a clear error when it cannot be (a file in the way, no permission)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StreamMapError(f"cannot write the {what}: a part of {path.parent} is a file, not a folder",
                             path=path, hint="give a path inside a folder") from None
    except OSError as exc:
        raise StreamMapError(f"cannot write the {what}: cannot create the folder {path.parent}: {exc.strerror}",
                             path=path, hint="write elsewhere") from None
    return path


def atomic_write(path, write: Callable[[IO], None], *, binary: bool = False, what: str = "file") -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, then move it onto ``path``.

    Raises
    ------
    StreamMapError
        When the file cannot be written; the temporary file is removed.
    """
    path = check_output_path(path, what)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StreamMapError(f"cannot write the {what}: {exc.strerror or exc}", path=path,
                             hint="check that the folder exists and is writable") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path, text: str, *, what: str = "file") -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text), what=what)
