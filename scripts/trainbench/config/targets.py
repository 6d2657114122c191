"""Quality targets: which evaluation metrics each bundled workload reports, their range
and direction, and the check of ``workloads.<name>.target`` before any job runs.

A target is read only by the analysis (time to target, docs/statistics.md §4): changing
it reruns no cell. Its metric defaults to the workload's primary metric; whether higher
or lower is better comes from the workload, never from the config.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """An evaluation metric: its closed range and its direction."""

    low: float
    high: float
    higher_is_better: bool = True

    def range_text(self) -> str:
        high = "∞" if math.isinf(self.high) else f"{self.high:g}"
        return f"[{self.low:g}, {high}]"


_SHARE = Metric(0.0, 1.0)
_LOSS = Metric(0.0, math.inf, higher_is_better=False)

# name -> metric; a key ending in "@k" stands for every "<name>@<integer>".
BUNDLED_METRICS: dict[str, dict[str, Metric]] = {
    "image_cnn": {"accuracy": _SHARE, "loss": _LOSS},
    "text_multilabel": {
        "micro_f1": _SHARE,
        "macro_f1": _SHARE,
        "subset_accuracy": _SHARE,
        "loss": _LOSS,
    },
    "clip": {
        **{f"{kind}_top{k}": _SHARE for kind in ("retrieval", "i2t", "t2i") for k in (1, 5)},
        "loss": _LOSS,
    },
    "two_tower": {"mrr": _SHARE, "recall@k": _SHARE},
}
PRIMARY_METRICS = {
    "image_cnn": "accuracy",
    "text_multilabel": "micro_f1",
    "clip": "retrieval_top1",
    "two_tower": "mrr",
}
_AT_K = re.compile(r"^(?P<name>[A-Za-z_]+)@(?P<k>[1-9][0-9]*)$")


def metric_of(workload: str, name: str) -> Metric | None:
    """The bundled ``workload``'s metric ``name`` (None: it does not report it, or the
    workload is not bundled)."""
    metrics = BUNDLED_METRICS.get(workload)
    if metrics is None:
        return None
    if name in metrics:
        return metrics[name]
    at_k = _AT_K.match(name)
    return metrics.get(f"{at_k['name']}@k") if at_k else None


def target_metric(workload: str, target: dict) -> str | None:
    """The target's metric: its own, else the bundled workload's primary one (None for
    your own workload, whose primary metric is known only once it is built)."""
    return target.get("metric") or PRIMARY_METRICS.get(workload)


def target_problems(config: dict) -> list[str]:
    """A target naming a metric the bundled workload does not report, or a value outside
    the metric's range; one message each, naming the key and the fix."""
    problems = []
    for name, wl in config["workloads"].items():
        target = wl.get("target")
        if not target or name not in BUNDLED_METRICS:
            continue
        key = f"workloads.{name}.target"
        metric_name = target_metric(name, target)
        metric = metric_of(name, metric_name)
        known = ", ".join(sorted(BUNDLED_METRICS[name]))
        if metric is None:
            problems.append(
                f"`{key}.metric` is {metric_name!r}, which {name} does not report. "
                f"Fix: name one of its metrics ({known}; recall@k: a k it ranks), or leave "
                f"metric out for its primary metric ({PRIMARY_METRICS[name]})."
            )
            continue
        value = target["value"]
        if not metric.low <= value <= metric.high:
            problems.append(
                f"`{key}.value` is {value:g}, outside {metric_name}'s range "
                f"{metric.range_text()}. Fix: a value in that range."
            )
    return problems
