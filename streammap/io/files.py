"""Writing output files so that a failure never leaves half a file behind.

Every file StreamMAP writes (plans, cluster files, run records, task graphs, outputs) goes through
:func:`atomic_write`: the content goes to a temporary file beside the target, which replaces the
target only once it is complete. A path that cannot be written (a missing folder, no permission)
is the user's to fix, so it is a :class:`~streammap.errors.StreamMapError` naming the path, not a
traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Callable

from streammap.errors import StreamMapError


def atomic_write(path, write: Callable[[IO], None], *, binary: bool = False, what: str = "file") -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, then move it onto ``path``.

    Raises
    ------
    StreamMapError
        When the file cannot be written; the temporary file is removed.
    """
    path = Path(path)
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
