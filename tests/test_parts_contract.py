"""An own model's evaluation contract (trainbench.measure.parts_contract), in process:
``evaluate`` has two documented forms, ``{"metrics": {...}, "samples": n}`` with no
``score``, or ``{"outputs": ..., "samples": n}`` with ``score(outputs) -> metrics``.
Every mismatch of the two is one constructed case below, and each must fail as the
child reports it (class ``bad_input``), with a message naming the entry, the function,
what it returned, the two forms, the fix and the contract; never ``unknown``.
The same breaks through a whole cell (run_cell): tests/test_bad_input.py (slow)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_tracking import FakeDevice, _context, _parts, _spec
from trainbench.launch.child import _exception_info
from trainbench.launch.classify import classify
from trainbench.measure.parts_contract import (
    CONTRACT,
    BadInputError,
    CheckedScore,
    check_evaluation,
    check_parts,
)
from trainbench.measure.training import run_training

ENTRY = "my_model:build"
EVALUATE = "evaluate(model, loader, ctx)"
SCORE = "score(outputs)"
CTX = SimpleNamespace(spec={"cell": {"workload": "mine"}}, workload_settings={"entry": ENTRY})
PARTS = SimpleNamespace(primary_metric="accuracy")


def a_score(outputs):
    return {"accuracy": 0.5}


def logits():
    return {"logits": torch.zeros(4, 2)}


def assert_named_bad_input(error: BaseException, function: str, *fragments: str) -> None:
    """Classified as the launcher classifies the child's exception: bad_input, with the
    entry, the function, the two forms, the fix and the contract in the message."""
    found = classify(**{k: v for k, v in _exception_info(error).items() if k != "traceback"})
    assert found.error_class == "bad_input", error
    message = str(error)
    for fragment in (f"`workloads.mine.entry` {ENTRY!r}", function, "has two forms",
                     "with no score", "with a score function", "Fix:", CONTRACT, *fragments):  # fmt: skip
        assert fragment in message, (fragment, message)


# What evaluate returned, whether a score is given, and what its message must hold.
EVALUATIONS = {
    "not_a_dict": ([0.5], None, "returned a builtins.list, not a dict"),
    "metrics_and_score": (
        {"metrics": {"accuracy": 0.5}, "samples": 4}, a_score,
        "returned metrics (a dict with keys ['metrics', 'samples']) while TrainingParts has "
        "a score function", "Fix: drop score=...",
    ),
    "outputs_without_score": (
        {"outputs": logits(), "samples": 4}, None,
        "returned outputs (a dict with keys ['outputs', 'samples']) but TrainingParts has no "
        "score function", "Fix: pass score=...",
    ),
    "both_forms": ({"metrics": {"accuracy": 0.5}, "outputs": logits(), "samples": 4}, a_score,
                   "returned both 'metrics' and 'outputs'", "one form, not both"),
    "neither_with_score": ({"logits": logits(), "samples": 4}, a_score,
                           "returned neither 'metrics' nor 'outputs'", "'logits'",
                           "for your score function"),
    "neither_without_score": ({"accuracy": 0.5, "samples": 4}, None,
                              "returned neither 'metrics' nor 'outputs'",
                              "no metric 'accuracy'", "Fix: return {'metrics'"),
    "outputs_none": ({"outputs": None, "samples": 4}, a_score, "returned outputs None"),
    "no_samples": ({"metrics": {"accuracy": 0.5}}, None, "returned no 'samples'"),
    "samples_a_float": ({"metrics": {"accuracy": 0.5}, "samples": 4.0}, None,
                        "returned a builtins.float 4.0 as 'samples'", "not a count"),
    "samples_negative": ({"outputs": logits(), "samples": -1}, a_score,
                         "returned a builtins.int -1 as 'samples'"),
    "samples_a_tensor": ({"metrics": {"accuracy": 0.5}, "samples": torch.tensor(4)}, None,
                         "returned a torch.Tensor as 'samples'"),
    "metrics_a_list": ({"metrics": [0.5], "samples": 4}, None,
                       f"the metrics {EVALUATE} returned are a builtins.list, not a dict"),
    "metrics_none": ({"metrics": None, "samples": 4}, None,
                     f"the metrics {EVALUATE} returned are None"),
    "primary_missing": ({"metrics": {"acc": 0.5}, "samples": 4}, None,
                        "hold no metric 'accuracy' (the primary_metric; its metrics: ['acc'])"),
    "primary_a_string": ({"metrics": {"accuracy": "0.5"}, "samples": 4}, None,
                         "hold 'accuracy' as a builtins.str, not a number"),
    "primary_a_tensor": ({"metrics": {"accuracy": torch.tensor(0.5)}, "samples": 4}, None,
                         "hold 'accuracy' as a torch.Tensor, not a number", "x.item()"),
    "primary_a_bool": ({"metrics": {"accuracy": True}, "samples": 4}, None,
                       "hold 'accuracy' as a builtins.bool"),
    "another_metric_a_numpy_float32": (
        {"metrics": {"accuracy": 0.5, "per_label": [{"f1": np.float32(0.5)}]}, "samples": 4},
        None, "hold metrics.per_label[0].f1 as a numpy.float32, which a record cannot hold",
    ),
    "metric_keys_not_strings": ({"metrics": {"accuracy": 0.5, "by_class": {0: 0.5}},
                                 "samples": 4}, None, "hold metrics.by_class as a builtins.dict"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(EVALUATIONS))
def test_every_mismatch_of_the_two_forms_is_a_named_bad_input(case):
    evaluation, score, *fragments = EVALUATIONS[case]
    with pytest.raises(BadInputError) as raised:
        check_evaluation(evaluation, PARTS, CTX, score)
    assert_named_bad_input(raised.value, EVALUATE, *fragments)


# What score(outputs) returned, and what its message must hold.
SCORES = {
    "none": (None, f"the metrics {SCORE} returned are None, not a dict of metrics"),
    "a_float": (0.5, f"the metrics {SCORE} returned are a builtins.float"),
    "primary_missing": ({"acc": 0.5}, "hold no metric 'accuracy'"),
    "primary_a_tensor": ({"accuracy": torch.tensor(0.5)}, "hold 'accuracy' as a torch.Tensor"),
    "another_metric_an_array": ({"accuracy": 0.5, "curve": np.zeros(3)},
                                "hold metrics.curve as a numpy.ndarray"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SCORES))
def test_what_score_returns_is_checked_on_every_call(case):
    returned, *fragments = SCORES[case]
    checked = CheckedScore(
        lambda outputs: returned, "accuracy", f"`workloads.mine.entry` {ENTRY!r}"
    )
    with pytest.raises(BadInputError) as raised:
        checked(logits())
    assert_named_bad_input(raised.value, SCORE, *fragments)


@pytest.mark.parametrize(
    "evaluation",
    [
        {"metrics": {"accuracy": 0.5}, "samples": 4},
        {"metrics": {"accuracy": math.nan, "loss": np.float64(0.1), "n": 3}, "samples": 0},
        {"metrics": {"accuracy": 1, "per_label": [{"label": "a", "f1": 0.5, "x": None}]},
         "samples": np.int64(4).item()},
    ],
)  # fmt: skip
def test_the_metrics_form_without_score_is_accepted(evaluation):
    check_evaluation(evaluation, PARTS, CTX, None)
    with pytest.raises(BadInputError):  # and the same with a score given is not
        check_evaluation(evaluation, PARTS, CTX, a_score)


def test_the_outputs_form_with_score_is_accepted_and_score_passes_its_metrics_through():
    evaluation = {"outputs": (torch.zeros(4, 2), torch.zeros(4)), "samples": 4}
    check_evaluation(evaluation, PARTS, CTX, a_score)
    metrics = {"accuracy": 0.25, "per_label": [{"f1": 0.5}]}
    assert CheckedScore(lambda outputs: metrics, "accuracy", "x")(evaluation) is metrics
    with pytest.raises(BadInputError):  # and the same without a score is not
        check_evaluation(evaluation, PARTS, CTX, None)


@pytest.mark.parametrize(
    ("part", "value", "fragment"),
    [
        ("score", "accuracy", "whose score is a builtins.str, not None or a callable"),
        ("finish", {}, "whose finish is a builtins.dict"),
        ("higher_is_better", "yes", "whose higher_is_better is a builtins.str"),
    ],
)
def test_the_optional_parts_are_checked_before_anything_runs(part, value, fragment):
    parts = _parts(2)
    setattr(parts, part, value)
    with pytest.raises(BadInputError) as raised:
        check_parts(parts, _context(_spec(2), FakeDevice()))
    message = str(raised.value)
    assert fragment in message and CONTRACT in message, message
    assert classify(exception_type="BadInputError", message=message).error_class == "bad_input"


def test_metrics_with_a_score_fail_on_the_first_evaluation_before_score_is_called():
    """The report that started this: evaluate returned metrics and a score was given,
    and the score's ``outputs["logits"]`` met None (`unknown — TypeError: 'NoneType'
    object is not subscriptable`). Through the loop as dispatch runs it: check_parts,
    then run_training."""
    called = []

    def score(outputs):
        called.append(outputs)
        return {"mse": float(outputs["logits"].mean())}

    parts = _parts(2)
    parts.score = score
    ctx = _context(_spec(2, epochs=2), FakeDevice())
    check_parts(parts, ctx)
    with pytest.raises(BadInputError) as raised:
        run_training(parts, ctx)
    assert called == []
    assert "the bundled workload 'tiny': evaluate(model, loader, ctx) returned metrics" in str(
        raised.value
    )
    assert "while TrainingParts has a score function" in str(raised.value)


def test_a_score_without_the_primary_metric_fails_in_the_loop():
    parts = _parts(2)
    parts.evaluate = lambda model, loader, ctx: {"outputs": torch.zeros(2), "samples": 2}
    parts.score = lambda outputs: {"accuracy": 1.0}
    ctx = _context(_spec(2), FakeDevice())
    check_parts(parts, ctx)
    with pytest.raises(BadInputError, match=r"score\(outputs\) returned hold no metric 'mse'"):
        run_training(parts, ctx)
