"""One OpenMP runtime per process (trainbench.workloads.faiss_process), proven on Linux
with the Mac's condition simulated: two copies of an LLVM-lineage OpenMP runtime
(Intel's libiomp5 from the dev extra's intel-openmp), one started by ``import torch``
and one by ``import faiss`` (tests/data/two_openmp/sitecustomize.py). A process that
starts both dies with "OMP: Error #15", as a Mac's does with torch's and faiss-cpu's
``libomp.dylib``; a two_tower cell, whose FAISS runs in a process of its own, does not.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import tiny_config
from trainbench import config as tbconfig
from trainbench.common.records import read_record
from trainbench.launch import openmp_runtimes
from trainbench.launch.launcher import run_cell
from trainbench.workloads import faiss_process as fp
from trainbench.workloads import two_tower as tt

HOOK = Path(__file__).parent / "data" / "two_openmp"
RUNTIME_NAMES = ("libiomp5.so", "libomp.so", "libomp.so.5")


def llvm_openmp_runtime() -> Path | None:
    """An LLVM-lineage OpenMP runtime on this machine: the venv's (intel-openmp), else
    the system's LLVM libomp."""
    candidates = [Path(sys.prefix) / "lib" / name for name in RUNTIME_NAMES]
    candidates += sorted(Path("/usr/lib").glob("llvm-*/lib/libomp.so*"))
    return next((path for path in candidates if path.is_file()), None)


@pytest.fixture
def two_runtimes(tmp_path, monkeypatch) -> dict:
    """The environment of a process in which torch and faiss each start their own
    copy of the runtime (two files: the loader would share one file's copy)."""
    runtime = llvm_openmp_runtime()
    if runtime is None:
        if os.environ.get("TRAINBENCH_REQUIRE_OPENMP_RUNTIME"):
            pytest.fail("no LLVM-lineage OpenMP runtime; CI installs intel-openmp (dev extra)")
        pytest.skip(
            "no LLVM-lineage OpenMP runtime here (intel-openmp, the dev extra's, exists for "
            "Linux x86_64 only): the two-runtime condition cannot be simulated"
        )
    copies = {}
    for package in ("torch", "faiss"):
        copies[package] = tmp_path / f"libomp-{package}.so"
        shutil.copyfile(runtime, copies[package])
    variables = {
        "TRAINBENCH_TEST_OPENMP_TORCH": str(copies["torch"]),
        "TRAINBENCH_TEST_OPENMP_FAISS": str(copies["faiss"]),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOK), os.environ.get("PYTHONPATH")])),
    }
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    # scikit-learn's import sets KMP_DUPLICATE_LIB_OK=True in its process (and so in its
    # children), which silences the abort: a pytest worker that ran another test file
    # may carry it. The simulated cell runs without it, as a fresh process on a Mac.
    monkeypatch.delenv("KMP_DUPLICATE_LIB_OK", raising=False)
    return dict(os.environ)


def test_the_simulation_kills_a_process_that_imports_torch_and_uses_faiss(two_runtimes):
    """What a cell did before FAISS had its own process (two_tower's set_faiss_threads
    called faiss.omp_get_max_threads beside torch): the Mac's abort, reproduced."""
    code = "import torch, faiss; torch.ones(2).sum(); faiss.omp_get_max_threads(); print('ran')"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=two_runtimes, capture_output=True, text=True
    )
    assert proc.returncode == -signal.SIGABRT, proc.stderr
    assert "OMP: Error #15" in proc.stderr and "ran" not in proc.stdout


def test_faiss_searches_beside_torch_with_two_runtimes(two_runtimes):
    """This process has torch; the search still answers, from a worker without torch."""
    process = fp.FaissProcess()
    try:
        assert process.facts["modules_with_an_openmp_runtime"] == []
        docs = np.eye(4, dtype=np.float32)
        _, ids = process.search(docs[[2, 0]], docs, 1)
        assert ids.tolist() == [[2], [0]]
    finally:
        process.close()
    assert process.proc.returncode == 0


