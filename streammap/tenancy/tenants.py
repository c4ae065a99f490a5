"""The tenants file: who may use the cluster, how much of it, and with what weight.

A tenants file is YAML::

    tenants:
      - name: vision
        weight: 2                        # fair-share weight under contention (default 1)
        token_sha256: 5e88...            # SHA-256 (hex) of the bearer token of the job service
        quota: {gpus: 16, gpu_memory: 1TiB, models: {A100-SXM4-80GB: 8}}
        limits: {memory: 64GiB, cpu_time: 4h, wall_time: 2h}   # per job; see below
      - name: nlp
        token: s3cret-nlp                # the token itself (plain text: prefer token_sha256)
    preemption: false                    # may a higher-priority job preempt lower-priority work?

Quotas are hard limits on what a tenant holds at any instant: ``gpus`` (devices granted),
``gpu_memory`` (the memory of the devices granted: a device is granted whole, so its whole memory
counts), and ``models`` (GPUs per device model). A missing quota is unbounded. Weights only matter
under contention: the admission core (:mod:`.admission`) gives each tenant a share of the cluster
in proportion to its weight (weighted dominant-resource fairness, Ghodsi et al. 2011).

Limits bound each job of a tenant (the job service enforces them, :mod:`.sandbox`): ``memory``
(private memory of each of the job's processes, ``RLIMIT_DATA``), ``cpu_time`` (CPU seconds of
each process, ``RLIMIT_CPU``) and ``wall_time`` (seconds from its start; the service stops it
past that). A tenant's limit replaces the service's default (``streammap serve --memory-limit``,
``--cpu-time-limit``, ``--wall-time-limit``) field by field; a limit given nowhere is none.

Tokens. A tenant's bearer token is given either as ``token`` (the token itself) or, better, as
``token_sha256`` (the hex SHA-256 of the token), so the file holds no secret:
``python -m streammap.tenancy.tenants`` prints a fresh random token with its ``token_sha256`` line.
The service hashes the presented token and compares it with every tenant's digest in constant
time (:func:`hmac.compare_digest`, no early exit), so neither a token nor its prefix leaks
through timing. Tokens are random strings (at least 8 characters; the helper makes 43): a fast
hash is enough for a high-entropy secret, where a password would need a slow one.

Errors name the file, the line and the field, like cluster files do.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sys
from pathlib import Path
from typing import Optional

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from streammap.cluster.model import Size, Time
from streammap.errors import StreamMapError, shown
from streammap.io.yamlfile import load_yaml, validation_error

_NAME = r"^[A-Za-z0-9_.\-]+$"


class TenantsError(StreamMapError):
    """A tenants file is not valid."""


class Quota(BaseModel):
    """Hard limits on what one tenant holds at once; ``None`` is unbounded."""

    model_config = ConfigDict(extra="forbid")
    gpus: Optional[int] = Field(default=None, ge=0)
    gpu_memory: Optional[Size] = Field(default=None, ge=0)
    models: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self):
        for model, n in self.models.items():
            if n < 0:
                raise ValueError(f"quota for model '{model}' must be >= 0, got {shown(n)}")
        return self


class Limits(BaseModel):
    """Per-job limits; ``None`` is no limit (or, in a tenant, the service's default)."""

    model_config = ConfigDict(extra="forbid")
    memory: Optional[Size] = Field(default=None, gt=0)
    cpu_time: Optional[Time] = Field(default=None, gt=0)
    wall_time: Optional[Time] = Field(default=None, gt=0)

    def over(self, defaults: "Limits") -> "Limits":
        """These limits, with ``defaults`` where these give none."""
        return Limits(**{k: v if v is not None else getattr(defaults, k) for k, v in self})

    def as_dict(self) -> dict:
        return {"memory": self.memory, "cpu_time": self.cpu_time, "wall_time": self.wall_time}


def limits_from(data) -> Limits:
    """Validate limits given as :class:`Limits`, a dict (``{memory: 8GiB, wall_time: 2h}``) or ``None``."""
    if isinstance(data, Limits):
        return data
    try:
        return Limits.model_validate(data or {})
    except pydantic.ValidationError as exc:
        raise validation_error(exc, "<limits>", {}, TenantsError, "limits") from None


#: Bounds of a tenant's weight (and of a generated stream's arrival shares): weights are ratios,
#: and beyond a billion either way they broke the fair-share arithmetic (two tenants of weight
#: 1e308 summed past the float range, their shares were 0 and Jain's index NaN; 1e-320 underflowed),
#: where equal weights of any size mean equal tenants.
MIN_WEIGHT, MAX_WEIGHT = 1e-9, 1e9


class Tenant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=_NAME)
    weight: float = Field(default=1.0, ge=MIN_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False)
    token: Optional[str] = Field(default=None, min_length=8)
    token_sha256: Optional[str] = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    quota: Quota = Field(default_factory=Quota)
    limits: Limits = Field(default_factory=Limits)

    @model_validator(mode="after")
    def _one_token(self):
        if self.token is not None and self.token_sha256 is not None:
            raise ValueError(f"tenant '{self.name}' has both token and token_sha256: give one")
        return self

    def token_digest(self) -> bytes | None:
        """The SHA-256 of this tenant's token (from either field), or ``None`` without one."""
        if self.token_sha256 is not None:
            return bytes.fromhex(self.token_sha256)
        if self.token is not None:
            return token_digest(self.token)
        return None


class TenantsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenants: list[Tenant] = Field(min_length=1)
    preemption: bool = False

    @model_validator(mode="after")
    def _check(self):
        names, tokens = set(), set()
        for t in self.tenants:
            if t.name in names:
                raise ValueError(f"tenant name '{t.name}' appears twice")
            names.add(t.name)
            digest = t.token_digest()
            if digest is not None:
                if digest in tokens:
                    raise ValueError(f"tenant '{t.name}' has the same token as another tenant")
                tokens.add(digest)
        return self


class Tenants:
    """A validated tenants file: look-ups by name and by token."""

    def __init__(self, spec: TenantsSpec, path: str | None = None):
        self.spec = spec
        self.path = path
        self.by_name = {t.name: t for t in spec.tenants}
        self.preemption = spec.preemption
        self._digests = [(t, t.token_digest()) for t in spec.tenants]

    def __iter__(self):
        return iter(self.spec.tenants)

    def __len__(self):
        return len(self.spec.tenants)

    def names(self) -> list[str]:
        return [t.name for t in self.spec.tenants]

    def weight(self, name: str) -> float:
        return self.by_name[name].weight

    def quota(self, name: str) -> Quota:
        return self.by_name[name].quota

    def limits(self, name: str, defaults: Limits | None = None) -> Limits:
        """The limits of each job of tenant ``name``: its own, else ``defaults``."""
        return self.by_name[name].limits.over(defaults or Limits())

    def authenticate(self, token: str | None) -> Tenant | None:
        """The tenant whose token this is, or ``None``; compares in constant time.

        Every tenant's digest is compared (no early exit), each comparison with
        :func:`hmac.compare_digest`, so the time taken says nothing about which tenant matched.
        """
        if not token:
            return None
        presented = token_digest(token)
        found = None
        for t, digest in self._digests:
            if digest is not None and hmac.compare_digest(digest, presented):
                found = t
        return found

    def plain_tokens(self) -> list[str]:
        """Names of the tenants whose token the file holds in plain text (``token:``)."""
        return [t.name for t in self.spec.tenants if t.token is not None]


def token_digest(token: str) -> bytes:
    """The SHA-256 of a bearer token (what ``token_sha256`` holds, as hex)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def new_token() -> tuple[str, str]:
    """A fresh random bearer token and its ``token_sha256`` (hex)."""
    token = secrets.token_urlsafe(32)
    return token, token_digest(token).hex()


def load_tenants(path) -> Tenants:
    """Read and validate a tenants file.

    Raises
    ------
    TenantsError
        With the file, line and field of the first problem.
    """
    path = Path(path)
    data, lines = load_yaml(path, TenantsError)
    if not isinstance(data, dict):
        raise TenantsError("a tenants file must be a mapping with a 'tenants' list", path=path, line=1,
                           hint="tenants: [{name: team-a, weight: 1, token: ..., quota: {gpus: 8}}]")
    try:
        spec = TenantsSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, path, lines, TenantsError, "tenants file") from None
    return Tenants(spec, path=str(path))


def tenants_from_dict(data) -> Tenants:
    """Validate tenants given as a dict (Python API) or as a list of tenant names (equal weights)."""
    if isinstance(data, Tenants):
        return data
    if isinstance(data, (list, tuple)) and all(isinstance(x, str) for x in data):
        data = {"tenants": [{"name": n} for n in data]}
    try:
        spec = TenantsSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        raise validation_error(exc, "<tenants>", {}, TenantsError, "tenants") from None
    return Tenants(spec)


def main(argv=None) -> int:
    """``python -m streammap.tenancy.tenants [TOKEN]``: a ``token_sha256`` line for the tenants file.

    Without ``TOKEN`` a fresh random token is made and printed too (give it to the tenant; keep
    only its digest in the file).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print(f"token_sha256: {token_digest(argv[0]).hex()}")
    else:
        token, digest = new_token()
        print(f"token: {token}        # give this to the tenant (STREAMMAP_TOKEN)")
        print(f"token_sha256: {digest}     # put this in the tenants file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
