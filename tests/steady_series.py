"""Synthetic step-time series for the steady-state tests (tests/test_steady.py).

Each family takes a numpy Generator and a length and returns step times in
seconds. Stationary families are jitter as GPUs and busy hosts show it: levels that
wander (AR(1) in log time), switch between regimes, alternate between two modes,
or carry heavy-tailed and periodic slow steps. The others have a warm-up, a
slowdown or a drift of known size and place.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

BASE = 0.005  # 5 ms, the order of a small CUDA step


def iid(rng: np.random.Generator, n: int, sd: float = 0.03) -> np.ndarray:
    return BASE * np.exp(sd * rng.standard_normal(n))


def ar1_log(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """Log step time an AR(1) with coefficient ``phi`` and marginal sd ``sd``, started
    in its stationary distribution."""
    e = rng.standard_normal(n) * sd * np.sqrt(1 - phi**2)
    e[0] = sd * rng.standard_normal()
    return BASE * np.exp(lfilter([1.0], [1.0, -phi], e))


def regimes(
    rng: np.random.Generator,
    n: int,
    levels: tuple[float, ...] = (0.004, 0.008),
    dwell: float = 30.0,
    sd: float = 0.05,
) -> np.ndarray:
    """A Markov chain over ``levels`` (seconds) that leaves its level after a
    geometric number of steps with mean ``dwell``, to another level at random."""
    dwells = rng.geometric(1 / dwell, size=n)  # more runs than the series can hold
    states = [int(rng.integers(len(levels)))]
    for step in rng.integers(1, len(levels), size=n - 1):  # to any other level
        states.append((states[-1] + int(step)) % len(levels))
    out = np.repeat(np.asarray(levels)[states], dwells)[:n]
    return out * np.exp(sd * rng.standard_normal(n))


def wander_4_to_9ms(rng: np.random.Generator, n: int) -> np.ndarray:
    """The H100 issue's series: step times wandering between about 4 and 9 ms,
    regime-like (levels 4, 5.5, 7, 9 ms, a few dozen steps each), with heavy-tailed
    single slow steps on top."""
    x = regimes(rng, n, levels=(0.004, 0.0055, 0.007, 0.009), dwell=40.0, sd=0.08)
    spikes = rng.random(n) < 0.02
    x[spikes] *= 1 + rng.pareto(2.0, spikes.sum())
    return x


def heavy_tails(rng: np.random.Generator, n: int) -> np.ndarray:
    """3% log-normal jitter, and 5% of steps slower by a Pareto (alpha 1.5) factor."""
    x = iid(rng, n)
    slow = rng.random(n) < 0.05
    x[slow] *= 1 + rng.pareto(1.5, slow.sum())
    return x


def periodic_spikes(rng: np.random.Generator, n: int, every: int = 25, factor: float = 4.0):
    """One slow step every ``every`` steps (a data-loader refill, a logging step)."""
    x = iid(rng, n)
    x[int(rng.integers(every)) :: every] *= factor
    return x


def bimodal(rng: np.random.Generator, n: int, share: float = 0.4) -> np.ndarray:
    """Each step independently in the slow mode (twice as long) with probability
    ``share``: two modes, no order."""
    return iid(rng, n) * np.where(rng.random(n) < share, 2.0, 1.0)


def alternating(rng: np.random.Generator, n: int) -> np.ndarray:
    """Steps alternate 4 ms / 8 ms (two kernels' paths taken in turn)."""
    return iid(rng, n) * np.where(np.arange(n) % 2 == 0, 0.8, 1.6)


def single_slow_steps(rng: np.random.Generator, n: int) -> np.ndarray:
    x = iid(rng, n)
    x[rng.choice(n, size=max(1, n // 50), replace=False)] *= 5.0
    return x


def slow_start(rng: np.random.Generator, n: int, steps: int, factor: float = 3.0):
    x = ar1_log(rng, n, 0.5, 0.05)
    x[:steps] *= factor
    return x


def decaying(rng: np.random.Generator, n: int, tau: float, excess: float = 2.0):
    """Step time (1 + excess exp(-t / tau)) times stationary jitter."""
    t = np.arange(n)
    return ar1_log(rng, n, 0.5, 0.05) * (1 + excess * np.exp(-t / tau))


def compile_then_autotune(rng: np.random.Generator, n: int, tuned: int = 20) -> np.ndarray:
    """Step 0 compiles (200 times a step), steps 1..tuned-1 autotune (3 times)."""
    x = ar1_log(rng, n, 0.5, 0.05)
    x[0] *= 200.0
    x[1:tuned] *= 3.0
    return x


def step_change(rng: np.random.Generator, n: int, at: int, factor: float, sd: float = 0.05):
    """Moderately autocorrelated jitter (AR(1), phi 0.5) whose level is multiplied by
    ``factor`` from step ``at`` on."""
    x = ar1_log(rng, n, 0.5, sd)
    x[at:] *= factor
    return x


def linear_drift(rng: np.random.Generator, n: int, total: float) -> np.ndarray:
    """Level growing linearly by ``total`` (0.15 = +15%) from the first to the last step."""
    return ar1_log(rng, n, 0.5, 0.05) * (1 + total * np.arange(n) / (n - 1))


def leak(rng: np.random.Generator, n: int, per_step: float = 2e-4) -> np.ndarray:
    """Compounding growth (an allocator or a cache that keeps growing)."""
    return ar1_log(rng, n, 0.5, 0.05) * np.exp(per_step * np.arange(n))
