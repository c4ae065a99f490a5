"""``streammap doctor``: is this machine (and cluster) ready to run plans?

Each check is a small function that returns one :class:`Check` (name, status, detail, fix) and
never raises: a missing library, driver or cluster is a finding, not a crash. Statuses:
``pass``; ``warn`` (works, but not as well as it could, or a part is absent that a CPU-only run
does not need); ``fail`` (something that is configured is broken); ``skip`` (not asked for).
The command prints a table and exits 1 when any check failed.

==================  =====================================================================================
check               how
==================  =====================================================================================
nvidia driver       NVML (``nvmlSystemGetDriverVersion``); 384.81 is the oldest driver CUDA 9 / CuPy and
                    NVML's device queries need. No NVML or no driver: warn (CPU-only machine).
gpu runtime         CuPy: import, CUDA or ROCm (``cupy.cuda.runtime.is_hip``), runtime version, device
                    count; fail when NVML sees GPUs that CuPy cannot, or when the installed wheel
                    (``cupy-cuda12x`` or ``cupy-cuda13x``, either accepted) needs a newer CUDA than the
                    driver supports (``nvmlSystemGetCudaDriverVersion``). The fix names the extra for
                    this driver (:func:`cupy_extra`: ``gpu-cuda13`` from CUDA 13 on, else ``gpu-cuda12``).
rocm devices        AMD GPUs and Hygon DCUs through amdsmi, rocm-smi or CuPy's HIP runtime (skip: none)
ray                 the installed version (no import); with ``--ray ADDRESS``: connect, count live nodes
kubernetes          with a kubeconfig (``$KUBECONFIG``, else ``~/.kube/config``): the API server's
                    ``/version`` with the context's CA, bearer token or client certificate
                    (``/version`` is public by default: ``system:public-info-viewer``); 1.16 or
                    newer passes; refused credentials warn
cluster file        ``--cluster FILE`` validates
network             with ``--ray``: Ray actors on two nodes; latency = median round trip of a tiny call / 2,
                    bandwidth = bytes / time of passing an array between them; warn below half of what the
                    cluster file's ``network`` claims
device speed        each device of this machine measured once, as ``streammap discover`` calibrates it
                    (:mod:`streammap.cluster.microbench`: a GEMM and a streaming copy, CuPy on GPUs, NumPy
                    on the CPU), beside its peak; warn when a GPU cannot be measured (``--no-calibrate``:
                    skip)
storage             write ``--size`` MiB to ``--path`` with ``fsync``, drop it from the page cache
                    (``posix_fadvise``), read it back: MB/s each way; warn below 100 MB/s
==================  =====================================================================================
"""

from __future__ import annotations

import json
import os
import ssl
import statistics
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from streammap.cluster.discover import calibrate, discover
from streammap.cluster.model import load_cluster
from streammap.cluster.rocm import rocm_devices
from streammap.errors import StreamMapError
from streammap.optional import import_cupy

MIN_DRIVER = (384, 81)
MIN_KUBERNETES = (1, 16)
STORAGE_WARN = 100e6          # bytes/s
NETWORK_WARN_SHARE = 0.5


@dataclass(frozen=True)
class Check:
    name: str
    status: str               # pass, warn, fail, skip
    detail: str
    fix: str = ""


# -- GPU -----------------------------------------------------------------------------------------

