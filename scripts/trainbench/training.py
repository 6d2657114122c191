"""Deprecated import path (an earlier README's own-model example): use
``from trainbench import TrainingParts``."""

import warnings

from trainbench.measure.parts import TrainingParts

warnings.warn(
    "trainbench.training is deprecated and will be removed; use "
    "`from trainbench import TrainingParts`",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["TrainingParts"]
