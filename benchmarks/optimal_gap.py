"""How far ``auto``'s plans are from the proven optimum, before and after the exact step.

Random HEFT-paper DAGs of 10-50 tasks on the shared clusters at CCR 0.1, 1 and 10; per CCR and
overall, over the cases proven optimal: geomean and worst makespan / optimum for HEFT, ``auto``
without the exact model (before) and with it (after), and how many cases were proven. See
:mod:`streammap.bench.optimal_gap`.

Usage::

    python benchmarks/optimal_gap.py --quick            # 10-30 tasks, 27 cases
    python benchmarks/optimal_gap.py                    # 10-50 tasks, 45 cases
    python benchmarks/optimal_gap.py --seeds 0,1,2 --work 60

Targets (issue 17, ``auto`` after): geomean <= 1.01, worst <= 1.05.
"""

import sys

from streammap.bench.optimal_gap import main

if __name__ == "__main__":
    sys.exit(main())