def check_driver(nvml=None) -> Check:
    """The NVIDIA driver version through NVML (``nvml``: a pynvml-like module, for tests)."""
    name = "nvidia driver"
    if nvml is None:
        try:
            import pynvml as nvml  # noqa: PLC0415
        except Exception as exc:   # noqa: BLE001
            return Check(name, "warn", f"nvidia-ml-py is not installed ({exc})", "pip install nvidia-ml-py")
    try:
        nvml.nvmlInit()
    except Exception as exc:       # noqa: BLE001 -- no library, no driver, no permission
        return Check(name, "warn", f"no NVIDIA driver: NVML cannot start ({exc or type(exc).__name__}); "
                     "GPU plans run with --emulate only",
                     f"on a GPU machine install the NVIDIA driver >= {_v(MIN_DRIVER)}")
    try:
        raw = nvml.nvmlSystemGetDriverVersion()
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:       # noqa: BLE001
        return Check(name, "fail", f"NVML started but cannot be queried ({exc})", "reinstall the NVIDIA driver")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:          # noqa: BLE001
            pass
    version = raw.decode() if isinstance(raw, bytes) else str(raw)
    got = _version_tuple(version)
    detail = f"driver {version}, {count} GPU(s)"
    if got is None or got < MIN_DRIVER:
        return Check(name, "fail", f"{detail}: older than {_v(MIN_DRIVER)}",
                     f"upgrade the NVIDIA driver to >= {_v(MIN_DRIVER)} (CUDA 9 and newer need it)")
    if count == 0:
        return Check(name, "warn", f"{detail}: the driver sees no GPU", "check nvidia-smi and the GPU's power/PCIe")
    return Check(name, "pass", detail)


def cuda_driver_major(nvml=None) -> Optional[int]:
    """The newest CUDA major version the NVIDIA driver supports (NVML's
    ``nvmlSystemGetCudaDriverVersion``: 12040 -> 12), or ``None`` without a driver."""
    try:
        if nvml is None:
            import pynvml as nvml  # noqa: PLC0415
        nvml.nvmlInit()
        try:
            get = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or nvml.nvmlSystemGetCudaDriverVersion
            return int(get()) // 1000
        finally:
            nvml.nvmlShutdown()
    except Exception:              # noqa: BLE001 -- no pynvml, no driver: no CUDA at all
        return None


def cupy_extra(cuda_major: Optional[int] = None, nvml=None) -> str:
    """The ``streammap`` extra whose CuPy this driver runs: ``gpu-cuda13`` for a driver that
    supports CUDA 13 or newer, else ``gpu-cuda12`` (also without a driver, the safer guess: a
    CUDA 12 build runs on every driver from 525 on, a CUDA 13 build needs 580).
    ``cuda_major`` defaults to :func:`cuda_driver_major`."""
    major = cuda_major if cuda_major is not None else cuda_driver_major(nvml)
    return "gpu-cuda13" if major is not None and major >= 13 else "gpu-cuda12"


#: CuPy's wheels, newest first: the distribution name and the CUDA major it is built for (0: a
#: source build or a ROCm wheel, whose CUDA is not in its name).
CUPY_DISTRIBUTIONS = (("cupy-cuda13x", 13), ("cupy-cuda12x", 12), ("cupy-cuda11x", 11), ("cupy", 0))


def installed_cupy() -> Optional[tuple[str, int]]:
    """``(distribution, CUDA major)`` of the installed CuPy wheel, or ``None``."""
    import importlib.metadata as md  # noqa: PLC0415 -- only doctor asks
    for dist, major in CUPY_DISTRIBUTIONS:
        try:
            md.version(dist)
        except md.PackageNotFoundError:
            continue
        return dist, major
    return None


