"""A device's idle gaps with an index of their lengths, for HEFT's insertion search.

HEFT (:mod:`streammap.mappers.heft`) may start a task in an idle gap between two tasks already on
a device. Its search for the earliest such gap was a linear scan over the device's gaps, and the
gap lists grow with the tasks a device holds: at 1M tasks on 1,024 devices that scan was most of
HEFT's time (issue 16). This module keeps the gaps of one device and answers "the first gap at or
after index i that a task of length w fits" by skipping whole blocks of gaps at a time.

State
-----
``s``, ``e``
    Start and end of each gap, sorted and disjoint (``e[j] <= s[j + 1]``), as plain lists: the
    memory-aware search in :mod:`~streammap.mappers.heft` reads and bisects them directly.
``length``
    ``e[j] - s[j]`` per gap, kept in step with ``s`` and ``e``.
``block_max``
    For each block of :data:`BLOCK` consecutive gap positions (``[k*BLOCK, (k+1)*BLOCK)``), the
    longest length in it, or ``None`` where it is not known. A gap inserted or removed in the
    middle shifts every later gap to the next or previous position, so every later block's maximum
    is forgotten (one slice assignment); the search recomputes a forgotten maximum when it gets
    there (one C-level ``max`` over the block) and keeps it.

Policy
------
The search answers exactly what the linear scan answered: the first ``j >= i`` with
``s[j] + w <= e[j]`` as floating-point numbers compute it. Lengths are only a filter: a gap or
block is skipped when its length is below ``w`` by more than the rounding of ``s + w`` and
``e - s`` can account for (:func:`_threshold`), and every gap not skipped is tested with the exact
comparison. So the index can never change a schedule, only how many gaps are looked at: the
search costs O(BLOCK + G / BLOCK) comparisons, most of them inside C-level ``max`` calls, instead
of O(G) Python steps.
"""

from __future__ import annotations

__all__ = ["BLOCK", "GapList"]

#: Gap positions per block of the length index.
BLOCK = 32

#: Relative slack of the length filter: ``fl(s + w) <= e`` implies ``fl(e - s) >= w - 2.1u·e``
#: for times ``s, e >= 0`` (u = 2^-53, one rounding in each operation), and 1e-15 > 4 × 2.1u.
_REL_SLACK = 1e-15


def _threshold(w: float, largest_end: float) -> float:
    """A length below which no gap ending by ``largest_end`` passes ``s + w <= e``."""
    return w - _REL_SLACK * (largest_end + abs(w))


class GapList:
    """The idle gaps of one device, sorted by time, with a block index of their lengths.

    Parameters
    ----------
    None; a device starts with no gaps.

    Notes
    -----
    Change the gaps only through :meth:`append` and :meth:`replace`: they keep ``length`` and
    ``block_max`` in step with ``s`` and ``e``.
    """

    __slots__ = ("s", "e", "length", "block_max")

    def __init__(self):
        self.s: list[float] = []
        self.e: list[float] = []
        self.length: list[float] = []
        self.block_max: list[float | None] = []

    def __len__(self) -> int:
        return len(self.s)

    def append(self, start: float, end: float) -> None:
        """Add the gap ``[start, end)`` after every gap the device has."""
        n = len(self.s)
        self.s.append(start)
        self.e.append(end)
        gap = end - start
        self.length.append(gap)
        if n % BLOCK == 0:
            self.block_max.append(gap)
        else:
            m = self.block_max[-1]
            if m is not None and gap > m:
                self.block_max[-1] = gap

    def replace(self, i: int, starts: list[float], ends: list[float]) -> None:
        """Replace gap ``i`` by the gaps ``starts[k], ends[k]`` (none, one or two, within it)."""
        self.s[i:i + 1] = starts
        self.e[i:i + 1] = ends
        self.length[i:i + 1] = [y - x for x, y in zip(starts, ends)]
        k = i // BLOCK
        n_blocks = -(-len(self.s) // BLOCK)
        if len(starts) == 1:
            self.block_max[k] = None           # only gap i changed: its block only
        else:
            # Every gap after i moved one position: each later block holds other gaps now.
            self.block_max[k:] = [None] * (n_blocks - k)

    def longest(self) -> float:
        """The longest gap's length (0.0 without gaps)."""
        return max(self.length, default=0.0)

    def first_fit(self, i: int, w: float) -> int | None:
        """The first gap ``j >= i`` with ``s[j] + w <= e[j]``, or None.

        The same answer as testing every gap from ``i`` on in turn: lengths only skip gaps that
        cannot pass (see the module docstring).
        """
        s, e, length = self.s, self.e, self.length
        n = len(s)
        if i >= n:
            return None
        lo = _threshold(w, e[-1])
        # The rest of i's block: one C-level max decides whether any of it is worth a look.
        k0 = i // BLOCK + 1
        end = min(n, k0 * BLOCK)
        if max(length[i:end]) >= lo:
            j = self._scan(i, end, w, lo)
            if j is not None:
                return j
        block_max = self.block_max
        for k in range(k0, len(block_max)):
            m = block_max[k]
            a = k * BLOCK
            if m is None:
                m = block_max[k] = max(length[a:a + BLOCK])
            if m >= lo:
                j = self._scan(a, min(n, a + BLOCK), w, lo)
                if j is not None:
                    return j
        return None

    def _scan(self, a: int, b: int, w: float, lo: float) -> int | None:
        """The first j in ``[a, b)`` with ``s[j] + w <= e[j]``, looking only at gaps of length ``>= lo``."""
        s, e, length = self.s, self.e, self.length
        for j in range(a, b):
            if length[j] >= lo and s[j] + w <= e[j]:
                return j
        return None
