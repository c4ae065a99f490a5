"""One admitted job, run by the job service in its own process: ``python -m streammap.tenancy.worker DIR``.

``DIR/job.json`` says what to run: the program (a file in ``DIR``), its params and entry, the
sub-cluster of the devices the job was granted (a cluster-file dict), the mapper, and how to run
(``emulate``, ``backend``, ``address``), and for a job granted a fraction of its GPU, ``share``
(joint placement: the worker holds the job to it, :func:`hold_to_share`). The worker compiles the program against that
sub-cluster, so the plan is re-mapped onto exactly the granted devices (the program's local
modules, kept beside it in ``DIR``, are recorded in the plan and imported from ``DIR``), writes ``plan.yaml``,
runs it with :func:`streammap.runtime.run_plan` (the local executor, or Ray), and leaves
``exit.json`` (``{"status": "done"}`` or ``{"status": "failed", "error": ...}``) as its last act.
Its own process (and session) means a cancelled or preempted job is a signal away, and a job
outlives a service that is killed: the restarted service finds the worker again by its pid.

The service does not start it itself: the sandbox launcher (:mod:`.sandbox`) starts it inside the
job's namespaces, under the job's limits, with ``DIR`` as working directory and the only folder
it may write (besides a private ``/tmp``). A worker that dies before its exit note (a signal, a
limit, ``os._exit``) is failed by the service from the launcher's exit status.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from streammap.compiler import compile as compile_plan
from streammap.errors import KernelError, StreamMapError
from streammap.io.files import atomic_write_text
from streammap.plan import write_plan
from streammap.runtime import run_plan
from streammap.runtime.shared import DEVICE_SHARE_ENV


def run_job(folder) -> int:
    folder = Path(folder)
    job = json.loads((folder / "job.json").read_text())
    if job.get("share") is not None:
        hold_to_share(float(job["share"]))
    try:
        plan = compile_plan(folder / job["source"], job["cluster"], params=job.get("params") or {},
                            mapper=job.get("mapper", "auto"), entry=job.get("entry"), history=False)
        write_plan(plan, folder / "plan.yaml")
        print(f"compiled onto {', '.join(d.id for d in plan.devices)}: {len(plan.tasks)} tasks, "
              f"estimated makespan {plan.mapper.estimated_makespan:.4g} s", flush=True)
        outputs = run_plan(plan, emulate=job.get("emulate", False), outputs_path=folder / "result.npz",
                           record_path=folder / "result.run.json", plan_path=folder / "plan.yaml", progress=False,
                           backend=job.get("backend", "local"), address=job.get("address"))
        print(f"done: {', '.join(outputs)}", flush=True)
        status = {"status": "done"}
    except (StreamMapError, KernelError) as exc:
        print(exc.format(), file=sys.stderr, flush=True)
        status = {"status": "failed", "error": exc.format()}
    except Exception as exc:  # noqa: BLE001 - the service must learn of any failure
        traceback.print_exc()
        status = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    atomic_write_text(folder / "exit.json", json.dumps(status), what="exit note")
    return 0 if status["status"] == "done" else 1


def hold_to_share(share: float) -> None:
    """A job granted a fraction of its GPU (joint placement) is held to it: the runtime admits its
    tasks within the fraction (``STREAMMAP_DEVICE_SHARE``), and where CUDA MPS runs, MPS caps its
    kernels at that share of the GPU's SMs (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``). Set before
    anything touches CUDA."""
    os.environ[DEVICE_SHARE_ENV] = f"{share:g}"
    os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(100 * share)))


if __name__ == "__main__":
    sys.exit(run_job(sys.argv[1]))