def check_gpu_runtime(cupy, nvml_gpus: Optional[int] = None, cuda_major: Optional[int] = None,
                      wheel: Optional[tuple[str, int]] = None) -> Check:
    """CuPy on CUDA or ROCm (``cupy``: the module, ``None`` when absent); ``nvml_gpus``: the GPUs
    NVML counted (GPUs that CuPy cannot use are then a failure); ``cuda_major``: the newest CUDA
    the driver supports (:func:`cuda_driver_major`), which chooses the extra to install;
    ``wheel``: the installed CuPy distribution (:func:`installed_cupy`): either flavour is
    accepted as long as the driver supports its CUDA major."""
    name = "gpu runtime"
    extra = cupy_extra(cuda_major)
    if cupy is None:
        status = "fail" if nvml_gpus else "warn"
        why = f"NVML sees {nvml_gpus} GPU(s) but CuPy is not installed" if nvml_gpus else "CuPy is not installed"
        cuda = f"this driver supports CUDA {cuda_major}" if cuda_major else "CUDA 12 assumed without a driver"
        return Check(name, status, f"{why}; GPU plans run with --emulate only",
                     f"pip install 'streammap[{extra}]' ({cuda}; 'streammap[gpu]' is the newest, CUDA 13) "
                     "or a cupy-rocm-* build for AMD/Hygon")
    if wheel and cuda_major and wheel[1] > cuda_major:
        return Check(name, "fail", f"{wheel[0]} is built for CUDA {wheel[1]} but this driver supports CUDA "
                     f"{cuda_major} at most", f"pip uninstall {wheel[0]} && pip install 'streammap[{extra}]', "
                     "or upgrade the NVIDIA driver")
    hip = bool(getattr(cupy.cuda.runtime, "is_hip", False))
    platform = "ROCm/HIP" if hip else "CUDA"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
        rt = cupy.cuda.runtime.runtimeGetVersion()
    except Exception as exc:       # noqa: BLE001 -- CUDARuntimeError without a driver
        status = "fail" if nvml_gpus else "warn"
        return Check(name, status, f"CuPy {cupy.__version__} ({platform}) cannot reach a device: {exc}",
                     "install the driver that matches CuPy's CUDA/ROCm version")
    detail = f"CuPy {cupy.__version__} on {platform} {_runtime_version(rt, hip)}, {count} device(s)"
    if count == 0:
        return Check(name, "warn", detail + "; GPU plans run with --emulate only", "check the driver and device visibility")
    if nvml_gpus and count < nvml_gpus:
        return Check(name, "warn", f"{detail}, NVML sees {nvml_gpus}", "check CUDA_VISIBLE_DEVICES")
    return Check(name, "pass", detail)


def check_rocm(find: Optional[Callable] = None) -> Check:
    """AMD GPUs and Hygon DCUs (:func:`streammap.cluster.rocm.rocm_devices`)."""
    if find is None:
        find = rocm_devices
    try:
        devices, notes = find()
    except Exception as exc:       # noqa: BLE001
        return Check("rocm devices", "warn", f"ROCm discovery failed: {exc}", "check rocm-smi")
    if not devices:
        return Check("rocm devices", "skip", "no AMD GPU or Hygon DCU (amdsmi, rocm-smi, CuPy HIP)")
    names = ", ".join(f"{d.name} {d.model or d.kind}" for d in devices)
    return Check("rocm devices", "pass", f"{names} ({notes[0]})")


# -- Ray, Kubernetes, cluster file ----------------------------------------------------------------

def check_ray(address: Optional[str] = None, ray=None) -> Check:
    """Ray's version; with ``address``, whether the cluster answers and how many nodes are alive."""
    name = "ray"
    try:
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415
        ver = version("ray")
    except PackageNotFoundError:
        status = "fail" if address else "warn"
        return Check(name, status, "Ray is not installed; --backend ray and discover --ray are unavailable",
                     "pip install 'streammap[cluster]'")
    if not address:
        return Check(name, "pass", f"Ray {ver} installed (doctor --ray ADDRESS checks a cluster)")
    try:
        if ray is None:
            import ray  # noqa: PLC0415
        ray.init(address=address, ignore_reinit_error=True, logging_level="ERROR")
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception as exc:       # noqa: BLE001
        return Check(name, "fail", f"Ray {ver}: cannot connect to {address}: {exc}",
                     "start the head with `ray start --head` and check the address and firewall (port 6379)")
    return Check(name, "pass", f"Ray {ver}, {address}: {len(nodes)} node(s) alive")


def kubeconfig_path() -> Optional[Path]:
    env = os.environ.get("KUBECONFIG")
    for p in ([x for x in env.split(os.pathsep) if x] if env else [str(Path.home() / ".kube" / "config")]):
        if Path(p).is_file():
            return Path(p)
    return None


