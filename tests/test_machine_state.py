"""A record that ran on battery, in Low Power Mode, or with more torch threads than the
Mac's performance cores says so in the warnings table, from its own host facts
(trainbench.analysis.stats.machine_state); a record without those facts (Linux, a
desktop, a record written before them) flags nothing."""

from __future__ import annotations

from test_aggregate import record
from trainbench.analysis.aggregate import build_tables
from trainbench.analysis.stats import quality

M2_PRO = {"levels": 2, "performance_cores": 6, "efficiency_cores": 4}
PLUGGED_IN = {"source": "AC", "battery_percent": 100.0, "low_power_mode": False}


def mac_record(device: str, rep: int, threads: int, power: dict, cores: dict = M2_PRO) -> dict:
    rec = record(device=device, rep=rep)
    rec["environment"].update(cpu_core_levels=cores, power=power)
    rec["settings_in_force"] = {"torch_threads": threads}
    return rec


def warnings_of(records: list[dict]) -> list[tuple[str, str, int, str]]:
    runs = build_tables([(f"r{i}.json", r) for i, r in enumerate(records)])["runs"]
    table = quality.warnings_table(runs)
    return [(r.kind, r.device, int(r.rep), r.detail) for r in table.itertuples()]


def test_battery_low_power_mode_and_threads_beyond_the_performance_cores_are_warned():
    records = [
        mac_record("cpu-t8", 0, 8, PLUGGED_IN),
        mac_record("cpu", 1, 6, {"source": "battery", "battery_percent": 42.0}),
        mac_record("cpu", 2, 6, {**PLUGGED_IN, "low_power_mode": True}),
        mac_record("cpu-t6", 3, 6, PLUGGED_IN),  # at the performance cores: nothing
    ]
    assert warnings_of(records) == [
        ("on battery", "cpu", 1, "ran on battery power (42% charge when the record was "
         "written): plug the machine in and rerun for a careful benchmark"),
        ("low power mode", "cpu", 2, "ran in Low Power Mode (pmset), which lowers the clock "
         "speed: turn it off in System Settings > Battery and rerun"),
        ("threads beyond performance cores", "cpu-t8", 0, "cpu-t8 uses 8 threads but this Mac "
         "has 6 performance cores: threads beyond them run on its 4 efficiency cores, which "
         "are slower, or wait (macOS cannot pin a thread to a core); use at most 6 threads "
         "(cpu-t6) to measure the performance cores alone"),
    ]  # fmt: skip
    runs = build_tables([("r.json", records[1])])["runs"]
    assert runs.loc[0, ["performance_cores", "efficiency_cores", "power_source"]].tolist() == [
        6, 4, "battery"
    ]  # fmt: skip


def test_without_efficiency_cores_or_host_facts_nothing_is_flagged():
    one_kind = {"levels": 1, "performance_cores": 4, "efficiency_cores": None}
    records = [
        mac_record("cpu-t8", 0, 8, PLUGGED_IN, cores=one_kind),  # an Intel Mac
        mac_record("cpu-t8", 1, 8, {"source": None}, cores=None),  # Linux, no battery
        record(device="cpu", rep=2),  # a record written before these facts
    ]
    assert warnings_of(records) == []
