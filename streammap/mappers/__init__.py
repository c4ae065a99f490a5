"""Mappers: functions from a :class:`~streammap.cost.model.CostModel` to a :class:`~streammap.mappers.schedule.Schedule`.

Every mapper has the signature ``mapper(cost) -> Schedule`` and is registered in :data:`MAPPERS`
under the name the CLI's ``--mapper`` option and ``streammap.compile(mapper=...)`` use.

Placement policies (:mod:`streammap.mappers.policies`: ``least-loaded``, ``spread``, ``binpack``,
``binpack-node``, ``spread-node``, ``fastest``) are registered here too, and :func:`get_mapper`
also accepts a custom policy by class path (``package.module:ClassName``) or by the name of an
entry point in the ``streammap.policies`` group.
"""

from __future__ import annotations

from streammap.errors import StreamMapError
from streammap.mappers.auto import auto
from streammap.mappers.heft import heft, heft_plain
from streammap.mappers.optimal import optimal
from streammap.mappers.peft import peft
from streammap.mappers.policies import find_policy

#: Known mappers by name.
MAPPERS = {"heft": heft, "heft-plain": heft_plain, "peft": peft, "auto": auto, "optimal": optimal}


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
        pass
    custom = find_policy(name)
    if custom is not None:
        return custom
    raise StreamMapError(f"unknown mapper {name!r}",
                         hint=f"known mappers: {', '.join(sorted(MAPPERS))}; or a placement policy class "
                              "'package.module:ClassName', or an entry point in the 'streammap.policies' group")

# Placement policies (streammap.mappers.policies).
from streammap.mappers.policies import POLICY_MAPPERS  # noqa: E402

MAPPERS.update(POLICY_MAPPERS)
