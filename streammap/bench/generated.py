"""A generalisation suite nobody tuned on: synthetic WfCommons instances, drawn from seeds.

The shared benchmark set holds one trace per application; a mapper tuned on those ten graphs may
have learned them rather than their applications. WfCommons [1]_ (the ``wfcommons`` package, the
``bench`` extra) builds synthetic instances of each application at any size from a *recipe* (the
application's microstructures and task-type statistics, taken from real traces). This module draws
a seeded suite from those recipes and turns it into :class:`~streammap.bench.cases.Case` objects
on the shared clusters, exactly as :func:`~streammap.bench.cases.shared_cases` does for the traces.

What the suite holds
--------------------
* **Recipes**: one per application of the shared set (:data:`RECIPES`). ``rnaseq`` is left out:
  its recipe generates no edges and no files, so there is no CCR to scale; ``cycles`` has no trace
  in the shared set (:data:`EXCLUDED`).
* **Sizes**: for each seed and recipe, one instance in each band of :data:`SIZE_BANDS`
  (50-200, 200-700, 700-2,000 tasks), log-uniform inside the band. A band starts no lower than the
  recipe's smallest base graph (:func:`recipe_min_tasks`; BWA's is 106 tasks): WfCommons cannot
  shrink a base graph. WfCommons treats the size as an upper bound, so an instance may have a few
  tasks fewer than drawn; the case records the drawn size in its name and the real one when run.
* **Cases**: every instance on ``hetero-2x4``, ``mixed-vendors`` and ``small-memory`` at CCR 0.1,
  1 and 10 (:func:`~streammap.bench.cases.scale_cluster_for_ccr`).
* **Seeds**: two disjoint fixed lists, :data:`SEED_SETS`: ``tune`` (look at these while changing a
  mapper) and ``report`` (the figures quoted, never looked at while tuning). A quick suite takes
  the first seed of the set and the two smaller bands.

Determinism
-----------
WfCommons draws from Python's :mod:`random`, NumPy's global generator (task runtimes and file
sizes through SciPy) and :func:`uuid.uuid4` (node and file names). :func:`generate_instance` seeds
the first two and replaces ``uuid4`` with a seeded source for the duration of one instance, and
drops the fields that name the moment or the user (``createdAt``, ``executedAt``, ``author``):
the same recipe, size and seed give the same bytes. Instances are written once into a cache
folder (default ``bench-out/generated/wfcommons-<version>/``) and read back with
:func:`streammap.io.importers.load_graph`, the importer users run on real traces. Generation
changes the global :mod:`random` and NumPy states; the benchmark does not depend on them.

References
----------
.. [1] T. Coleman, H. Casanova, L. Pottier, M. Kaushik, E. Deelman, R. Ferreira da Silva,
   "WfCommons: A framework for enabling scientific workflow research and development",
   Future Generation Computer Systems 128, 16-27, 2022.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import uuid
import warnings
import zlib
from pathlib import Path
from typing import Sequence

import networkx as nx
import numpy as np

from streammap.bench.cases import CCRS, WORKFLOW_CLUSTERS, Case, scale_cluster_for_ccr
from streammap.cluster.model import Cluster, load_cluster
from streammap.errors import StreamMapError
from streammap.io.files import atomic_write_text
from streammap.io.importers import load_graph

__all__ = ["RECIPES", "EXCLUDED", "SEED_SETS", "SIZE_BANDS", "INSTALL_HINT", "require_wfcommons", "recipe_min_tasks",
           "draw_sizes", "instance_seed", "generate_instance", "generated_cases", "DEFAULT_CACHE", "GROUP"]

#: Application of the shared set -> its WfCommons recipe class (``wfcommons.wfchef.recipes``).
RECIPES = {
    "1000genome": "GenomeRecipe",
    "blast": "BlastRecipe",
    "bwa": "BwaRecipe",
    "epigenomics": "EpigenomicsRecipe",
    "montage": "MontageRecipe",
    "seismology": "SeismologyRecipe",
    "soykb": "SoykbRecipe",
    "srasearch": "SrasearchRecipe",
}
#: Recipes WfCommons has that the suite leaves out, and why.
EXCLUDED = {
    "rnaseq": "its recipe generates no edges and no files: nothing to transfer, no CCR to scale",
    "cycles": "no trace of it in the shared benchmark set",
}
#: The two disjoint seed lists: tune on the first, report on the second.
SEED_SETS = {"tune": (11, 12, 13), "report": (101, 102, 103)}
#: Task-count bands; each seed draws one instance per recipe and band.
SIZE_BANDS = ((50, 200), (200, 700), (700, 2000))
#: Bands of a quick suite.
QUICK_BANDS = SIZE_BANDS[:2]
#: The cache folder, relative to the working directory.
DEFAULT_CACHE = Path("bench-out") / "generated"
#: Group prefix of the cases (``generated-report``, ``generated-tune``).
GROUP = "generated"
INSTALL_HINT = "pip install 'streammap[bench]'"


def require_wfcommons():
    """The ``wfcommons`` package, or a :class:`~streammap.errors.StreamMapError` naming the extra."""
    try:
        import wfcommons  # noqa: PLC0415 (optional, heavy: pandas, scipy, matplotlib)
        import wfcommons.wfchef.recipes  # noqa: PLC0415, F401
    except ImportError as exc:
        raise StreamMapError(f"the generated suite needs the wfcommons package ({exc})",
                             hint=f"install it with: {INSTALL_HINT}") from None
    return wfcommons


def _recipe_class(app: str):
    if app not in RECIPES:
        why = EXCLUDED.get(app)
        raise StreamMapError(f"no generated suite for {app!r}" + (f": {why}" if why else ""),
                             hint="recipes: " + ", ".join(RECIPES))
    recipes = require_wfcommons().wfchef.recipes
    return getattr(recipes, RECIPES[app])


def recipe_min_tasks(app: str) -> int:
    """The fewest tasks WfCommons can generate for ``app``: its smallest base graph's order."""
    cls = _recipe_class(app)
    import inspect  # noqa: PLC0415
    summary = Path(inspect.getfile(cls)).parent / "microstructures" / "summary.json"
    graphs = json.loads(summary.read_text())["base_graphs"]
    return int(min(g["order"] for g in graphs.values()))


