"""The OpenMP runtimes a cell's process loaded, and the duplicate-runtime switch in
force at its end: recorded with every ok run (``settings_in_force.openmp``).

On a Mac, torch, faiss-cpu and scikit-learn each ship their own ``libomp.dylib``; a
process that *starts* two of them aborts ("OMP: Error #15"), unless
``KMP_DUPLICATE_LIB_OK`` is true, which Intel's message says "may cause crashes or
silently produce incorrect results". scikit-learn's import sets that variable in its
own process (``os.environ.setdefault("KMP_DUPLICATE_LIB_OK", "True")`` in
``sklearn/__init__.py``), so a cell that imports it runs with the switch on whatever
the config said. The record says which runtimes were loaded (loaded is not started:
this is a fact to read, not a verdict) and whether the switch was on, and who set it.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys

SWITCH = "KMP_DUPLICATE_LIB_OK"
# libgomp (GNU), libomp (LLVM), libiomp5 (Intel), with or without a wheel's hash suffix.
RUNTIME_NAME = re.compile(r"^lib(g|i)?omp[0-9]*([-.][^/]*)?\.(so|dylib)([.0-9]*)$")


def _is_runtime(path: str) -> bool:
    return bool(RUNTIME_NAME.match(os.path.basename(path)))


def _linux_libraries() -> list[str]:
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                paths.add(fields[5].strip())
    return sorted(paths)


def _macos_libraries() -> list[str]:
    dyld = ctypes.CDLL(None)
    dyld._dyld_get_image_name.restype = ctypes.c_char_p
    dyld._dyld_get_image_name.argtypes = [ctypes.c_uint32]
    names = (dyld._dyld_get_image_name(i) for i in range(dyld._dyld_image_count()))
    return sorted({name.decode() for name in names if name})


def loaded_runtimes() -> list[str] | None:
    """The OpenMP runtime files mapped into this process (Linux: /proc/self/maps; macOS:
    dyld's image list); None where neither can be read."""
    try:
        if sys.platform == "darwin":
            libraries = _macos_libraries()
        elif os.path.exists("/proc/self/maps"):
            libraries = _linux_libraries()
        else:
            return None
    except (OSError, AttributeError):
        return None
    return [path for path in libraries if _is_runtime(path)]


def openmp_in_force(switch_at_start: str | None) -> dict:
    """The facts recorded at the end of a cell: the runtimes loaded, the switch's value
    at the end, and who set it (the cell's environment, or the run: a library)."""
    at_end = os.environ.get(SWITCH)
    if at_end is None:
        set_by = None
    elif at_end == switch_at_start:
        set_by = "the cell's environment (device_settings.<device>.env or the shell)"
    else:
        set_by = "the run (a library set it; scikit-learn's import does)"
    return {"runtimes_loaded": loaded_runtimes(), SWITCH: at_end, f"{SWITCH}_set_by": set_by}
