"""Many teams, one cluster: tenants and quotas, job admission with fair share, a policy simulator,
and a job service that keeps its queue in SQLite.

``tenants``    the tenants file (weights, quotas, tokens), validated with pydantic
``estimate``   a job's demand: gang width and estimated duration per device model, from the mapper
``admission``  the admission core shared by the simulator and the service (plain data in and out)
``simulate``   replays job arrivals through the admission core in simulated time; metrics, plots
``store``      the SQLite job store; ``service`` the HTTP job service; ``client`` its CLI commands
"""