def _stable(app: str) -> int:
    """A number for ``app`` that is the same in every process (``hash`` of a str is not)."""
    return zlib.crc32(app.encode())


def draw_sizes(app: str, seed: int, bands: Sequence[tuple[int, int]] = SIZE_BANDS,
               min_tasks: int | None = None) -> list[int]:
    """One task count per band, log-uniform in ``[max(lo, min_tasks), hi]``, from ``(seed, app)``.

    ``min_tasks`` defaults to :func:`recipe_min_tasks`; a band wholly below it is skipped.
    """
    floor = recipe_min_tasks(app) if min_tasks is None else min_tasks
    out = []
    for k, (lo, hi) in enumerate(bands):
        lo = max(lo, floor)
        if lo > hi:
            continue
        rng = np.random.default_rng([seed, _stable(app), k, 1])
        out.append(int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))))))
    return out


def instance_seed(app: str, n: int, seed: int) -> int:
    """The seed WfCommons generates instance ``(app, n, seed)`` with (32 bits)."""
    return int(np.random.SeedSequence([seed, _stable(app), n]).generate_state(1)[0])


@contextlib.contextmanager
def _seeded(seed: int):
    """Seed :mod:`random` and NumPy's global generator, and make ``uuid4`` draw from ``seed``."""
    import wfcommons.wfchef.duplicate as dup  # noqa: PLC0415
    ids = random.Random(seed ^ 0x5EED)

    def uuid4():
        return uuid.UUID(int=ids.getrandbits(128), version=4)

    random.seed(seed)
    np.random.seed(seed)
    saved = (uuid.uuid4, dup.uuid4)
    uuid.uuid4, dup.uuid4 = uuid4, uuid4       # wfgen calls uuid.uuid4(); wfchef imported the name
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")    # pandas/scipy chatter about the recipes' tables
            yield
    finally:
        uuid.uuid4, dup.uuid4 = saved


def instance_name(app: str, n: int, seed: int) -> str:
    """``<app>-n<n>-s<seed>``: the instance's file stem and graph label."""
    return f"{app}-n{n}-s{seed}"


