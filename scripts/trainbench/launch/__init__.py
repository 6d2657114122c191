"""The cell's process: start it, guard it, classify how it ended and write its record.

The launcher (attempts, retries, the record), the fork server and its client, the child's
entry (``python -m trainbench.launch.child``: canary, then :mod:`.dispatch` hands over to
the measurement in :mod:`trainbench.measure`), the cell lock and watchdog, the child's
environment and the host's facts, the availability memo, the float64 reference's launch,
reruns of failed cells and recovery after a killed run, Snakemake's scheduler timers kept
to one pending (:mod:`.scheduler_passes`), and ``make mps-ready``'s short
cells on the MPS emulator (:mod:`.readiness`). Nothing here imports torch at module
level: the launcher must outlive any crash of its child.
"""
