"""``streammap simulate``: replay job arrivals through the admission policies and score them."""

from __future__ import annotations

import argparse
from pathlib import Path

from streammap.cli.common import console, int_between, number_between
from streammap.errors import StreamMapError
from streammap.io.files import make_parent
from streammap.tenancy.admission import (
    FLOOR,
    ORDER,
    ORDERS,
    POLICIES,
    SLACK,
    SLOWDOWN,
    TAIL_EXCHANGE,
    TAIL_EXCHANGES,
    WAIT_CAP,
)
from streammap.tenancy.jobs import graphs_in, load_jobs, parse_tenant_shares, poisson_jobs, write_jobs
from streammap.tenancy.simulate import DEFAULT_GRAPHS, compare, plot, results_table, write_csv, write_jobs_csv

#: Bounds of the generator's flags: a stream is built in memory (a trillion jobs asked for 7 TiB), and
#: its arrivals must be finite (an infinite rate put every job at 0, a NaN one failed in pydantic).
MAX_GENERATED_JOBS = 1_000_000
MIN_RATE, MAX_RATE = 1e-6, 1e6
MAX_PRIORITIES = 1000
MAX_SIGMA = 10.0

rate = number_between(MIN_RATE, MAX_RATE, "a rate of arrivals per second")
jobs_count = int_between(1, MAX_GENERATED_JOBS, "a number of jobs")   # an empty jobs file is refused as input
priorities = int_between(1, MAX_PRIORITIES, "a number of priorities")
fraction = number_between(0.0, 1.0, "a fraction")
seed = int_between(0, 2 ** 63 - 1, "a seed")
sigma = number_between(0.0, MAX_SIGMA, "a spread (SIGMA)")