@pytest.mark.slow
def test_two_tower_cell_runs_with_two_runtimes(tmp_path, two_runtimes):
    """A two_tower cell through the launcher, mining and scoring with FAISS, in the
    simulated Mac condition: ok, where a cell that imported faiss itself died."""
    wl = {"batch_sizes": [64], "epochs": 2, "warmup_steps": 1, "mine_schedule": "1-9:faiss",
          "data": {"n_train": 256, "n_heldout": 64}}  # fmt: skip
    config = tbconfig.validate_config(
        tiny_config(devices=["cpu"], workloads={"two_tower": copy.deepcopy(wl)})
    )
    tt.prepare_data(config["workloads"]["two_tower"], tmp_path / "data", config["seed"])
    spec = tbconfig.cell_spec(
        config, tbconfig.Cell("two_tower", "cpu", 64, 0), str(tmp_path / "data")
    )
    run_cell(spec, tmp_path / "metrics.json", tmp_path / "cell.log")
    record = read_record(tmp_path / "metrics.json")
    log = (tmp_path / "cell.log").read_text()
    assert record["status"] == "ok", (record.get("error"), log[-2000:])
    assert "OMP: Error #15" not in log
    mining = [e["extra"]["mining"] for e in record["result"]["epochs"]]
    assert [m["mode"] for m in mining] == ["none", "faiss"]
    settings = record["result"]["settings"]["mining"]
    assert settings["faiss_threads_in_force"] == settings["torch_threads_after_faiss"]
    # the cell's own process held torch's runtime, never faiss's
    loaded = [Path(p).name for p in record["settings_in_force"]["openmp"]["runtimes_loaded"]]
    assert "libomp-torch.so" in loaded and "libomp-faiss.so" not in loaded


def test_the_worker_refuses_to_serve_beside_torch():
    """serve() in this process, which has imported torch: it answers with an error and
    serves nothing, so torch can never be brought into the FAISS process unseen."""
    assert "torch" in sys.modules
    answers = io.BytesIO()
    assert fp.serve(io.BytesIO(), answers) == 1
    answers.seek(0)
    kind, text = pickle.load(answers)
    assert kind == "error" and "torch imported into the FAISS process" in text


def test_a_dead_worker_is_named_with_its_signal():
    process = fp.FaissProcess()
    os.kill(process.proc.pid, signal.SIGABRT)
    process.proc.wait()
    docs = np.eye(2, dtype=np.float32)
    with pytest.raises(fp.FaissProcessError, match="SIGABRT"):
        process.search(docs, docs, 1)


def test_an_error_in_the_worker_is_raised_in_the_cell_and_the_worker_goes_on():
    process = fp.FaissProcess()
    try:
        with pytest.raises(fp.FaissProcessError, match="failed"):
            process.search(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32), 1)
        assert process.search(np.ones((1, 2), np.float32), np.ones((3, 2), np.float32), 2)[
            1
        ].shape == (1, 2)
    finally:
        process.close()


def test_without_faiss_the_cell_fails_as_an_import_error(tmp_path):
    """A FAISS process whose Python has no faiss: ModuleNotFoundError naming faiss, as
    the cell's own import used to raise (a cell without FAISS is unavailable)."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'faiss':\n"
        "            raise ModuleNotFoundError(\"No module named 'faiss'\", name='faiss')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    with pytest.raises(ModuleNotFoundError, match="faiss") as caught:
        fp.FaissProcess(env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert caught.value.name == "faiss"


@pytest.mark.parametrize(
    "path, runtime",
    [
        ("/x/torch/lib/libomp.dylib", True),
        ("/x/faiss/.dylibs/libomp.dylib", True),
        ("/x/torch/lib/libgomp.so.1", True),
        ("/x/faiss_cpu.libs/libgomp-e985bcbb.so.1.0.0", True),
        ("/x/lib/libiomp5.so", True),
        ("/x/lib/libompstuff.so", False),
        ("/x/lib/libgomputer.dylib", False),
        ("/x/torch/lib/libtorch_cpu.so", False),
    ],
)
def test_runtime_names(path, runtime):
    assert openmp_runtimes._is_runtime(path) is runtime


def test_the_record_names_the_runtimes_and_who_set_the_switch(monkeypatch):
    import torch  # noqa: F401 (its GNU OpenMP runtime is mapped into this process)

    monkeypatch.delenv("KMP_DUPLICATE_LIB_OK", raising=False)
    facts = openmp_runtimes.openmp_in_force(None)
    assert any("libgomp" in path for path in facts["runtimes_loaded"])
    assert facts["KMP_DUPLICATE_LIB_OK"] is None and facts["KMP_DUPLICATE_LIB_OK_set_by"] is None
    monkeypatch.setenv("KMP_DUPLICATE_LIB_OK", "True")  # as scikit-learn's import does
    assert "a library" in openmp_runtimes.openmp_in_force(None)["KMP_DUPLICATE_LIB_OK_set_by"]
    assert "environment" in openmp_runtimes.openmp_in_force("True")["KMP_DUPLICATE_LIB_OK_set_by"]


def test_on_macos_the_runtimes_come_from_dyld(monkeypatch):
    images = [
        "/usr/lib/libSystem.B.dylib",
        "/v/torch/lib/libomp.dylib",
        "/v/sklearn/.dylibs/libomp.dylib",
    ]
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(openmp_runtimes, "_macos_libraries", lambda: images)
    assert openmp_runtimes.loaded_runtimes() == images[1:]
