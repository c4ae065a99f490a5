"""Mappers: functions from a :class:`~streammap.cost.CostModel` to a :class:`~streammap.schedule.Schedule`.

Every mapper has the signature ``mapper(cost) -> Schedule`` and is registered in :data:`MAPPERS`
under the name the CLI's ``--mapper`` option and ``streammap.compile(mapper=...)`` use.
"""

from __future__ import annotations

from ..errors import StreamMapError
from .heft import heft

#: Known mappers by name.
MAPPERS = {"heft": heft}


def get_mapper(name: str):
    """The mapper registered as ``name``.

    Raises
    ------
    StreamMapError
        If no mapper has that name; the message lists the known ones.
    """
    try:
        return MAPPERS[name]
    except KeyError:
        raise StreamMapError(f"unknown mapper {name!r}",
                             hint=f"known mappers: {', '.join(sorted(MAPPERS))}") from None
