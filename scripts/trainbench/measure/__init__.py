"""The run side: one cell in its own process — launcher, child, training loop, trackers, canary, devices."""
