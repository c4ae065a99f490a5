"""Reading input files within bounds; writing output files so that a failure never leaves half a file behind.

Every input file StreamMAP parses (YAML, JSON) is read by :func:`read_text_bounded`: a regular file
only, a size limit, then strict UTF-8, so that a huge, binary or mis-encoded file is an error naming
it, and a FIFO, a device (``/dev/zero``), a socket or a folder is refused before a byte is read
(they block, or never end). Input read by other means (a program, through ``tokenize``; a file
whose sha256 a plan records) is checked first by :func:`check_regular_file`.

Every file StreamMAP writes (plans, cluster files, run records, task graphs, outputs) goes through
:func:`atomic_write`: the content goes to a temporary file beside the target, which replaces the
target only once it is complete. A path that cannot be written (a missing folder, no permission)
is the user's to fix, so it is a :class:`~streammap.errors.StreamMapError` naming the path, not a
traceback. One rule for every command's output path (:func:`check_output_path`): the folder
must exist (it is never created behind the user's back) and the path must name a file in it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Callable

from streammap.errors import StreamMapError

#: What a path that is not a regular file is, by ``stat`` file type (for the message).
_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def not_regular(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is when it is not a regular file (``None`` when it is)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def _not_a_file(path, kind: str, what: str, error_cls):
    return error_cls(f"{path} is {kind}, not a {what}", path=path,
                     hint=f"give the path of a regular file (a {what} is read whole: a pipe, device "
                          "or socket could block or never end)")


def check_regular_file(path, error_cls=StreamMapError, what: str = "file") -> Path:
    """``path`` as a :class:`Path` once it names an existing regular file (links followed); a
    clear error for a missing path, a folder, a FIFO, a device or a socket, found by ``stat``
    alone: opening a FIFO waits for a writer, reading ``/dev/zero`` never ends."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise error_cls(f"file not found: {path}", hint="check the path") from None
    except OSError as exc:
        raise error_cls(f"cannot read {path}: {exc.strerror or exc}") from None
    kind = not_regular(mode)
    if kind is not None:
        raise _not_a_file(path, kind, what, error_cls)
    return path


def read_bytes_bounded(path, limit: int, error_cls=StreamMapError, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; errors for a missing,
    unreadable, too large or not regular file (a FIFO, a device, a socket, a folder).

    The file is opened without blocking (``O_NONBLOCK``: a FIFO opens at once) and checked with
    ``fstat`` on the open descriptor, so what is read is what was checked, even if the path is
    swapped between the two; at most ``limit + 1`` bytes are read, so a file that grows while it
    is read is refused too.
    """
    path = check_regular_file(path, error_cls, what)        # a socket cannot even be opened
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error_cls(f"file not found: {path}", hint="check the path") from None
    except OSError as exc:
        raise error_cls(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        try:
            info = os.fstat(fd)
            kind = not_regular(info.st_mode)
            if kind is not None:
                raise _not_a_file(path, kind, what, error_cls)
            if info.st_size > limit:
                raise _too_large(path, info.st_size, limit, what, error_cls)
            data = f.read(limit + 1) or b""     # readall would follow a growing file past the limit
            while len(data) <= limit:
                more = f.read(limit + 1 - len(data))
                if not more:
                    break
                data += more
        except OSError as exc:
            raise error_cls(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise _too_large(path, len(data), limit, what, error_cls)
    return data


def _too_large(path, size: int, limit: int, what: str, error_cls):
    return error_cls(f"{what} is too large: {size} bytes (limit: {limit} bytes)", path=path,
                     hint="is this the right file?")


def read_text_bounded(path: Path, limit: int, error_cls=StreamMapError, what: str = "file") -> str:
    """The UTF-8 text of ``path``; errors for a missing, unreadable, binary, too large or not
    regular file (see :func:`read_bytes_bounded`)."""
    data = read_bytes_bounded(path, limit, error_cls, what)
    try:
        return data.decode("utf-8")
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