def wait_multiple(text: str) -> float:
    """An argparse type for ``--wait-cap``: a number (the range, and its hint, are checked in
    :func:`run`: at least 0; inf bounds nothing, as 0 does)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text} is not a number: 8 bounds every deadline by 8x the mean wait "
                                         "of recent starts; 0 turns the bound off") from None


def configure(parser, command: str) -> None:
    parser.add_argument("--jobs", required=True, metavar="FILE",
                   help="jobs file (YAML/JSON list of {graph|program, tenant, arrival, defines, priority, gpus}); "
                        "with --generate, the file to write")
    parser.add_argument("--cluster", help="cluster.yaml (required unless --generate only writes jobs)")
    parser.add_argument("--tenants", metavar="FILE_OR_NAMES",
                   help="tenants file (weights, quotas); with --generate, NAME[:SHARE],... of the arrivals "
                        "(default a,b)")
    parser.add_argument("--policy", default=",".join(POLICIES),
                   help=f"comma-separated policies to compare (default {','.join(POLICIES)})")
    parser.add_argument("--generate", choices=["poisson"], help="write a seeded job stream to --jobs first")
    parser.add_argument("--rate", type=rate, default=0.1,
                        help=f"with --generate: arrivals per second (default 0.1; {MIN_RATE:g} to {MAX_RATE:g})")
    parser.add_argument("--jobs-count", type=jobs_count, default=100,
                        help=f"with --generate: number of jobs (default 100; 1 to {MAX_GENERATED_JOBS})")
    parser.add_argument("--graphs", nargs="+", default=None,
                   help=f"with --generate: graphs or folders to draw from (default {DEFAULT_GRAPHS})")
    parser.add_argument("--priorities", type=priorities, default=1,
                        help=f"with --generate: priorities 0..P-1 drawn uniformly (P at most {MAX_PRIORITIES})")
    parser.add_argument("--shared", type=fraction, default=0.0,
                        help="with --generate: share of the jobs that need a quarter or half GPU (joint placement)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the generator and of estimate errors (>= 0)")
    parser.add_argument("--estimate-error", type=sigma, default=0.0, metavar="SIGMA",
                   help=f"real durations are estimates x lognormal(SIGMA) (default 0: exact estimates; at most "
                        f"{MAX_SIGMA:g})")
    parser.add_argument("--mapper", default="heft", help="mapper that estimates job durations (default heft)")
    parser.add_argument("--slack", type=float, default=SLACK,
                   help=f"streammap policy: start a job now on a slower model with room if it ends there within "
                        f"SLACK x its time to finish on a faster busy one (default {SLACK:g}; 1 always waits)")
    parser.add_argument("--slowdown", type=float, default=SLOWDOWN,
                   help=f"streammap policy: a tenant's jobs go in order of arrival + SLOWDOWN x estimated duration "
                        f"(default {SLOWDOWN:g}; 0 is arrival order, inf shortest first)")
    parser.add_argument("--wait-cap", type=wait_multiple, default=WAIT_CAP,
                   help=f"streammap policy: outside overload no job's deadline is later than its arrival + WAIT_CAP x "
                        f"the mean wait of recent starts, whatever its estimate (default {WAIT_CAP:g}; 0 or inf turns it off)")
    parser.add_argument("--tail-exchange", choices=TAIL_EXCHANGES, default=TAIL_EXCHANGE,
                   help="streammap policy: a start given to a job of the longest kind goes to the oldest job of its "
                        "tenant and shape that can still end within the tail; auto: for tenants whose estimates "
                        "proved precise (default %(default)s, README)")
    parser.add_argument("--floor", type=float, default=FLOOR,
                   help=f"streammap policy: tenants holding less than FLOOR x their fair share of the GPUs go first; "
                        f"the others' jobs share one slowdown-deadline order (default {FLOOR:g}; 1 is strict fair "
                        f"share first, 0 one order for all)")
    parser.add_argument("--order", default=ORDER,
                   help=f"streammap policy: the order, {', '.join(ORDERS)} (default {ORDER}; themis "
                        f"keeps the longest jobs' tail deadline under overload while they can still end within a bound "
                        f"of their run on their tenant's share; hrrn and hrrn-themis take the jobs by the share of "
                        f"their allowed wait already spent, largest first)")
    parser.add_argument("--out", default="simulate-out", help="folder for simulate.csv, simulate-jobs.csv, simulate.png")
    parser.set_defaults(func=run)


def run(args) -> int:
    out = console()
    tenants_arg = args.tenants
    if args.generate:
        shares = parse_tenant_shares(tenants_arg or "a,b")
        graphs = graphs_in(args.graphs or [Path(__file__).resolve().parents[2] / DEFAULT_GRAPHS])
        specs = poisson_jobs(graphs, args.rate, args.jobs_count, shares, seed=args.seed, priorities=args.priorities,
                             shared=args.shared)
        write_jobs(specs, args.jobs)
        out.print(f"wrote {args.jobs}: {len(specs)} jobs over {len(shares)} tenants, "
                  f"{args.rate:g} arrivals/s, seed {args.seed}", markup=False)
        tenants_arg = None
        if not args.cluster:
            return 0
    if not args.cluster:
        raise StreamMapError("--cluster is required to simulate", hint="streammap simulate --jobs J --cluster C")
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for p in policies:
        if p not in POLICIES:
            raise StreamMapError(f"unknown policy {p!r}", hint=f"policies: {', '.join(POLICIES)}")
    if not args.slack >= 1:
        raise StreamMapError(f"--slack must be at least 1, not {args.slack:g}",
                             hint="1 always waits for the earliest finish; 2 starts on a half-speed model with room")
    if not args.slowdown >= 0:
        raise StreamMapError(f"--slowdown must be at least 0, not {args.slowdown:g}",
                             hint="0 orders a tenant's jobs by arrival; inf puts the shortest first")
    if not args.wait_cap >= 0:
        raise StreamMapError(f"--wait-cap must be at least 0, not {args.wait_cap:g}",
                             hint="8 bounds every deadline by 8x the mean wait of recent starts; 0 turns the bound off")
    if not 0 <= args.floor <= 1:
        raise StreamMapError(f"--floor must be between 0 and 1, not {args.floor:g}",
                             hint="1: a tenant below its fair share always goes first; 0: one order for every tenant")
    if args.order not in ORDERS:
        raise StreamMapError(f"unknown --order {args.order!r}", hint=f"orders: {', '.join(ORDERS)}")
    folder = output_folder(args.out)
    specs = load_jobs(args.jobs)
    results = compare(specs, args.cluster, tenants=tenants_arg, policies=policies, mapper=args.mapper,
                      estimate_error=args.estimate_error, seed=args.seed, slack=args.slack,
                      slowdown=args.slowdown, floor=args.floor, order=args.order, wait_cap=args.wait_cap,
                      tail_exchange=args.tail_exchange)
    out.print(results_table(results))
    make_parent(folder / "simulate.csv", what="simulation results")      # made only once there are results
    write_csv(results, folder / "simulate.csv")
    write_jobs_csv(results, folder / "simulate-jobs.csv")
    plot(results, folder / "simulate.png")
    out.print(f"wrote {folder / 'simulate.csv'}, {folder / 'simulate-jobs.csv'}, {folder / 'simulate.png'}",
              markup=False)
    return 0


def output_folder(path) -> Path:
    """``--out`` once it can be a folder, checked before the simulation runs: a file or a device
    in the way used to end the run with a traceback after all its work. It is made (if missing)
    only when there are results to write."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise StreamMapError(f"--out {folder} exists and is not a folder", path=folder,
                             hint="give a folder for simulate.csv, simulate-jobs.csv and simulate.png")
    return folder
