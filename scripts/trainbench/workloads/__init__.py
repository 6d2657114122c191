"""The bundled workloads (one module each, built on trainbench.measure.training), and
their registry's names re-exported from :mod:`trainbench.config.registry` (the
config's catalogue of workloads, below the run side)."""

from trainbench.config.registry import (
    WORKLOADS,
    WorkloadInfo,
    custom_info,
    get,
    info,
    load_entry,
)

__all__ = ["WORKLOADS", "WorkloadInfo", "custom_info", "get", "info", "load_entry"]
