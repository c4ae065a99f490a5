"""The mapping benchmark: auto, HEFT, PEFT and the trivial baseline side by side.

Every workflow and Cholesky graph of ``../shared/benchmarks`` on its clusters at CCR 0.1, 1 and 10,
the HEFT paper's example, and a seeded random-DAG suite built like the HEFT paper's; per case and in
aggregate (geometric mean and worst): makespan / lower bound, makespan / HEFT, memory-valid share
and mapping time. Writes ``bench-out/mapping.csv``, ``mapping-summary.csv`` and ``mapping.png``.
The same as ``streammap bench mapping`` (see :mod:`streammap.bench.mapping`).

Usage::

    python benchmarks/mapping.py --quick                 # about a minute
    python benchmarks/mapping.py                         # full random suite (up to 5,000 tasks)
    python benchmarks/mapping.py --scale                 # also 10k x 64 and 100k x 512 mapping times
    python benchmarks/mapping.py --mappers heft,peft,least-loaded --out /tmp/bench
    python benchmarks/mapping.py --generated --quick     # seeded WfCommons suite (pip install 'streammap[bench]')
    python benchmarks/mapping.py --generated --seeds tune

Targets (issue 3, for ``auto``): geomean makespan / HEFT <= 0.85 and no case above 1.0; at CCR 0.1
geomean makespan / lower bound <= 1.10; memory-valid wherever a valid plan exists; 10,000 tasks x 64
devices mapped in <= 5 s and 100,000 x 512 in <= 60 s. Generated suite (issue 17), report seeds:
geomean makespan / HEFT <= 0.62 at CCR 1 and 10, and no case above a memory-valid HEFT plan.
"""

import sys

from streammap.bench.mapping import main

if __name__ == "__main__":
    sys.exit(main())