def generate_instance(app: str, n: int, seed: int, path) -> Path:
    """Write the WfCommons instance ``(app, n, seed)`` as instance JSON at ``path``.

    Deterministic (see the module docstring): generating twice gives the same bytes. Written
    atomically. Raises :class:`~streammap.errors.StreamMapError` when ``n`` is below the recipe's
    minimum or WfCommons refuses the size.
    """
    cls = _recipe_class(app)
    floor = recipe_min_tasks(app)
    if n < floor:
        raise StreamMapError(f"{app}: WfCommons cannot generate {n} tasks (its smallest base graph has {floor})",
                             hint=f"ask for {floor} tasks or more")
    from wfcommons import WorkflowGenerator  # noqa: PLC0415
    name = instance_name(app, n, seed)
    with _seeded(instance_seed(app, n, seed)):
        try:
            wf = WorkflowGenerator(cls.from_num_tasks(n)).build_workflow(workflow_name=name)
        except ValueError as exc:
            raise StreamMapError(f"{app}: WfCommons cannot generate {n} tasks: {exc}",
                                 hint="choose another size") from None
        wf.generate_json()
    data = wf.workflow_json
    # What names the moment or the user changes from run to run: not part of the instance.
    data.pop("createdAt", None)
    data.pop("author", None)
    data.get("workflow", {}).get("execution", {}).pop("executedAt", None)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n", what="workflow instance")
    return path


def _cache_dir(cache) -> Path:
    version = require_wfcommons().__version__
    return Path(cache if cache is not None else DEFAULT_CACHE) / f"wfcommons-{version}"


def generated_cases(root, seeds: str | Sequence[int] = "report", quick: bool = False, cache=None,
                    apps: Sequence[str] | None = None, bands: Sequence[tuple[int, int]] | None = None,
                    clusters: Sequence[str] = WORKFLOW_CLUSTERS, ccrs: Sequence[float] = CCRS) -> list[Case]:
    """The seeded WfCommons suite as benchmark cases (see the module docstring).

    Parameters
    ----------
    root : str or Path
        The ``shared/benchmarks`` folder (its ``clusters/``).
    seeds : {"tune", "report"} or sequence of int
        A seed set of :data:`SEED_SETS` (default ``"report"``), or explicit seeds.
    quick : bool
        The first seed of the set and the bands up to 700 tasks only.
    cache : str or Path, optional
        Where instances are written (default ``bench-out/generated``).
    apps, bands, clusters, ccrs : optional
        Narrow the suite (default: every recipe of :data:`RECIPES`, :data:`SIZE_BANDS`, the shared
        workflow clusters, CCR 0.1, 1 and 10).

    Returns
    -------
    list of Case
        Group ``generated-<set>`` (``generated`` for explicit seeds); per CCR, instance and
        cluster. Instances are generated when a case first loads and are shared by its cases.
    """
    if isinstance(seeds, str):
        if seeds not in SEED_SETS:
            raise StreamMapError(f"unknown seed set {seeds!r}", hint="--seeds tune or --seeds report")
        group, seed_list = f"{GROUP}-{seeds}", list(SEED_SETS[seeds])
    else:
        group, seed_list = GROUP, [int(s) for s in seeds]
    if quick:
        seed_list = seed_list[:1]
    bands = (QUICK_BANDS if quick else SIZE_BANDS) if bands is None else bands
    apps = list(RECIPES) if apps is None else list(apps)
    folder = _cache_dir(cache)
    root = Path(root)
    graphs: dict[str, nx.DiGraph] = {}
    loaded: dict[str, Cluster] = {}

    def graph(app: str, n: int, seed: int) -> nx.DiGraph:
        name = instance_name(app, n, seed)
        if name not in graphs:
            path = folder / f"{name}.json"
            if not path.exists():
                generate_instance(app, n, seed, path)
            graphs[name] = load_graph(path)
        return graphs[name]

    def cluster(name: str) -> Cluster:
        if name not in loaded:
            loaded[name] = load_cluster(root / "clusters" / f"{name}.yaml")
        return loaded[name]

    def loader(app, n, seed, cname, target):
        def load():
            g = graph(app, n, seed)
            return g, scale_cluster_for_ccr(g, cluster(cname), target)
        return load

    instances = [(app, n, seed) for seed in seed_list for app in apps
                 for n in draw_sizes(app, seed, bands, recipe_min_tasks(app))]
    out = []
    for c in ccrs:
        for app, n, seed in instances:
            for cname in clusters:
                label = instance_name(app, n, seed)
                out.append(Case(f"{label}/{cname}/ccr{c:g}", group, label, cname, float(c),
                                loader(app, n, seed, cname, c), params=dict(app=app, n=n, seed=seed)))
    return out
