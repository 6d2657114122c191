"""Energy per sample over the timed window: the tracker (NVML, RAPL, IOReport patched),
the record columns, the ``energy`` table's ratio and verdict, its figure and the
reports. No GPU, no counters of this machine: every counter is a fake."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stats_helpers import run
from test_report import render_report, render_workload_report, scenario, write_inputs
from test_tracking import FakeDevice, _context, _parts, _spec
from trainbench.analysis.aggregate import RUN_COLUMNS, run_row
from trainbench.analysis.figures import FIGURES
from trainbench.analysis.stats import COLUMNS, PUBLISHED_TABLES, publish
from trainbench.analysis.stats.energy import energy_table
from trainbench.measure.devices import CpuDevice
from trainbench.measure.trackers import EVAL, TRAIN, EnergyTracker, TimedRegion
from trainbench.measure.trackers import energy as en
from trainbench.measure.trackers import energy_counters as counters
from trainbench.measure.training import run_training


class Clock:
    """A fake time module: perf_counter reads it, sleep advances it."""

    def __init__(self) -> None:
        self.t = 100.0

    def perf_counter(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class CudaDevice(CpuDevice):
    backend = "cuda"


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(en, "time", fake)
    return fake


def fake_nvml(clock: Clock, watts: float = 250.0, fail_init: str | None = None):
    """A pynvml whose energy counter advances with ``clock`` at ``watts``."""
    nvml = types.ModuleType("pynvml")
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.calls = []

    def init():
        if fail_init:
            raise RuntimeError(fail_init)

    nvml.nvmlInit = init
    nvml.nvmlDeviceGetHandleByIndex = lambda index: f"gpu{index}"
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda handle: int(clock.t * watts * 1000)
    nvml.nvmlDeviceGetTemperature = lambda handle, sensor: 41 + clock.t / 1000
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000
    nvml.nvmlDeviceGetPowerUsage = lambda handle: 71_000
    return nvml


def region(tracker, device, seconds: float, clock: Clock, kind: str = TRAIN) -> None:
    with TimedRegion(device, [tracker], kind):
        clock.sleep(seconds)


# ----------------------------------------------------------------------------- NVML


def test_nvml_joules_over_the_timed_window_only(monkeypatch, clock):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(clock))
    device = CudaDevice()
    tracker = EnergyTracker(device, 1.0, sources=[counters.nvml_source(device)])
    assert tracker.idle["watts"]["gpu"] == pytest.approx(250.0)  # 0.5 s, nothing queued
    clock.sleep(7.0)  # step 0, outside every region: never counted
    region(tracker, device, 2.0, clock)
    clock.sleep(3.0)  # evaluation below; the gap between regions is not counted either
    region(tracker, device, 1.5, clock, EVAL)
    region(tracker, device, 2.0, clock)
    energy = tracker.summary(samples=800)
    gpu = energy["domains"]["gpu"]
    assert gpu["status"] == "ok" and gpu["joules"] == pytest.approx(1000.0)
    assert gpu["window_seconds"] == pytest.approx(4.0) and "nvmlDeviceGet" in gpu["method"]
    assert energy["status"] == "ok" and energy["measured"] == "gpu"
    assert energy["total_joules"] == pytest.approx(1000.0)
    assert energy["joules_per_sample"] == pytest.approx(1.25)
    assert energy["samples_per_joule"] == pytest.approx(0.8)
    assert energy["eval"]["total_joules"] == pytest.approx(375.0)
    state = energy["gpu_state"]
    assert state["before"]["power_limit_w"] == 700.0 and state["after"]["power_w"] == 71.0
    assert state["after"]["temperature_c"] > state["before"]["temperature_c"]
    assert "before step 0" in state["method"] and "how" not in state


def test_a_window_below_the_minimum_is_a_short_window(monkeypatch, clock):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(clock))
    device = CudaDevice()
    tracker = EnergyTracker(device, 1.0, sources=[counters.nvml_source(device)], idle_seconds=0)
    region(tracker, device, 0.4, clock)
    energy = tracker.summary(samples=100)
    gpu = energy["domains"]["gpu"]
    assert gpu["status"] == "short window" and gpu["joules"] is None
    assert gpu["raw_joules"] == pytest.approx(100.0)  # kept for diagnosis, never reported
    assert "0.4 s < timing.min_energy_seconds 1 s" in gpu["reason"]
    assert energy["status"] == "short window" and energy["total_joules"] is None
    assert energy["joules_per_sample"] is None and energy["samples_per_joule"] is None


@pytest.mark.parametrize(
    "module, reason",
    [(None, "NVML not available: "), ("init", "NVML not available: RuntimeError: no driver")],
)
def test_nvml_missing_is_unavailable_with_the_reason(monkeypatch, clock, module, reason):
    fake = None if module is None else fake_nvml(clock, fail_init="no driver")
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # None: `import pynvml` raises
    device = CudaDevice()
    tracker = EnergyTracker(device, 1.0, sources=[counters.nvml_source(device)])
    region(tracker, device, 2.0, clock)
    energy = tracker.summary(samples=10)
    gpu = energy["domains"]["gpu"]
    assert gpu["status"] == "unavailable" and gpu["reason"].startswith(reason)
    assert energy["status"] == "unavailable" and energy["total_joules"] is None
    assert energy["gpu_state"] is None and energy["idle"]["watts"] == {}


def test_a_counter_failing_mid_run_never_crashes_the_cell(clock):
    reads = iter([{"gpu": 1.0}, {"gpu": 5.0}])

    def read():
        return next(reads)  # the third read raises StopIteration

    source = counters.Source({"gpu": "fake"}, {}, read)
    device = CudaDevice()
    tracker = EnergyTracker(device, 1.0, sources=[source], idle_seconds=0)
    region(tracker, device, 2.0, clock)
    region(tracker, device, 2.0, clock)
    gpu = tracker.summary(samples=10)["domains"]["gpu"]
    assert gpu["status"] == "unavailable" and gpu["reason"].startswith("read failed")


def test_a_cell_runs_with_every_counter_unreadable(monkeypatch, tmp_path):
    """The training loop with the machine's real sources, RAPL pointed at a missing
    folder: the record says why, the cell finishes."""
    monkeypatch.setattr(counters, "POWERCAP", tmp_path / "no-powercap")
    device = FakeDevice()
    result = run_training(_parts(6), _context(_spec(6), device))
    energy = result["energy"]
    assert energy["status"] == "unavailable" and energy["samples"] == 5 * 4  # step 0 left out
    assert "no-powercap (no RAPL here" in energy["domains"]["cpu"]["reason"]
    assert energy["eval"]["status"] == "unavailable"
    row = run_row({"cell": result_cell(), "status": "ok", "result": result}, "r.json")
    assert row["energy_status"] == "unavailable" and "no RAPL here" in row["energy_reason"]
    assert row["energy_cpu_status"] == "unavailable" and row["energy_gpu_status"] is None


def result_cell() -> dict:
    return {"workload": "tiny", "device": "cpu", "batch_size": 4, "rep": 0}


# ----------------------------------------------------------------------------- RAPL


def powercap(root: Path, energy: int, dram: int | None = 0, max_uj: int = 1000) -> Path:
    zone = root / "intel-rapl:0"
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (zone / "energy_uj").write_text(f"{energy}\n")
    if dram is not None:
        sub = root / "intel-rapl:0" / "intel-rapl:0:0"
        sub.mkdir(exist_ok=True)
        (sub / "name").write_text("dram\n")
        (sub / "max_energy_range_uj").write_text(f"{max_uj}\n")
        (sub / "energy_uj").write_text(f"{dram}\n")
    return zone


def test_rapl_wrap_around(tmp_path, clock):
    zone = powercap(tmp_path, energy=900, dram=10)
    source = counters.rapl_source(tmp_path, poll_seconds=None)
    assert set(source.methods) == {"cpu", "dram"} and "max_energy_range_uj" in source.methods["cpu"]
    device = CpuDevice()
    tracker = EnergyTracker(device, 1.0, sources=[source], idle_seconds=0)
    with TimedRegion(device, [tracker], TRAIN):
        clock.sleep(2.0)
        (zone / "energy_uj").write_text("100\n")  # wrapped: 900 -> 1000 = 0 -> 100
        (zone / "intel-rapl:0:0" / "energy_uj").write_text("60\n")
    energy = tracker.summary(samples=4)
    assert energy["domains"]["cpu"]["joules"] == pytest.approx(200e-6)
    assert energy["domains"]["dram"]["joules"] == pytest.approx(50e-6)
    assert energy["measured"] == "cpu+dram" and energy["total_joules"] == pytest.approx(250e-6)


def test_rapl_unreadable_is_unavailable_with_the_reason(tmp_path, monkeypatch):
    missing = counters.rapl_source(tmp_path / "absent", poll_seconds=None)
    assert missing.methods == {}
    assert missing.unavailable["cpu"].startswith(f"no {tmp_path / 'absent'} (no RAPL here")
    powercap(tmp_path, energy=5, dram=None)
    original = Path.read_text

    def denied(self, *args, **kwargs):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    source = counters.rapl_source(tmp_path, poll_seconds=None)
    assert source.unavailable["cpu"].startswith("RAPL files not readable (permission)")
    assert source.unavailable["dram"] == f"no RAPL dram zone in {tmp_path}"


def test_rapl_poller_reads_in_the_background(tmp_path):
    powercap(tmp_path, energy=1, dram=None)
    source = counters.rapl_source(tmp_path, poll_seconds=0.01)
    try:
        assert source.read()["cpu"] == 0.0
    finally:
        source.close()


# ----------------------------------------------------------------------------- IOReport


def fake_apple(clock: Clock, dram: bool = False):
    module = types.ModuleType("zeus_apple_silicon")

    class AppleEnergyMonitor:
        def get_cumulative_energy(self):
            mj = int(clock.t * 1000)  # 1 W a domain
            return types.SimpleNamespace(
                cpu_total_mj=mj, gpu_mj=2 * mj, ane_mj=0, dram_mj=mj if dram else None
            )

    module.AppleEnergyMonitor = AppleEnergyMonitor
    return module


def test_ioreport_domains_on_apple_silicon(monkeypatch, clock):
    monkeypatch.setitem(sys.modules, "zeus_apple_silicon", fake_apple(clock))
    device = CpuDevice()
    device.backend = "mps"
    sources = counters.open_sources(device, platform="darwin")
    tracker = EnergyTracker(device, 1.0, sources=sources, idle_seconds=0)
    region(tracker, device, 3.0, clock)
    energy = tracker.summary(samples=30)
    domains = energy["domains"]
    assert list(domains) == ["gpu", "cpu", "dram", "ane"]
    assert domains["cpu"]["joules"] == pytest.approx(3.0)
    assert domains["gpu"]["joules"] == pytest.approx(6.0) and domains["ane"]["joules"] == 0
    assert domains["dram"]["status"] == "unavailable" and "dram_mj" in domains["dram"]["reason"]
    assert energy["measured"] == "gpu+cpu+ane" and energy["joules_per_sample"] == pytest.approx(0.3)
    assert energy["reason"].startswith("not measured: dram: IOReport reports no dram_mj")


def test_macos_without_the_apple_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "zeus_apple_silicon", None)
    (source,) = counters.open_sources(CpuDevice(), platform="darwin")
    assert source.unavailable == dict.fromkeys(("cpu", "dram"), counters.NO_APPLE_EXTRA)


# ----------------------------------------------------------------------------- statistics


def cell(device: str, jps, rep0: int = 0, energy_domains: str = "cpu+dram", **values) -> list:
    return [
        run("wl", device, 32, rep0 + k, samples_per_s=100.0, energy_status="ok",
            joules_per_sample=float(v), samples_per_joule=1 / float(v),
            energy_domains=energy_domains, energy_window_seconds=5.0,
            **values)
        for k, v in enumerate(jps)
    ]  # fmt: skip


def table(rows: list[dict], baseline: str = "cpu") -> pd.DataFrame:
    return energy_table(pd.DataFrame(rows), {"wl": baseline})


def verdict_of(rows, device="cuda"):
    t = table(rows)
    return t.set_index("device").loc[device]


def test_energy_ratio_interval_and_verdicts():
    base = cell("cpu", [2.0, 2.1, 2.2])
    row = verdict_of(base + cell("cuda", [0.5, 0.6, 0.7], energy_domains="cpu+dram"))
    assert row["verdict"] == "more efficient" and row["energy_ratio"] == pytest.approx(0.6 / 2.1)
    assert row["energy_ratio_low"] == pytest.approx(0.5 / 2.2)
    assert row["energy_ratio_high"] == pytest.approx(0.7 / 2.0)
    assert row["energy_ratio_interval"] == "range of 3 vs 3 runs"
    assert row["interval"] == "range of 3 runs" and row["samples_per_joule"] == pytest.approx(
        1 / 0.6
    )
    assert verdict_of(base + cell("cuda", [3.0, 3.1, 3.2]))["verdict"] == "less efficient"
    assert verdict_of(base + cell("cuda", [1.9, 2.15, 2.3]))["verdict"] == "no clear difference"
    ci = verdict_of(cell("cpu", np.linspace(2, 2.4, 5)) + cell("cuda", np.linspace(1, 1.2, 5)))
    assert ci["energy_ratio_interval"].startswith("95%") and ci["verdict"] == "more efficient"
    other = verdict_of(base + cell("cuda", [0.5, 0.6, 0.7], energy_domains="gpu"))
    assert "not like for like: cuda measured gpu, cpu measured cpu+dram" in other["reason"]
    t = table(base)
    assert t.loc[0, "verdict"] == "baseline" and t.loc[0, "energy_ratio"] == 1.0


def test_unmeasured_energy_gives_insufficient_data_with_the_reason():
    base = cell("cpu", [2.0, 2.1, 2.2])
    short = base + cell("cuda", [0.5, 0.6]) + [
        run("wl", "cuda", 32, 2, samples_per_s=100.0, energy_status="short window",
            energy_window_seconds=0.4, energy_reason="energy window 0.4 s < 1 s")
    ]  # fmt: skip
    row = verdict_of(short)
    assert row["verdict"] == "insufficient data" and row["short_window_runs"] == 1
    assert row["reason"] == "short window: cuda rep 2 energy window 0.4 s"
    why = "cpu, dram: no /sys/class/powercap (no RAPL here)"
    blind = [run("wl", "cpu", 32, k, samples_per_s=9.0, energy_status="unavailable",
                 energy_reason=why) for k in range(3)]  # fmt: skip
    t = table(blind + cell("cuda", [0.5, 0.6, 0.7], energy_domains="gpu")).set_index("device")
    assert t.loc["cuda", "verdict"] == "insufficient data"
    assert t.loc["cuda", "reason"] == f"no energy measured on the baseline cpu: {why}"
    assert t.loc["cpu", "unavailable"] == f"energy unavailable on cpu: {why}"
    assert t.loc["cuda", "unavailable"] == "" and t.loc["cpu", "unavailable_runs"] == 3
    few = verdict_of(base + cell("cuda", [0.5, 0.6]))
    assert few["reason"] == "cuda has 2 measured repeats; a verdict needs 3"
    noisy = verdict_of(base + cell("cuda", [0.5, 0.6, 0.7], disturbed=True))
    assert noisy["verdict"] == "disturbed"
    mixed = verdict_of(
        base + cell("cuda", [0.5, 0.6], energy_domains="gpu") + cell("cuda", [0.7], 2)
    )
    assert mixed["reason"].startswith("the runs of cuda measured different domains")


def test_publish_has_the_energy_table():
    assert "energy" in PUBLISHED_TABLES
    out = publish({"runs": pd.DataFrame(cell("cpu", [1, 2, 3]))}, {"wl": ["cpu"]})
    assert list(out["energy"].columns) == COLUMNS["energy"] and len(out["energy"]) == 1
    old = publish({"runs": pd.DataFrame([run("wl", "cpu", 32, 0, samples_per_s=5.0)])}, {})
    assert old["energy"].loc[0, "unavailable"] == "energy unavailable on cpu: no energy recorded"


def test_record_columns():
    assert {"energy_joules", "joules_per_sample", "samples_per_joule", "energy_reason",
            "energy_window_seconds", "energy_gpu_joules", "energy_gpu_status"} <= set(RUN_COLUMNS)  # fmt: skip


# ----------------------------------------------------------------------------- figure, reports


def published() -> dict[str, pd.DataFrame]:
    why = "cpu, dram: no /sys/class/powercap (no RAPL here)"
    rows = []
    for bs in (32, 64):
        for k in range(3):
            rows.append(run("image_cnn", "cpu", bs, k, samples_per_s=100.0 + k,
                            energy_status="unavailable", energy_reason=why))  # fmt: skip
            rows += [
                {**r, "batch_size": bs, "samples_per_s": 300.0 * bs / 32 + k}
                for r in cell("cuda", [0.5 + k / 10], k, energy_domains="gpu")
            ]
    for row in rows:
        row["workload"] = "image_cnn"
    return publish({"runs": pd.DataFrame(rows)}, {"image_cnn": ["cpu", "cuda"]})


def test_energy_figure_renders_from_the_tables(tmp_path):
    tables = published()
    FIGURES["energy"](tables, tmp_path / "energy.png", dpi=60)
    FIGURES["energy"]({}, tmp_path / "empty.png", dpi=60)
    full, empty = (tmp_path / "energy.png").read_bytes(), (tmp_path / "empty.png").read_bytes()
    assert full[:8] == b"\x89PNG\r\n\x1a\n" and full != empty


def test_reports_show_unavailable_once_per_device(tmp_path):
    inputs = write_inputs(tmp_path, scenario())
    path = Path(inputs["speedup"]).with_name("energy.csv")
    published()["energy"].to_csv(path, index=False)
    inputs["energy"] = str(path)
    note = "energy unavailable on cpu: cpu, dram: no /sys/class/powercap (no RAPL here)"
    index = render_report(inputs, tmp_path / "results" / "report.md")
    workload = render_workload_report("image_cnn", inputs, tmp_path / "results" / "ic.md")
    for text in (index, workload):
        assert text.count("energy unavailable on cpu") == 1 and note in text
        assert "- **cuda**: measured gpu" in text
    energy = workload.split("## Energy", 1)[1].split("\n## ", 1)[0]
    assert "| cuda | 32 | 3 |" in energy and "| cpu |" not in energy
    assert "no energy measured on the baseline cpu" in energy