def check_kubernetes(kubeconfig: Optional[Path] = None, timeout: float = 5.0) -> Check:
    """The API server's version from the current context of ``kubeconfig``."""
    name = "kubernetes"
    kubeconfig = kubeconfig or kubeconfig_path()
    if kubeconfig is None:
        return Check(name, "skip", "no kubeconfig ($KUBECONFIG, ~/.kube/config)")
    try:
        import yaml  # noqa: PLC0415
        cfg = yaml.safe_load(Path(kubeconfig).read_text()) or {}
        ctx_name = cfg.get("current-context")
        ctx = next(c["context"] for c in cfg.get("contexts") or [] if c.get("name") == ctx_name)
        cluster = next(c["cluster"] for c in cfg.get("clusters") or [] if c.get("name") == ctx.get("cluster"))
        server = cluster["server"].rstrip("/")
    except Exception as exc:       # noqa: BLE001
        return Check(name, "fail", f"{kubeconfig}: no usable current context ({exc.__class__.__name__}: {exc})",
                     "kubectl config use-context NAME")
    user = next((u.get("user") or {} for u in cfg.get("users") or [] if u.get("name") == ctx.get("user")), {})
    request = urllib.request.Request(f"{server}/version")
    if user.get("token"):
        request.add_header("Authorization", f"Bearer {user['token']}")
    try:
        context = _tls_context(cluster, user) if server.startswith("https") else None
        with urllib.request.urlopen(request, timeout=timeout, context=context) as r:
            info = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return Check(name, "warn", f"{server} (context {ctx_name}) answers but refuses /version to these "
                         f"credentials (HTTP {exc.code}); the version is unknown",
                         "check with `kubectl version`; Kubernetes >= 1.16 is needed")
        return Check(name, "fail", f"{server} (context {ctx_name}): HTTP {exc.code} on /version",
                     "check the cluster address (kubectl cluster-info)")
    except Exception as exc:       # noqa: BLE001
        return Check(name, "fail", f"{server} (context {ctx_name}) does not answer: {exc}",
                     "check the cluster address and that the API server is up (kubectl cluster-info)")
    got = (int(str(info.get("major", "0")).rstrip("+") or 0), int(str(info.get("minor", "0")).rstrip("+") or 0))
    detail = f"{info.get('gitVersion', _v(got))} at {server} (context {ctx_name})"
    if got < MIN_KUBERNETES:
        return Check(name, "fail", f"{detail}: older than {_v(MIN_KUBERNETES)}",
                     f"upgrade the cluster to Kubernetes >= {_v(MIN_KUBERNETES)} (HAMi needs it)")
    return Check(name, "pass", detail)


def _tls_context(cluster: dict, user: dict) -> ssl.SSLContext:
    """TLS as kubectl would: the cluster's CA (or none checked), the user's client certificate."""
    import base64  # noqa: PLC0415
    context = ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        context.load_verify_locations(cafile=cluster["certificate-authority"])
    cert, key = user.get("client-certificate"), user.get("client-key")
    if user.get("client-certificate-data") and user.get("client-key-data"):
        with tempfile.TemporaryDirectory() as tmp:            # ssl loads certificates from files only
            cert, key = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            key.chmod(0o600)
            context.load_cert_chain(cert, key)
    elif cert and key:
        context.load_cert_chain(cert, key)
    return context


def check_cluster_file(path) -> tuple[Check, object]:
    """Whether ``path`` is a valid cluster file; returns the check and the cluster (or ``None``)."""
    try:
        cluster = load_cluster(path)
    except StreamMapError as exc:
        where = exc.location()
        return Check("cluster file", "fail", f"{where}: {exc.message}" if where else exc.message,
                     exc.hint or "fix the file"), None
    n = len(cluster.devices)
    return Check("cluster file", "pass", f"{path}: {len(cluster.spec.nodes)} node(s), {n} device(s)"), cluster


# -- network --------------------------------------------------------------------------------------

def measure_link(ping: Callable[[], object], send: Callable[[int], object], nbytes: int = 32 << 20,
                 repeats: int = 5) -> tuple[float, float]:
    """``(latency s, bandwidth bytes/s)`` of a link: ``ping()`` a tiny round trip, ``send(n)`` moves n bytes.

    Latency is half the median round trip; bandwidth the best of ``repeats`` transfers (the least
    disturbed by other traffic), as ``nbytes / time``.
    """
    ping()                         # warm-up: connections, actor start
    rtts = []
    for _ in range(max(3, repeats * 2)):
        t0 = time.perf_counter()
        ping()
        rtts.append(time.perf_counter() - t0)
    send(nbytes)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        send(nbytes)
        best = min(best, time.perf_counter() - t0)
    return statistics.median(rtts) / 2, nbytes / best


