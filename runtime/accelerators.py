"""Which plan devices CuPy drives, and on which platform: CUDA (NVIDIA) or HIP (AMD, Hygon DCU).

CuPy comes in a CUDA build (``cupy-cuda12x``) and a ROCm build (``cupy-rocm-*``, where
``cupy.cuda.runtime.is_hip`` is true). The same runtime code runs on both: ``cupy.cuda.Device``,
streams and events map onto HIP's. So a device executes through CuPy when its platform is the
installed build's:

==========================  ===========  ==================================================
device (kind, vendor)       platform     notes
==========================  ===========  ==================================================
gpu, nvidia                 cuda
gpu, amd / hygon            hip          AMD Instinct and Radeon through ROCm
dcu (any vendor)            hip          Hygon DCUs run ROCm's HIP (DTK)
gpu, no vendor              either       whatever the installed CuPy drives
mlu, npu, other vendors     none         mapped and exported, never executed: no runtime
==========================  ===========  ==================================================
"""

from __future__ import annotations

from typing import Optional

CUDA, HIP, EITHER = "cuda", "hip", "either"
_HIP_VENDORS = ("amd", "hygon")
#: What to call a kind StreamMAP cannot execute, for error messages.
KIND_NAMES = {"mlu": "Cambricon MLU", "npu": "NPU", "dcu": "Hygon DCU", "tpu": "TPU"}


def cupy_platform(kind: str, vendor: Optional[str]) -> Optional[str]:
    """``"cuda"``, ``"hip"``, ``"either"``, or ``None`` when CuPy cannot drive the device."""
    v = (vendor or "").lower()
    if kind == "dcu":
        return HIP
    if kind != "gpu":
        return None
    if v == "nvidia":
        return CUDA
    if v in _HIP_VENDORS:
        return HIP
    return EITHER if not v else None


def is_hip(cupy) -> bool:
    """Whether ``cupy`` is CuPy's ROCm build."""
    try:
        return bool(cupy.cuda.runtime.is_hip)
    except AttributeError:
        return False


def build_name(hip: bool) -> str:
    return "ROCm (HIP)" if hip else "CUDA"
