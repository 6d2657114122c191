"""Two OpenMP runtimes in one process, as on a Mac, simulated on Linux
(tests/test_openmp_runtimes.py puts this folder on PYTHONPATH).

On a Mac, torch's wheel and faiss-cpu's wheel each ship their own ``libomp.dylib``;
a process that starts both runtimes is stopped by LLVM's "OMP: Error #15". On Linux
both use GNU OpenMP, which never complains. Here, ``import torch`` starts one copy of
an LLVM-lineage runtime (``TRAINBENCH_TEST_OPENMP_TORCH``) and ``import faiss``
starts a second copy (``TRAINBENCH_TEST_OPENMP_FAISS``): a process that imports both
dies exactly as on a Mac.
"""

import ctypes
import os
import sys

_RUNTIMES = {
    "torch": os.environ.get("TRAINBENCH_TEST_OPENMP_TORCH"),
    "faiss": os.environ.get("TRAINBENCH_TEST_OPENMP_FAISS"),
}


class _StartRuntimeOnImport:
    """A meta-path finder that finds nothing: on the first import of torch or faiss,
    it loads and starts that package's copy of the runtime, then lets the import go on."""

    def find_spec(self, name, path=None, target=None):
        library = _RUNTIMES.pop(name, None) if "." not in name else None
        if library:
            ctypes.CDLL(library, mode=os.RTLD_LOCAL).omp_get_max_threads()
        return None


sys.meta_path.insert(0, _StartRuntimeOnImport())
