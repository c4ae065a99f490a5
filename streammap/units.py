"""Readable quantities: ``80GiB``, ``25 GB/s``, ``10us``, ``19.5 TFLOP/s``.

Cluster files accept sizes, rates and times either as plain numbers (bytes, bytes/s, FLOP/s,
seconds) or as strings with a unit. Decimal prefixes (k, M, G, T, P) are powers of 1000; binary
prefixes (Ki, Mi, Gi, Ti, Pi) powers of 1024. ``B`` is a byte, ``b`` a bit.
"""

from __future__ import annotations

import math
import re

from streammap.errors import shown

#: Largest quantity any input may give: bytes, seconds, FLOP and their rates (3e22 years; a
#: million yottabytes), and 1/MAX_QUANTITY the smallest positive rate. Finite numbers near the
#: float range's end (1e308) add up past it in the estimates' and the mappers' sums (a task's
#: bytes, a device's memory level, ranks), and a rate near 0 divides a task's work into infinity:
#: infinities, then NaN, warnings on the terminal and tasks "needing 9.31e+298 GiB", where a number
#: this size is never meant. Program clauses, workflows, cluster files and plans share this bound.
MAX_QUANTITY = 1e30

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_TIME = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

# Digits, then optionally a point and more digits: one way to read each number (the earlier
# \d+\.?\d* read "111" as 1+11, 11+1, ... and took minutes to refuse 100,000 digits and a typo).
_NUMBER = r"(?P<num>\+?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*"
_PREFIX = r"(?P<prefix>Ki|Mi|Gi|Ti|Pi|Ei|[kKMGTPE]?)"


def _number(value, what: str) -> float | None:
    if isinstance(value, bool):
        raise ValueError(f"expected a {what}, got a boolean")
    if isinstance(value, (int, float)):
        if (isinstance(value, float) and math.isnan(value)) or value < 0:
            raise ValueError(f"expected a non-negative {what}, got {shown(value)}")
        return bounded(value, what, value)
    if not isinstance(value, str):
        raise ValueError(f"expected a {what} as a number or a string such as {_EXAMPLES[what]}")
    return None


def bounded(n, what: str, written) -> float:
    """``n`` as a float when it is at most :data:`MAX_QUANTITY` (compared before converting: an
    int of 400 digits does not fit a float); ``written`` is what the file said, for the message."""
    if not n <= MAX_QUANTITY:                       # inf, and NaN (which compares false)
        raise ValueError(f"a {what} must be finite and at most {MAX_QUANTITY:g}, got {shown(written)}")
    return float(n)


def _positive_rate(n: float, what: str, written) -> float:
    """A rate, refused when above 0 but below 1/:data:`MAX_QUANTITY` (0 is the fields' own
    error): a task's work divided by it would pass the float range."""
    if 0 < n < 1 / MAX_QUANTITY:
        raise ValueError(f"a {what} must be at least {1 / MAX_QUANTITY:g}, "
                         f"got {shown(written)}")
    return n


def _scale(prefix: str) -> float:
    return _BINARY[prefix] if prefix in _BINARY else _DECIMAL[prefix]


_EXAMPLES = {"size": "'80GiB'", "rate": "'25 GB/s'", "time": "'10us'", "compute rate": "'19.5 TFLOP/s'"}


def _parse_bytes(value, what: str, per_second: bool) -> float:
    n = _number(value, what)
    if n is not None:
        return n
    suffix = r"(?P<unit>B|b|bytes?)" + (r"\s*(/\s*s|ps)" if per_second else "?")
    m = re.fullmatch(_NUMBER + _PREFIX + suffix, value.strip())
    if not m:
        example = "25 GB/s, 100 Gb/s or bytes per second" if per_second else "80GiB, 512 MB or a number of bytes"
        raise ValueError(f"cannot read {shown(value)} as a {what}; write e.g. {example}")
    bits = m["unit"] == "b"
    return bounded(float(m["num"]) * _scale(m["prefix"]) / (8.0 if bits else 1.0), what, value)


def parse_size(value) -> float:
    """Bytes from ``80GiB``, ``512 MB``, ``1.5e9`` or ``8Gb`` (bits)."""
    return _parse_bytes(value, "size", per_second=False)


def parse_rate(value) -> float:
    """Bytes per second from ``25 GB/s``, ``100 Gb/s`` (bits), ``300GiB/s`` or a number."""
    return _positive_rate(_parse_bytes(value, "rate", per_second=True), "rate", value)


def parse_flops(value) -> float:
    """Operations per second from ``19.5 TFLOP/s``, ``2 TFLOPS`` or a number."""
    n = _number(value, "compute rate")
    if n is None:
        m = re.fullmatch(_NUMBER + _PREFIX + r"(FLOP/s|FLOPS|flop/s|flops|OP/s|OPS)", value.strip())
        if not m:
            raise ValueError(f"cannot read {shown(value)} as a compute rate; write e.g. 19.5 TFLOP/s or operations "
                             "per second")
        n = bounded(float(m["num"]) * _scale(m["prefix"]), "compute rate", value)
    return _positive_rate(n, "compute rate", value)


def parse_time(value) -> float:
    """Seconds from ``10us``, ``3 ms``, ``2s`` or a number of seconds."""
    n = _number(value, "time")
    if n is not None:
        return n
    m = re.fullmatch(_NUMBER + r"(?P<unit>s|sec|ms|us|µs|ns|min|h)", value.strip())
    if not m:
        raise ValueError(f"cannot read {shown(value)} as a time; write e.g. 10us, 3 ms or a number of seconds")
    return bounded(float(m["num"]) * _TIME[m["unit"]], "time", value)


def format_size(n: float) -> str:
    """``80GiB``-style text for a byte count (for tables and messages)."""
    for unit, scale in (("PiB", 2.0**50), ("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if abs(n) >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.0f}B"


def format_time(t: float) -> str:
    """``12.3 ms``-style text for seconds."""
    if t == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(t) >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t / 1e-9:.4g} ns"
