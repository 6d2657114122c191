"""The measurement inside a cell's process: the training loop and what it measures with.

The training loop (:mod:`.training`) and its helpers, the trackers, measurement windows
and steady state, the canary, evaluation parity, the quality curve, the step breakdown,
the float64 reference run, wall-time marks, devices, data and the context a workload
sees, fault injection. It never starts a process: that is :mod:`trainbench.launch`.
"""
