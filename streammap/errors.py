"""Errors a user can act on.

Every error StreamMAP reports about its input (a program, a cluster file, a plan) is a
:class:`StreamMapError`. It carries where the problem is (file, line, column), the offending source
line, and a hint that says what is allowed, so that the CLI can print it in one format::

    samples/bad.py:12:5: error: unknown clause 'flop' in kernel directive
        # @stream kernel(flop=2*N)
                         ^
    hint: kernel clauses are flops, bytes, mem, out, device, split, share, stateful, retries

The CLI prints :meth:`StreamMapError.format` and exits with status 2 (:data:`EXIT_USAGE`);
nothing is written when an error is raised, because writers only open their output after the
whole result is built.
"""

from __future__ import annotations

from pathlib import Path

#: Exit status for bad input (a program, cluster, plan or option the user must fix).
EXIT_USAGE = 2
#: Exit status for a run that failed while executing a valid plan (a kernel raised).
EXIT_FAILURE = 1
#: The longest source line an error quotes whole. A longer one (minified code, a megabyte of YAML
#: on one line) is quoted as a window of this many characters around the column, so that one error
#: is a few lines of terminal output, never megabytes.
MAX_QUOTED_LINE = 200
#: The longest text of a user's value an error message echoes whole (:func:`shown`).
MAX_SHOWN_VALUE = 60
#: Integers of more digits than this are echoed in scientific notation (:func:`shown`).
MAX_SHOWN_DIGITS = 20


class StreamMapError(Exception):
    """A problem with the user's input, with its position when one is known.

    Parameters
    ----------
    message : str
        What is wrong, in one sentence.
    path : str or Path, optional
        The file the problem is in.
    line, col : int, optional
        1-based line and column of the problem in ``path``.
    source_line : str, optional
        The text of that line; read from ``path`` when omitted and the file exists.
    hint : str, optional
        What is allowed, or what to do.
    """

    def __init__(self, message, *, path=None, line=None, col=None, source_line=None, hint=None):
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.col = col
        if source_line is None and self.path and line:
            source_line = _read_line(self.path, line)
        self.source_line = source_line
        self.hint = hint

    def location(self) -> str:
        """``file:line:col`` (as much of it as is known), or an empty string."""
        parts = [p for p in (self.path, self.line, self.col) if p is not None]
        return ":".join(str(p) for p in parts)

    def format(self) -> str:
        """The error as the CLI prints it: location, message, source line with caret, hint."""
        loc = self.location()
        out = [f"{loc}: error: {self.message}" if loc else f"error: {self.message}"]
        if self.source_line is not None:
            text, col = quoted_window(self.source_line.rstrip("\n"), self.col)
            out.append("    " + text)
            if col:
                # Keep tabs so the caret lines up under the offending column.
                pad = "".join(c if c == "\t" else " " for c in text[: col - 1])
                out.append("    " + pad + "^")
        if self.hint:
            out.append(f"hint: {self.hint}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.format()


class DirectiveError(StreamMapError):
    """A `# @stream` directive, or the graph body it describes, is not valid."""


class ClusterError(StreamMapError):
    """A cluster file is not valid, or discovery failed."""


class PlanError(StreamMapError):
    """A plan file is not valid, or no longer matches its source."""


class MappingError(StreamMapError):
    """No placement exists: a task fits on no device of the cluster."""


class KernelError(Exception):
    """A kernel raised while a plan ran.

    Not a :class:`StreamMapError`: the plan was valid, the user's code failed. Carries the task id,
    the call site and the original traceback text.
    """

    def __init__(self, task_id: str, site: str | None, device: str, traceback_text: str, cause=None):
        self.task_id = task_id
        self.site = site
        self.device = device
        self.traceback_text = traceback_text
        self.cause = cause
        where = f" (called at {site})" if site else ""
        super().__init__(f"task {task_id}{where} failed on {device}")

    def format(self) -> str:
        return f"error: {self}\n{self.traceback_text.rstrip()}"


def quoted_window(text: str, col: int | None) -> tuple[str, int | None]:
    """``(text, col)`` clipped to :data:`MAX_QUOTED_LINE` characters around ``col`` (the line's
    start when there is none), ``...`` marking each cut end; ``col`` then counts in the clipped
    text, so the caret still points at the same character."""
    if len(text) <= MAX_QUOTED_LINE:
        return text, col
    start = max(0, min((col or 1) - 1 - MAX_QUOTED_LINE // 2, len(text) - MAX_QUOTED_LINE))
    end = start + MAX_QUOTED_LINE
    head = "..." if start else ""
    tail = "..." if end < len(text) else ""
    return head + text[start:end] + tail, (col - start + len(head) if col else None)


def shown(value, limit: int = MAX_SHOWN_VALUE) -> str:
    """A user's value as an error message echoes it: whole when short, bounded when not.

    A message quotes what the user wrote so they can find it, but a value can be anything a file
    or an option holds: a 300-digit byte count, a megabyte string. Every error that echoes a value
    goes through here, so that no message is longer than a few lines of terminal.

    - an integer of more than :data:`MAX_SHOWN_DIGITS` digits: its leading digits in scientific
      notation and its length, ``9.99e+299 (a 300-digit number)`` (computed from the digits, so
      an integer too large for a float is shown too);
    - anything else: its ``repr`` when that is at most ``limit`` characters, else the start of
      it and its length, ``'99999...'... (301 characters)``.

    Floats are short already (``1e+300``); ``bool`` is not counted as an integer.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        digits = str(abs(value))
        if len(digits) <= MAX_SHOWN_DIGITS:
            return str(value)
        sign = "-" if value < 0 else ""
        return f"{sign}{digits[0]}.{digits[1:3]}e+{len(digits) - 1} (a {len(digits)}-digit number)"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:max(limit - 20, 10)]}... ({len(text)} characters)"


def _read_line(path: str, line: int) -> str | None:
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return lines[line - 1] if 0 < line <= len(lines) else None
