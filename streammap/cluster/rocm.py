"""Discovery of AMD GPUs and Hygon DCUs (ROCm), for machines NVML does not describe.

:func:`rocm_devices` asks, in order, and keeps the first source that answers:

1. ``amdsmi`` (the Python binding of AMD SMI that ships with ROCm 6): ``amdsmi_get_gpu_asic_info``
   (``market_name``, ``vendor_name``), ``amdsmi_get_gpu_vram_info`` (``vram_size`` in MiB),
   ``amdsmi_get_gpu_device_uuid``;
2. ``rocm-smi --showproductname --showmeminfo vram --showuniqueid --json`` (older ROCm, and the
   DTK that Hygon ships): ``Card series``/``Card model``, ``Card vendor``,
   ``VRAM Total Memory (B)``, ``Unique ID``;
3. CuPy's ROCm build (``cupy.cuda.runtime.is_hip``): ``getDeviceProperties(i)`` (``name``,
   ``totalGlobalMem``, ``multiProcessorCount``, ``clockRate`` in kHz).

A device whose vendor or name says Hygon (``Hygon``, ``Haiguang``, ``DCU``) is ``kind: dcu,
vendor: hygon`` and named ``dcu<i>``; any other is ``kind: gpu, vendor: amd``, named
``gpu<i>`` after the NVIDIA GPUs. ``index`` is the HIP ordinal (the order every source lists
devices in), which the runtime passes to ``cupy.cuda.Device``. No ROCm, no devices: ``[]`` and a
note, never an error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Optional

from streammap.cluster.model import DeviceSpec
from streammap.optional import import_cupy

HYGON_WORDS = ("hygon", "haiguang", "dcu")


@dataclass
class RocmDevice:
    name: str                         # the board's name ("AMD Instinct MI250X", "Z100")
    vendor_text: str = ""
    memory: Optional[float] = None    # bytes
    uuid: Optional[str] = None
    cores: Optional[int] = None       # compute units
    clock_mhz: Optional[int] = None


def rocm_devices(first_gpu_name: int = 0, *, amdsmi=None, run: Optional[Callable] = None,
                 cupy=None) -> tuple[list[DeviceSpec], list[str]]:
    """``(devices, notes)`` for this machine's ROCm devices (see the module docstring).

    ``amdsmi``, ``run`` (a ``subprocess.run``-like callable) and ``cupy`` replace the real
    sources in tests; ``first_gpu_name`` is the number of the first ``gpu<i>`` name (after the
    NVIDIA GPUs).
    """
    for source, probe in (("amdsmi", lambda: _from_amdsmi(amdsmi)), ("rocm-smi", lambda: _from_rocm_smi(run)),
                          ("CuPy (HIP)", lambda: _from_cupy(cupy))):
        found = probe()
        if found:
            return _specs(found, first_gpu_name), [f"ROCm: {len(found)} device(s) from {source}"]
    return [], []


def _specs(found: list[RocmDevice], first_gpu: int) -> list[DeviceSpec]:
    out = []
    n_gpu, n_dcu = first_gpu, 0
    for i, d in enumerate(found):
        hygon = any(w in f"{d.vendor_text} {d.name}".lower() for w in HYGON_WORDS)
        if hygon:
            name, kind, vendor = f"dcu{n_dcu}", "dcu", "hygon"
            n_dcu += 1
        else:
            name, kind, vendor = f"gpu{n_gpu}", "gpu", "amd"
            n_gpu += 1
        out.append(DeviceSpec(name=name, kind=kind, vendor=vendor, model=d.name or None, memory=d.memory or None,
                              index=i, uuid=d.uuid, sm_count=d.cores, clock_mhz=d.clock_mhz))
    return out


def _from_amdsmi(mod) -> list[RocmDevice]:
    if mod is None:
        try:
            import amdsmi as mod  # noqa: PLC0415 -- ships with ROCm, not on PyPI for every version
        except Exception:         # noqa: BLE001
            return []
    try:
        mod.amdsmi_init()
    except Exception:             # noqa: BLE001 -- no driver
        return []
    try:
        out = []
        for h in _try(mod.amdsmi_get_processor_handles) or []:
            asic = _try(mod.amdsmi_get_gpu_asic_info, h) or {}
            vram = _try(mod.amdsmi_get_gpu_vram_info, h) or {}
            size = vram.get("vram_size")
            out.append(RocmDevice(name=str(asic.get("market_name") or "AMD GPU"),
                                  vendor_text=str(asic.get("vendor_name") or ""),
                                  memory=float(size) * 2**20 if size else None,
                                  uuid=_try(mod.amdsmi_get_gpu_device_uuid, h),
                                  cores=_int(asic.get("num_compute_units"))))
        return out
    finally:
        _try(mod.amdsmi_shut_down)


def _from_rocm_smi(run) -> list[RocmDevice]:
    if run is None:
        if shutil.which("rocm-smi") is None:
            return []
        run = subprocess.run
    try:
        r = run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showuniqueid", "--json"],
                capture_output=True, text=True, timeout=20)
        data = json.loads(r.stdout or "{}")
    except Exception:             # noqa: BLE001 -- missing, hung, or not JSON
        return []
    cards = sorted((k for k in data if k.lower().startswith("card")), key=lambda k: _int(k[4:]) or 0)
    out = []
    for k in cards:
        c = data[k]
        total = c.get("VRAM Total Memory (B)")
        uid = c.get("Unique ID")
        out.append(RocmDevice(name=str(c.get("Card series") or c.get("Card model") or "AMD GPU").strip(),
                              vendor_text=str(c.get("Card vendor") or ""),
                              memory=float(total) if total and str(total).isdigit() else None,
                              uuid=str(uid) if uid and uid != "N/A" else None))
    return out


def _from_cupy(cupy) -> list[RocmDevice]:
    if cupy is None:
        cupy = import_cupy()
    if cupy is None or not getattr(cupy.cuda.runtime, "is_hip", False):
        return []
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception:             # noqa: BLE001
        return []
    out = []
    for i in range(n):
        p = _try(cupy.cuda.runtime.getDeviceProperties, i) or {}
        name = p.get("name", b"")
        name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        clock = _int(p.get("clockRate"))
        out.append(RocmDevice(name=name.strip("\x00 ") or "HIP device", memory=p.get("totalGlobalMem"),
                              cores=_int(p.get("multiProcessorCount")), clock_mhz=clock // 1000 if clock else None))
    return out


def _try(fn, *args) -> Any:
    try:
        return fn(*args)
    except Exception:             # noqa: BLE001
        return None


def _int(v) -> Optional[int]:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
