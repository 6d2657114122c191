"""``make mac-selftest`` (trainbench.evidence.mac): on a Mac with Apple silicon the CPU
against MPS through the workflow, then one file to send back; elsewhere a refusal that
points to ``make mps-ready``. No Mac exists here: the workflow run is stood in for,
the refusal and the file are real."""

from __future__ import annotations

import json
import tarfile

from helpers import REPO
from trainbench.evidence import mac


def _fake_results(results):
    (results / "runs/image_cnn/mps/bs32/rep0").mkdir(parents=True)
    (results / "runs/image_cnn/mps/bs32/rep0/metrics.json").write_text('{"status": "ok"}')
    (results / "tables").mkdir()
    (results / "tables/speed.csv").write_text("workload\nimage_cnn\n")
    (results / "report.md").write_text("# report\n")


def test_elsewhere_it_refuses_and_points_to_the_emulator(capsys):
    assert mac.mps_problem() is not None  # this is no Mac
    assert mac.run_selftest(REPO) == 2
    err = capsys.readouterr().err
    assert "needs macOS on Apple silicon with MPS" in err and "make mps-ready" in err


def test_the_file_to_send_holds_the_summary_report_and_records(tmp_path, monkeypatch):
    results = tmp_path / "results" / mac.RUN_NAME
    calls = []

    def workflow(command, log, cwd):
        calls.append(command)
        _fake_results(results)
        return 12.5

    monkeypatch.setattr(mac, "mps_problem", lambda: None)
    monkeypatch.setattr(mac, "run_logged", workflow)
    monkeypatch.setattr(mac, "records_code", lambda path: {"label": "source abc"})
    assert mac.run_selftest(tmp_path) == 0
    assert calls[0][-1] == "results/mac-selftest/report.md" and "--cores" in calls[0]
    [archive] = results.glob("trainbench-mac-selftest-*.tgz")
    assert not list(results.glob(".*.tmp"))  # written to a temp file, then renamed
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        summary = json.loads(tar.extractfile(mac.SUMMARY).read())
    assert names == {
        mac.SUMMARY,
        "report.md",
        "tables/speed.csv",
        "runs/image_cnn/mps/bs32/rep0/metrics.json",
    }
    assert summary["wall_seconds"] == 12.5 and summary["code"] == {"label": "source abc"}
    machine = summary["machine"]
    assert {"macos", "chip", "memory_bytes", "torch", "python", "power", "thermal"} <= set(machine)
    assert "cpu_core_levels" in machine
