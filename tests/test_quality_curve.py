"""The quality curve (trainbench.measure.quality): an evaluation pass at the configured
cadence, each a point of metrics against the timed training seconds, samples and steps,
taken outside every timed region."""

from __future__ import annotations

import pytest
import torch
from test_tracking import FakeDevice, _context, _parts, _spec
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainbench.measure import quality
from trainbench.measure.training import run_training


def _run_with(eval_every: dict | None, steps: int = 8, epochs: int = 3, accumulation: int = 1):
    device = FakeDevice()
    spec = _spec(steps, epochs=epochs, accumulation=accumulation)
    if eval_every is None:
        del spec["timing"]["eval_every"]  # the default cadence
    else:
        spec["timing"]["eval_every"] = eval_every
    spec["timing"]["max_eval_passes"] = 50
    return run_training(_parts(steps), _context(spec, device)), device


def test_every_epoch_one_point_per_epoch():
    result, _ = _run_with({"epochs": 1})
    quality = result["quality"]
    assert quality["eval_every"] == {"epochs": 1}
    points = quality["points"]
    assert [p["epoch"] for p in points] == [1, 2, 3]
    assert [p["steps"] for p in points] == [8, 16, 24]
    assert [p["samples"] for p in points] == [32, 64, 96]
    assert all(p["epoch_end"] for p in points)
    assert all(p["metrics"] == {"mse": 0.5} for p in points)
    # The timed regions' seconds so far: non-decreasing, the last equal to all of them
    # (step 0 is outside every region).
    seconds = [p["train_seconds"] for p in points]
    assert seconds == sorted(seconds) and seconds[0] > 0
    flat = [s for epoch in result["steps"]["seconds"] for s in epoch]
    assert seconds[-1] == pytest.approx(sum(flat[1:]), rel=0.5)
    assert all(p["train_joules"] is None for p in points)  # no energy counter on FakeDevice


@pytest.mark.parametrize(
    ("steps", "epochs", "per_epoch", "points"),
    [
        (8, 3, 3, [3, 5, 8, 11, 13, 16, 19, 21, 24]),  # ceil(8 / 3) = 3 an epoch: 9 passes
        (8, 2, 4, [2, 4, 6, 8, 10, 12, 14, 16]),  # 4 an epoch: 8 passes
        (5, 1, 5, [1, 2, 3, 4, 5]),  # fewer steps than passes: every step
        (10, 2, 4, [2, 5, 8, 10, 12, 15, 18, 20]),  # 2.5 steps apart, rounded
    ],
)
def test_default_cadence_is_at_least_8_passes_evenly_spaced(steps, epochs, per_epoch, points):
    result, _ = _run_with(None, steps=steps, epochs=epochs)
    quality = result["quality"]
    assert quality["eval_every"] == {"per_epoch": per_epoch}
    assert quality["configured"] == {"passes": 8}
    assert [p["steps"] for p in quality["points"]] == points
    # Every epoch ends with a pass: the per-epoch tables keep their evaluation.
    assert [p["steps"] for p in quality["points"] if p["epoch_end"]] == [
        steps * (e + 1) for e in range(epochs)
    ]
    assert all(e["eval_metrics"] is not None for e in result["epochs"])
    assert "evaluations per epoch" in quality["granularity"]


def test_a_dense_curve_still_calibrates_a_short_evaluation_window():
    # 24 curve passes, more than max_eval_passes (here 5): the cap counts the
    # calibration's own passes alone. 5 of them cannot reach 1e9 s, so none is timed
    # and the evaluation speed is not measured.
    device = FakeDevice()
    spec = _spec(8, epochs=3)
    spec["timing"]["eval_every"] = {"steps": 1}
    spec["timing"]["max_eval_passes"] = 5
    spec["timing"]["min_timed_seconds"] = 1e9
    result = run_training(_parts(8), _context(spec, device))
    evaluation = result["eval"]
    assert len(evaluation["passes"]) == 24
    assert "timing.max_eval_passes allows 5 more" in evaluation["calibration"]["out_of_reach"]
    assert evaluation["samples_per_s"] is None