def check_network(address: Optional[str], cluster=None, ray=None, nbytes: int = 32 << 20,
                  link: Optional[Callable] = None) -> Check:
    """Bandwidth and latency between two Ray nodes, against the cluster file's ``network``.

    ``link(ray, node_a, node_b)`` returns the ``(ping, send)`` pair :func:`measure_link` times;
    by default two Ray actors, one hard-pinned to each node.
    """
    name = "network"
    if not address:
        return Check(name, "skip", "measured between Ray nodes with --ray ADDRESS")
    try:
        if ray is None:
            import ray  # noqa: PLC0415
        ray.init(address=address, ignore_reinit_error=True, logging_level="ERROR")
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(nodes) < 2:
            return Check(name, "skip", f"{len(nodes)} live Ray node(s): nothing to measure between")
        ping, send = (link or _ray_link)(ray, nodes[0]["NodeID"], nodes[1]["NodeID"])
        latency, bandwidth = measure_link(ping, send, nbytes)
    except Exception as exc:       # noqa: BLE001
        return Check(name, "fail", f"cannot measure between Ray nodes: {exc}", "check that every node is reachable")
    detail = f"{nodes[0].get('NodeManagerAddress')} <-> {nodes[1].get('NodeManagerAddress')}: " \
             f"{bandwidth / 1e9:.2f} GB/s, {latency * 1e6:.0f} us"
    claim = getattr(getattr(cluster, "spec", None), "network", None)
    if claim is None:
        return Check(name, "pass", detail)
    detail += f" (cluster file: {claim.bandwidth / 1e9:.2f} GB/s, {claim.latency * 1e6:.0f} us)"
    if bandwidth < NETWORK_WARN_SHARE * claim.bandwidth:
        return Check(name, "warn", detail, "lower network.bandwidth in the cluster file, or fix the network: "
                     "plans assume what the file says")
    return Check(name, "pass", detail)


def _ray_link(ray, node_a: str, node_b: str):
    import numpy as np  # noqa: PLC0415
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    @ray.remote(num_cpus=0)
    class Probe:
        def ping(self):
            return 0

        def make(self, n):
            return np.ones(n, dtype=np.uint8)

        def take(self, a):
            return int(a.nbytes)

    def on(node):
        return Probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
    a, b = on(node_a), on(node_b)
    ray.get([a.ping.remote(), b.ping.remote()])
    return (lambda: ray.get(b.ping.remote()),
            lambda n: ray.get(b.take.remote(a.make.remote(n))))


# -- storage --------------------------------------------------------------------------------------

def check_storage(path=None, size_mb: int = 32) -> Check:
    """Write then read ``size_mb`` MiB in ``path`` (default: the temporary folder)."""
    folder = Path(path) if path else Path(tempfile.gettempdir())
    name = "storage"
    block = os.urandom(1 << 20)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".streammap-doctor-", dir=folder)
    except OSError as exc:
        return Check(name, "fail", f"cannot write in {folder}: {exc.strerror or exc}",
                     "choose a writable folder with --path")
    try:
        t0 = time.perf_counter()
        with os.fdopen(fd, "wb") as f:
            for _ in range(size_mb):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        write = size_mb * (1 << 20) / (time.perf_counter() - t0)
        with open(tmp, "rb") as f:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            while f.read(1 << 20):
                pass
            read = size_mb * (1 << 20) / (time.perf_counter() - t0)
    except OSError as exc:
        return Check(name, "fail", f"{folder}: {exc.strerror or exc}", "free space or choose another --path")
    finally:
        Path(tmp).unlink(missing_ok=True)
    detail = f"{folder}: write {write / 1e6:.0f} MB/s, read {read / 1e6:.0f} MB/s ({size_mb} MiB)"
    if min(write, read) < STORAGE_WARN:
        return Check(name, "warn", detail, f"below {STORAGE_WARN / 1e6:.0f} MB/s: keep outputs and histories "
                     "on faster storage (local SSD) with --path / -o")
    return Check(name, "pass", detail)


