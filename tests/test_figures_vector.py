"""Paper figures (report.figures): every family can be written as PDF or SVG at a
paper's size, with fonts in print points; drawing twice gives the same bytes (no
dates, producer or random ids, whatever SOURCE_DATE_EPOCH says); one column of panels
is one column wide, panels side by side span the text width."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from trainbench.analysis.figures import FIGURES, Paper, draw_figures, paper_from_config, style
from trainbench.analysis.figures import loss as loss_module

PAPER = {"width_in": 3.5, "wide_in": 7.16, "font_pt": 7.0, "max_height_in": 8.0}


def _tables() -> dict[str, pd.DataFrame]:
    """One workload, cpu (baseline) and cuda, two batch sizes, 3 repeats: a speedup
    table (one panel) and an epoch summary (a panel per batch size, side by side)."""
    speedup, epochs = [], []
    for bs in (32, 128):
        for device, ratio in (("cpu", 1.0), ("cuda", 6.0)):
            speedup.append({
                "workload": "image_cnn", "batch_size": bs, "device": device, "baseline": "cpu",
                "n": 3, "median": 100 * ratio, "low": 95 * ratio, "high": 104 * ratio,
                "interval": "range of 3 runs", "speedup": ratio, "speedup_low": ratio * 0.9,
                "speedup_high": ratio * 1.1, "speedup_interval": "range of 3 vs 3 runs",
                "verdict": "baseline" if device == "cpu" else "faster",
            })  # fmt: skip
            for epoch in (1, 2, 3):
                loss = 2.0 / epoch
                epochs.append({
                    "workload": "image_cnn", "device": device, "batch_size": bs,
                    "epoch": epoch, "n": 3, "train_loss": loss,
                    "train_loss_min": loss * 0.97, "train_loss_max": loss * 1.03,
                })  # fmt: skip
    return {"speedup": pd.DataFrame(speedup), "epoch_summary": pd.DataFrame(epochs)}


def _pdf_width_pt(data: bytes) -> float:
    box = re.search(rb"/MediaBox \[\s*0 0 ([0-9.]+) ([0-9.]+)\s*\]", data)
    assert box, "no MediaBox"
    return float(box.group(1))


@pytest.mark.parametrize("fmt", ["pdf", "svg"])
def test_drawing_twice_gives_the_same_bytes(tmp_path, fmt, monkeypatch):
    tables = _tables()
    names = ("speedup", "loss")
    first = {n: tmp_path / "a" / f"{n}.{fmt}" for n in names}
    second = {n: tmp_path / "b" / f"{n}.{fmt}" for n in names}
    draw_figures(tables, first, paper=PAPER)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1234567890")  # a date must not get in
    draw_figures(tables, second, workers=2, paper=PAPER)
    for name in names:
        data = first[name].read_bytes()
        assert data == second[name].read_bytes(), name
        if fmt == "pdf":
            assert data.startswith(b"%PDF")
            for key in (b"/CreationDate", b"/ModDate", b"/Producer", b"/Creator"):
                assert key not in data, (name, key)
            assert b"/FontFile2" in data  # TrueType (pdf.fonttype 42), not Type 3
            assert b"/Subtype /Type3" not in data
        else:
            text = data.decode()
            assert text.startswith("<?xml")
            assert "<dc:date>" not in text
            assert 'width="252pt"' in text or 'width="515.52pt"' in text, name


def test_paper_widths_follow_the_panels(tmp_path):
    """The speedup figure stacks its panels: one column (3.5 in); loss sets batch sizes
    side by side: the text width (7.16 in)."""
    tables = _tables()
    paths = {n: tmp_path / f"{n}.pdf" for n in ("speedup", "loss")}
    draw_figures(tables, paths, paper=PAPER)
    assert _pdf_width_pt(paths["speedup"].read_bytes()) == pytest.approx(3.5 * 72)
    assert _pdf_width_pt(paths["loss"].read_bytes()) == pytest.approx(7.16 * 72)
    screen = tmp_path / "screen.pdf"
    FIGURES["speedup"](tables, screen)  # no paper: the screen size, far wider
    assert _pdf_width_pt(screen.read_bytes()) > 7.16 * 72


def test_fonts_are_in_print_points():
    st = style.make_style({"paper": PAPER})
    assert st.font_scale == pytest.approx(7.0 / style.BASE_TICK_PT)
    fig = style.build_figure(lambda s: loss_module.build(_tables(), s), {"paper": PAPER})
    sizes = {t.get_fontsize() for ax in fig.axes for t in ax.get_xticklabels()}
    assert sizes and all(s == pytest.approx(7.0) for s in sizes), sizes
    # the device legend went under the panels and made the figure no taller than allowed
    assert fig.legends and fig.get_size_inches()[1] <= PAPER["max_height_in"]
    style.plt.close(fig)


def test_message_figure_at_paper_size(tmp_path):
    path = tmp_path / "speedup.pdf"
    FIGURES["speedup"]({}, path, paper=PAPER)
    assert _pdf_width_pt(path.read_bytes()) == pytest.approx(3.5 * 72)


def test_paper_from_config():
    assert paper_from_config({"vector": "none"}) is None
    assert paper_from_config({}) == Paper()
    got = paper_from_config({"vector": "svg", "paper_width_in": 3.33, "font_pt": 8})
    assert (got.width_in, got.font_pt, got.wide_in) == (3.33, 8.0, 7.16)


def test_schema_defaults_match_the_paper_defaults():
    """The config's defaults (schema) and the drawing's (Paper) are the same numbers."""
    from trainbench.config import load_schema

    props = load_schema()["$defs"]["report"]["properties"]["figures"]["properties"]
    defaults = Paper()
    assert props["vector"]["default"] == "pdf"
    assert props["paper_width_in"]["default"] == defaults.width_in
    assert props["paper_wide_in"]["default"] == defaults.wide_in
    assert props["font_pt"]["default"] == defaults.font_pt
    assert props["max_height_in"]["default"] == defaults.max_height_in


def test_merged_device_labels_are_wrapped_and_leave_the_panels_room(tmp_path):
    """Merged results' labels (`cpu@AMD EPYC · torch 2.5.1+cu124`) are wider than a
    column allows beside a panel: wrapped at their separators, with the height they add,
    so matplotlib's constrained layout still places the panels (it gives up, with a
    warning, and lays the legend over them, when tick labels leave no width)."""
    import warnings

    from trainbench.analysis.figures.paper import wrap_label

    assert wrap_label("cpu@AMD EPYC · torch 2.5.1+cu124", 16) == (
        "cpu@AMD EPYC\n· torch\n2.5.1+cu124"
    )
    assert wrap_label("cuda", 16) == "cuda"
    tables = _tables()
    long = {
        "cpu": "cpu@AMD EPYC 7B13 · torch 2.13.0+cpu",
        "cuda": "cpu@AMD EPYC 7B13 · torch 2.5.1+cu124",
    }
    for frame in tables.values():
        frame["device"] = frame["device"].map(long)
    tables["speedup"]["baseline"] = long["cpu"]
    other = tables["speedup"]["device"] == long["cuda"]
    tables["speedup"].loc[other, "verdict"] = "no clear difference"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied" fails the test
        draw_figures(tables, {"speedup": tmp_path / "speedup.pdf"}, paper=PAPER)
    assert (tmp_path / "speedup.pdf").stat().st_size > 0