def test_every_second_epoch_and_the_last_always():
    result, _ = _run_with({"epochs": 2}, epochs=3)
    assert [p["epoch"] for p in result["quality"]["points"]] == [2, 3]
    first = result["epochs"][0]
    assert first["eval_metrics"] is None and first["eval_seconds"] is None
    assert result["epochs"][1]["eval_metrics"] == {"mse": 0.5}
    assert result["task"]["final"] == 0.5


def test_every_n_steps_splits_the_epoch_into_regions():
    result, device = _run_with({"steps": 3}, steps=8, epochs=2)
    points = result["quality"]["points"]
    # Every 3rd step (3, 6, 9, 12, 15) and the end of the last epoch (16).
    assert [p["steps"] for p in points] == [3, 6, 9, 12, 15, 16]
    assert [p["epoch"] for p in points] == [1, 1, 2, 2, 2, 2]
    assert [p["epoch_end"] for p in points] == [False, False, False, False, False, True]
    # Every step ran once, in order; each epoch keeps all its step times.
    assert [len(e) for e in result["steps"]["seconds"]] == [8, 8]
    assert result["timed"]["steps"] == 16 - 2
    assert "every 3 steps" in result["quality"]["granularity"]


def test_an_epochs_stretches_are_planned_from_values_alone():
    """The loop asks quality.stretches where its evaluation passes fall: the run's
    steps so far, the epoch's length and the cadence, nothing of the loop itself."""
    # Epoch 1 of 8 steps, every 3: passes after steps 3 and 6, the epoch's end unevaluated.
    assert quality.stretches(0, 8, 3, False) == [(0, 3, True), (3, 6, True), (6, 8, False)]
    # Epoch 2 (8 steps done): passes after run steps 9, 12, 15; the last at the epoch's end.
    assert quality.stretches(8, 8, 3, True) == [(0, 1, True), (1, 4, True), (4, 7, True),
                                                (7, 8, False)]  # fmt: skip
    # A pass that falls on the epoch's last step is left to the epoch's end.
    assert quality.stretches(0, 6, 3, True) == [(0, 3, True), (3, 6, False)]
    assert quality.stretches(0, 6, 3, False) == [(0, 3, True), (3, 6, True)]


def test_step_cadence_keeps_gradient_accumulation_boundaries():
    # 8 micro-steps, accumulation 4, evaluation every 3: the optimizer still steps at
    # micro-steps 4 and 8 of every epoch.
    optimizer_steps: list = []
    device = FakeDevice()
    spec = _spec(8, epochs=1, accumulation=4)
    spec["timing"]["eval_every"] = {"steps": 3}
    parts = _parts(8, optimizer_steps=optimizer_steps)
    run_training(parts, _context(spec, device))
    assert len(optimizer_steps) == 2


def test_the_cadence_does_not_change_the_training_it_measures():
    # Dropout draws from the CPU generator, and so does every DataLoader iteration of
    # the evaluation (its base seed). Each pass leaves the generators as it found them:
    # the final weights are the same whether the curve has 1 point or 24.
    def final_weights(eval_every: dict) -> torch.Tensor:
        torch.manual_seed(0)
        parts = _parts(8)
        parts.model = nn.Sequential(nn.Linear(3, 16), nn.Dropout(0.5), nn.Linear(16, 1))
        parts.optimizer = torch.optim.SGD(parts.model.parameters(), lr=0.01)
        parts.eval_loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)

        def evaluate(model, loader, ctx):
            for (x,) in loader:
                model(x)
            return {"metrics": {"mse": 0.5}, "samples": 8}

        parts.evaluate = evaluate
        spec = _spec(8, epochs=3)
        spec["timing"]["eval_every"] = eval_every
        run_training(parts, _context(spec, FakeDevice()))
        return torch.cat([p.detach().flatten() for p in parts.model.parameters()])

    sparse, dense = final_weights({"epochs": 3}), final_weights({"steps": 1})
    assert torch.equal(sparse, dense)
