"""Many teams, one cluster: tenants and quotas, job admission with fair share, a policy simulator,
and a job service that keeps its queue in SQLite.

``tenants``    the tenants file (weights, quotas, tokens), validated with pydantic
``estimate``   a job's demand: gang width and estimated duration per device model, from the mapper
``admission``  the admission core shared by the simulator and the service (plain data in and out)
``simulate``   replays job arrivals through the admission core in simulated time; metrics, plots
``store``      the SQLite job store; ``service`` the HTTP job service; ``client`` its CLI commands
"""

from streammap.tenancy.client import Client
from streammap.tenancy.jobs import JobSpec, load_jobs, poisson_jobs, write_jobs
from streammap.tenancy.simulate import SimResult, compare, simulate
from streammap.tenancy.tenants import Tenants, load_tenants, tenants_from_dict

__all__ = ["Client", "JobSpec", "load_jobs", "poisson_jobs", "write_jobs", "SimResult", "compare", "simulate",
           "Tenants", "load_tenants", "tenants_from_dict"]
