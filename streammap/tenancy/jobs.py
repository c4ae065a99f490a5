"""Job streams for the simulator: the jobs file, and a seeded Poisson generator.

A jobs file is YAML (or JSON) holding a list, one entry per job::

    - {graph: ../shared/benchmarks/workflows/blast-chameleon-small-001.json, tenant: vision, arrival: 0}
    - {program: samples/fm_radio.py, tenant: nlp, arrival: 12.5, defines: {N: 65536}, priority: 1}
    - {graph: g.json, tenant: nlp, arrival: 30, gpus: 4}          # a stated gang width

``program`` (a ``.py`` with directives) or ``graph`` (WfCommons or node-link JSON) is a path
relative to the jobs file; ``arrival`` is in seconds; ``defines`` are ``-D`` params; ``priority``
(default 0, higher first) orders a tenant's own jobs; ``gpus`` fixes the gang width (default:
chosen from the mapper's estimates, :mod:`.estimate`); ``share`` (0 < share <= 1) says the job
needs only that fraction of one GPU, so it may share one with other jobs (:mod:`.packing`).
``id`` is optional (default ``j<N>``).

:func:`poisson_jobs` draws arrivals of a Poisson process (exponential gaps of mean ``1/rate``),
each job a graph drawn uniformly from a set and a tenant drawn by the tenants' arrival shares,
all from one seed, so a stream is reproducible.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from streammap.errors import StreamMapError, shown
from streammap.io.files import atomic_write_text
from streammap.io.yamlfile import load_yaml, validation_error
from streammap.ir import MIN_SHARE
from streammap.tenancy.tenants import MAX_WEIGHT, MIN_WEIGHT


class JobsError(StreamMapError):
    """A jobs file is not valid."""


#: Latest arrival a job may have, seconds (about 31 years): later ones, or infinite ones, turned
#: every figure of a simulation into inf or NaN.
MAX_ARRIVAL = 1e9
#: Largest priority magnitude (the job service's bound).
MAX_PRIORITY = 1_000_000


class JobSpec(BaseModel):
    """One job of a stream."""

    model_config = ConfigDict(extra="forbid")
    id: Optional[str] = None
    program: Optional[str] = None
    graph: Optional[str] = None
    tenant: str
    arrival: float = Field(default=0.0, ge=0, le=MAX_ARRIVAL, allow_inf_nan=False)
    defines: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    gpus: Optional[int] = Field(default=None, ge=1)
    share: Optional[float] = Field(default=None, ge=MIN_SHARE, le=1)      # ir.MIN_SHARE, as a task's
    entry: Optional[str] = None
    _where: tuple = PrivateAttr(default=(None, None))      # (jobs file, line), for errors

    @field_validator("defines")
    @classmethod
    def _finite_defines(cls, defines: dict) -> dict:
        # YAML's .nan and .inf (and JSON's NaN) read as floats: a -D value must be finite.
        for name, value in defines.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"define {name!r} is {value}, not a finite number")
        return defines

    @model_validator(mode="after")
    def _check(self):
        if (self.program is None) == (self.graph is None):
            raise ValueError("give exactly one of 'program' (a .py file) or 'graph' (a .json task graph)")
        return self

    @property
    def source(self) -> str:
        return self.program or self.graph


def load_jobs(path) -> list[JobSpec]:
    """Read a jobs file; source paths come back resolved against the file's folder.

    Raises
    ------
    JobsError
        With the file, line and field of the first problem.
    """
    path = Path(path)
    data, lines = load_yaml(path, JobsError)
    if not isinstance(data, list) or not data:
        raise JobsError("a jobs file must be a list of jobs" + (", not an empty one" if data == [] else ""),
                        path=path, line=1, hint="- {graph: g.json, tenant: team-a, arrival: 0}")
    jobs = []
    for i, item in enumerate(data):
        try:
            jobs.append(JobSpec.model_validate(item))
        except pydantic.ValidationError as exc:
            sub = {k[1:]: v for k, v in lines.items() if k[:1] == (i,)}
            err = validation_error(exc, path, sub, JobsError, "job")
            err.message = f"job [{i}]: {err.message}"
            raise err from None
    base = path.parent
    seen = set()
    for i, j in enumerate(jobs):
        src = Path(j.source)
        if not src.is_absolute():
            src = base / src
        if not src.exists():
            raise JobsError(f"[{i}]: file not found: {j.source}", path=path, line=lines.get((i,)),
                            hint="paths are relative to the jobs file")
        if j.program:
            j.program = str(src.resolve())
        else:
            j.graph = str(src.resolve())
        j.id = j.id or f"j{i + 1}"
        j._where = (str(path), lines.get((i,)))
        if j.id in seen:
            raise JobsError(f"[{i}]: job id '{j.id}' appears twice", path=path, line=lines.get((i,)))
        seen.add(j.id)
    return jobs


def write_jobs(jobs: list[JobSpec], path) -> None:
    """Write a jobs file (YAML; JSON when the name ends in ``.json``), paths relative to its folder."""
    path = Path(path)
    rows = []
    for j in jobs:
        d = j.model_dump(exclude_none=True, exclude_defaults=True)
        d["tenant"], d["arrival"] = j.tenant, round(j.arrival, 6)
        key = "program" if j.program else "graph"
        d[key] = _relative(j.source, path.parent)
        rows.append(d)
    if path.suffix == ".json":
        text = json.dumps(rows, indent=1) + "\n"
    else:   # one job a line
        text = "".join("- " + yaml.safe_dump(r, sort_keys=False, default_flow_style=True, width=1 << 16).strip() + "\n"
                       for r in rows) or "[]\n"
    atomic_write_text(path, text, what="jobs file")


def _relative(source: str, base: Path) -> str:
    import os  # noqa: PLC0415
    try:
        return os.path.relpath(Path(source).resolve(), base.resolve())
    except ValueError:
        return str(Path(source).resolve())


def parse_tenant_shares(text: str) -> dict[str, float]:
    """``"a,b:2,c"`` -> ``{"a": 0.25, "b": 0.5, "c": 0.25}`` (arrival shares, normalised)."""
    shares = {}
    for part in text.split(","):
        name, _, w = part.strip().partition(":")
        if not name:
            continue
        try:
            shares[name] = float(w) if w else 1.0
        except ValueError:
            raise StreamMapError(f"--tenants {text!r}: {w!r} is not a number",
                                 hint="NAME[:SHARE],... e.g. a,b:2") from None
        if not MIN_WEIGHT <= shares[name] <= MAX_WEIGHT:        # NaN fails too
            raise StreamMapError(f"--tenants {shown(text)}: shares must be numbers from {MIN_WEIGHT:g} to "
                                 f"{MAX_WEIGHT:g}, as tenants' weights", hint="NAME[:SHARE],... e.g. a,b:2")
    if not shares:
        raise StreamMapError("--tenants: give at least one tenant name", hint="e.g. --tenants a,b,c")
    total = sum(shares.values())
    return {k: v / total for k, v in shares.items()}


#: Fractions of a GPU drawn for the small shared jobs of a generated stream (``shared`` > 0).
SHARE_SIZES = (0.25, 0.5)


def poisson_jobs(graphs, rate: float, count: int, tenants: dict[str, float], seed: int = 0,
                 priorities: int = 1, shared: float = 0.0) -> list[JobSpec]:
    """A seeded Poisson stream of ``count`` jobs.

    Parameters
    ----------
    graphs : list of str or Path
        Task graphs (JSON) or programs to draw from, uniformly.
    rate : float
        Mean arrivals per second.
    tenants : dict
        Tenant name -> share of the arrivals.
    priorities : int
        Priorities drawn uniformly from ``0 .. priorities-1``.
    shared : float
        Share of the jobs that need only a fraction of one GPU (``share`` drawn uniformly from
        :data:`SHARE_SIZES`). Drawn from a stream of its own, so the arrivals, tenants and graphs
        are those of the same seed without shared jobs.
    """
    if rate <= 0 or count < 0:
        raise StreamMapError("--rate must be > 0 and --jobs-count >= 0")
    graphs = [str(g) for g in graphs]
    if not graphs:
        raise StreamMapError("no graphs to draw jobs from", hint="give --graphs FILES or a folder of .json graphs")
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=count))
    names = list(tenants)
    who = rng.choice(len(names), size=count, p=[tenants[n] for n in names])
    what = rng.integers(0, len(graphs), size=count)
    prio = rng.integers(0, max(1, priorities), size=count)
    if not 0 <= shared <= 1:
        raise StreamMapError(f"the share of shared jobs must be in [0, 1], not {shared}")
    side = np.random.default_rng([seed, 1])
    small = side.random(count) < shared
    sizes = side.choice(SHARE_SIZES, size=count)
    out = []
    for i in range(count):
        src = graphs[int(what[i])]
        kind = "program" if src.endswith(".py") else "graph"
        extra = {"share": float(sizes[i])} if small[i] else {}
        out.append(JobSpec(id=f"j{i + 1}", tenant=names[int(who[i])], arrival=float(arrivals[i]),
                           priority=int(prio[i]), **{kind: src}, **extra))
    return out


def graphs_in(paths) -> list[str]:
    """The ``.json``/``.py`` files named, and those inside named folders, sorted."""
    out = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out += sorted(str(f) for f in p.iterdir() if f.suffix in (".json", ".py"))
        elif p.exists():
            out.append(str(p))
        else:
            raise StreamMapError(f"file not found: {p}")
    return out
