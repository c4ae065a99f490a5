"""Benchmarks that score StreamMAP's mappers side by side.

:mod:`streammap.bench.cases` builds the cases (the shared benchmark graphs and clusters at the
CCRs of ``shared/benchmarks/README.md``, and a seeded random-DAG suite in the style of the HEFT
paper); :mod:`streammap.bench.mapping` runs every mapper on them and reports makespan / lower
bound, makespan / HEFT, the share of memory-valid plans and mapping time, as a table, a CSV and a
plot (``streammap bench mapping``, or ``python benchmarks/mapping.py``).
"""

from streammap.bench.cases import (
           Case,
           ccr,
           random_cases,
           random_cluster,
           random_dag,
           scale_cluster_for_ccr,
           shared_cases,
)
from streammap.bench.mapping import run_benchmark, summarize

__all__ = ["Case", "ccr", "scale_cluster_for_ccr", "shared_cases", "random_dag", "random_cluster", "random_cases",
           "run_benchmark", "summarize"]