# -- device speed -----------------------------------------------------------------------------------

def check_device_speed(found=None, cupy=None, measure=None) -> Check:
    """Each device of this machine measured once (a GEMM and a streaming copy, as ``streammap
    discover`` records them: :mod:`streammap.cluster.microbench`), beside its peak figures.

    ``found``: a :class:`~streammap.cluster.discover.Discovery` (default: discover now). Warns when
    a GPU could not be measured (no CuPy, a failing device): its plans then run on peak figures.
    """
    name = "device speed"
    try:
        found = calibrate(found if found is not None else discover(), cupy=cupy, measure=measure)
    except Exception as exc:       # noqa: BLE001 -- a finding, not a crash
        return Check(name, "warn", f"could not measure the devices: {type(exc).__name__}: {exc}",
                     "streammap discover --no-calibrate writes peak figures only")
    devices = [d for n in found.spec.nodes for d in n.devices]
    detail = "; ".join(n.removeprefix("calibrated ") for n in found.notes if n.startswith("calibrated "))
    missed = [d.name for d in devices if d.kind in ("gpu", "dcu") and d.achieved_flops is None]
    if missed:
        return Check(name, "warn", detail, f"{', '.join(missed)} not measured: install CuPy "
                     f"(pip install 'streammap[{cupy_extra()}]') so that estimates use what the GPUs achieve")
    return Check(name, "pass", detail + " (streammap discover records these in the cluster file)")


# -- all together ---------------------------------------------------------------------------------

def run_checks(*, cluster_file=None, ray_address: Optional[str] = None, path=None, size_mb: int = 32,
               nvml=None, cupy=None, ray=None, kubeconfig=None, rocm=None, calibrate_devices: bool = True,
               measure=None) -> list[Check]:
    """Every check, in order (the fakes are for tests; ``calibrate_devices=False`` skips the
    device-speed measurement)."""
    checks = [check_driver(nvml)]
    gpus = _nvml_count(nvml) if checks[0].status == "pass" else None
    cupy_module = cupy if cupy is not None else _import_cupy()
    checks.append(check_gpu_runtime(cupy_module, gpus, cuda_driver_major(nvml),
                                    installed_cupy() if cupy is None else None))
    checks.append(check_rocm(rocm))
    checks.append(check_ray(ray_address, ray))
    checks.append(check_kubernetes(kubeconfig))
    cluster = None
    if cluster_file:
        c, cluster = check_cluster_file(cluster_file)
        checks.append(c)
    checks.append(check_network(ray_address, cluster, ray))
    checks.append(check_storage(path, size_mb))
    if calibrate_devices:
        checks.append(check_device_speed(discover(nvml=nvml), cupy=cupy_module, measure=measure))
    else:
        checks.append(Check("device speed", "skip", "not measured (--no-calibrate)"))
    return checks


def format_checks(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status.upper():4}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.status in ("warn", "fail"):
            lines.append(f"{'':4}  {'':<{width}}  fix: {c.fix}")
    counts = {s: sum(c.status == s for c in checks) for s in ("pass", "warn", "fail", "skip")}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return "\n".join(lines)


# -- helpers --------------------------------------------------------------------------------------

def _import_cupy():
    return import_cupy()


def _nvml_count(nvml) -> Optional[int]:
    try:
        if nvml is None:
            import pynvml as nvml  # noqa: PLC0415
        nvml.nvmlInit()
        try:
            return int(nvml.nvmlDeviceGetCount())
        finally:
            nvml.nvmlShutdown()
    except Exception:              # noqa: BLE001
        return None


def _version_tuple(text: str) -> Optional[tuple[int, int]]:
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def _v(t) -> str:
    return ".".join(str(x) for x in t)


def _runtime_version(v, hip: bool) -> str:
    v = int(v)
    if hip:
        return f"{v // 10_000_000}.{v // 100_000 % 100}"
    return f"{v // 1000}.{v % 1000 // 10}"
