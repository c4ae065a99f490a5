"""A fake NVML for telemetry tests (the calls :class:`streammap.monitoring.telemetry.NvmlSampler` makes),
a sampler that replays fixed readings, a reader of the metrics a run serves, and a plan of naps."""

from __future__ import annotations

import types
import urllib.request
from types import SimpleNamespace

from streammap.monitoring.telemetry import DeviceInfo, Reading, Sampler
from tests.helpers.plans import cpu_devices, make_plan, ref, task


class NVMLError(Exception):
    def __init__(self, value, text="NVML error"):
        super().__init__(text)
        self.value = value


class NVMLError_NotSupported(NVMLError):
    def __init__(self):
        super().__init__(3, "Not Supported")


class NVMLError_Timeout(NVMLError):
    def __init__(self):
        super().__init__(10, "Timeout")


class NVMLError_GpuIsLost(NVMLError):
    def __init__(self):
        super().__init__(15, "GPU is lost")


def fake_nvml(gpus: list[dict], *, xids=(), no_events=False):
    """``gpus``: dicts with name, uuid, total, used, util, power_mw, temp, ecc; a key set to
    ``"unsupported"`` raises NotSupported, ``lost=True`` makes every query raise GpuIsLost.
    ``xids``: (gpu index, xid) events pending in the event set."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_TEMPERATURE_GPU = 0
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    m.NVML_VOLATILE_ECC = 0
    m.nvmlEventTypeXidCriticalError = 8
    m.calls = []
    pending = list(xids)

    def g(h):
        d = gpus[h[1]]
        if d.get("lost"):
            raise NVMLError_GpuIsLost()
        return d

    def val(h, key):
        v = g(h)[key]
        if v == "unsupported":
            raise NVMLError_NotSupported()
        return v

    def counted(name, fn):
        def call(*a):
            m.calls.append(name)
            return fn(*a)
        return call

    m.nvmlInit = lambda: m.calls.append("init")
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    m.nvmlDeviceGetName = lambda h: gpus[h[1]]["name"].encode()
    m.nvmlDeviceGetUUID = lambda h: gpus[h[1]]["uuid"]
    m.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=f"00000000:{h[1]:02x}:00.0".encode())
    m.nvmlDeviceGetMemoryInfo = counted("mem", lambda h: SimpleNamespace(
        total=gpus[h[1]]["total"], used=val(h, "used"), free=gpus[h[1]]["total"] - val(h, "used")))
    m.nvmlDeviceGetUtilizationRates = counted("util", lambda h: SimpleNamespace(gpu=val(h, "util"), memory=0))
    m.nvmlDeviceGetPowerUsage = counted("power", lambda h: val(h, "power_mw"))
    m.nvmlDeviceGetTemperature = counted("temp", lambda h, kind: val(h, "temp"))
    m.nvmlDeviceGetTotalEccErrors = counted("ecc", lambda h, kind, counter: val(h, "ecc"))
    if not no_events:
        m.nvmlEventSetCreate = lambda: "eventset"
        m.nvmlDeviceRegisterEvents = lambda h, kind, es: None

        def wait(es, timeout_ms):
            if not pending:
                raise NVMLError_Timeout()
            i, xid = pending.pop(0)
            return SimpleNamespace(device=("handle", i), eventType=8, eventData=xid)

        m.nvmlEventSetWait = wait
        m.nvmlEventSetFree = lambda es: None
    m.pending_xids = pending
    return m


def gpu(**kw) -> dict:
    d = dict(name="NVIDIA H200", uuid="GPU-1234", total=141 * 2**30, used=10 * 2**30, util=57,
             power_mw=350000, temp=61, ecc=0)
    d.update(kw)
    return d


class ScriptedSampler(Sampler):
    """Returns ``readings[i]`` at its i-th sample (the last one repeated)."""

    source = "test"

    def __init__(self, infos: list[DeviceInfo], readings: list[list[Reading]]):
        self.infos = infos
        self.readings = readings
        self.n = 0

    def devices(self):
        return list(self.infos)

    def sample(self):
        r = self.readings[min(self.n, len(self.readings) - 1)]
        self.n += 1
        return [Reading(**vars(x)) for x in r]


# -- reading what a run serves to Prometheus ---------------------------------------------------

def scrape(port: int) -> str:
    """The metrics text served on 127.0.0.1:``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def value(text: str, name: str, **labels) -> float:
    """The sample of ``name`` whose labels include ``labels``."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, v = line.rpartition(" ")
        metric, _, rest = head.partition("{")
        if metric != name:
            continue
        got = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if "=" in p)
        got = {k: v.strip('"') for k, v in got.items()}
        if all(got.get(k) == str(x) for k, x in labels.items()):
            return float(v)
    raise KeyError(f"{name} {labels} not in metrics")


SLEEPY = """
import time
import numpy as np

# @stream param
NAP = 0.01          # seconds per nap; each plan sets it through its params

def source():
    return np.arange(4.0)

def nap(x, k):
    time.sleep(NAP)
    return x + k
"""


def sleepy_plan(tmp_path, n, nap_seconds):
    """``n`` tasks that sleep ``nap_seconds`` each, alternating over two CPU devices after a source."""
    devs = [d["id"] for d in cpu_devices(2)]
    tasks = [task("src", "source", devs[0])]
    tasks += [task(f"nap{k}", "nap", devs[k % 2], ref("src"), k) for k in range(n)]
    return make_plan(tmp_path, SLEEPY, tasks, devices=cpu_devices(2), outputs=ref(f"nap{n - 1}"),
                     params={"NAP": nap_seconds})
