"""Optional dependencies, imported when first needed: CuPy (the ``gpu`` extra).

Discovery, ``streammap doctor``, ``streammap profile`` and the runtime all ask for CuPy; its absence
is a normal case (a machine without GPUs), answered with ``None`` rather than an exception. This
module sits below all of them, so that discovery does not have to import the runtime to find out.
"""

from __future__ import annotations


def import_cupy():
    """CuPy, or ``None`` when it is not installed (or cannot be imported)."""
    try:
        import cupy  # noqa: PLC0415 (optional dependency, imported lazily)
    except Exception:  # noqa: BLE001 (a broken CUDA install raises anything at import)
        return None
    return cupy
