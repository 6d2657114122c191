"""The names a record is written with that both halves read: the run side (launch/,
measure/) writes them, the analysis side (analysis/) reads them, so neither imports
the other for a word.

* the phases of an attempt's wall time (the record's ``wall_time.phases``;
  :mod:`trainbench.measure.wall_time` takes the marks and computes them);
* the prefix of the quality curve's wall-clock marks (``wall_time.marks['quality_<i>']``;
  :mod:`trainbench.measure.quality` takes them).

The precision classes and unit roundoffs a record is judged in are in
:mod:`trainbench.common.precision_classes`.
"""

from __future__ import annotations

# The phases of an attempt, in the order they happen; they add up to its duration.
PHASES = (
    "process_start_and_imports",
    "device_initialisation",
    "canary",
    "data_and_model_setup",
    "warmup",
    "timed_training",
    "extension",
    "evaluation",
    "step_breakdown",
    "eval_parity",
    "training_bookkeeping",
    "analysis",
    "writing",
    "exit",
    "unattributed",
)
# What is measurement; everything else is the cost of measuring.
MEASUREMENT = ("canary", "warmup", "timed_training", "extension", "evaluation")

# The quality curve's marks on the wall clock: ``quality_<index>``, one per evaluation pass.
MARK_PREFIX = "quality_"
