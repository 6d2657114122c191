"""The behaviour fingerprint of measurement code, now in :mod:`trainbench.common.behaviour`
(the launcher names it in every record, and the run side may not import ``evidence``);
re-exported here for the evidence folders' code and checks."""

from __future__ import annotations

from trainbench.common.behaviour import (  # noqa: F401 - re-exported
    METHOD,
    VERSION,
    changed,
    digest,
    fingerprint,
    stable_dump,
    units,
)
