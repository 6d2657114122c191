"""Intervals honest for n, and the verdict read from an interval.

Every interval the project publishes comes from here (docs/statistics.md, §3):

* fewer than 5 values (on either side of a ratio): the **range** — min–max of the
  values; for a ratio of medians the extreme pairwise ratios
  min(num)/max(den) … max(num)/min(den). Kind ``"range of n runs"`` /
  ``"range of n vs m runs"``. With complete separation (every device run beats every
  baseline run) the exact one-sided Mann–Whitney probability under no difference is
  1/C(n+m, n): 0.05 at 3 vs 3.
* 5 values or more (on both sides): a 95% **bootstrap CI of the median** (of the ratio
  of the two medians, the samples resampled independently: ``paired=False``), BCa;
  where BCa is degenerate (NaN, scipy's ``DegenerateDataWarning``) the percentile
  interval of the same bootstrap distribution. Kind ``"95% BCa CI"`` /
  ``"95% percentile CI"``.

Bootstraps are seeded (``np.random.default_rng(0)``, 4999 resamples) and run on the
sorted values, so an interval depends on the values only, never on row order. Cells
with the same number of values are bootstrapped together in one vectorized scipy call
(scipy draws the same resample indices for every slice of a call, so the result is the
one a call per cell would give). scipy is imported only when a bootstrap runs.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
N_RESAMPLES = 4999
SEED = 0
MIN_BOOTSTRAP = 5
# Largest number of floats one vectorized bootstrap call materializes (cells x resamples x n).
_CHUNK_FLOATS = 4_000_000

FASTER = "faster"
SLOWER = "slower"
NO_CLEAR = "no clear difference"
INSUFFICIENT = "insufficient data"

KIND_BCA = f"{round(100 * CONFIDENCE)}% BCa CI"
KIND_PERCENTILE = f"{round(100 * CONFIDENCE)}% percentile CI"


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval.

    estimate: the median (or the ratio of two medians); low, high: the interval's ends
    (NaN where there is no value); kind: how the interval was made, in words
    ("range of 3 runs", "range of 3 vs 4 runs", "95% BCa CI", "95% percentile CI",
    "no runs"); n: the number of values, (n, m) for a ratio."""

    estimate: float
    low: float
    high: float
    kind: str
    n: int | tuple[int, int]

    @property
    def is_range(self) -> bool:
        return self.kind.startswith("range")

    @property
    def halfwidth(self) -> float:
        """(high − low) / 2 / estimate: the relative half-width; NaN where undefined
        (no interval, a zero estimate, or a range over a single value on a side)."""
        sizes = self.n if isinstance(self.n, tuple) else (self.n,)
        if self.is_range and min(sizes) < 2:
            return math.nan
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            return math.nan
        if not np.isfinite(self.estimate) or self.estimate == 0:
            return math.nan
        return float((self.high - self.low) / 2 / abs(self.estimate))


def _clean(values) -> np.ndarray:
    """Finite floats only, sorted (None, NaN, inf and non-numeric text dropped)."""
    arr = np.asarray(values, dtype=object).ravel()
    out = np.empty(arr.size, dtype=float)
    for i, v in enumerate(arr):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            out[i] = math.nan
    return np.sort(out[np.isfinite(out)])


def _as_clean(values) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return np.sort(values[np.isfinite(values)])
    return _clean(values)


def _runs(n: int, noun: str) -> str:
    return f"{n} {noun.removesuffix('s') if n == 1 and noun.endswith('s') else noun}"


# ----------------------------------------------------------------------------- bootstrap


def _median(x, axis=-1):
    """np.median of finite values along ``axis``, by a full sort (4x faster than
    np.median's partition on the many short rows a bootstrap makes)."""
    s = np.sort(np.moveaxis(x, axis, -1), axis=-1)
    n = s.shape[-1]
    upper = s[..., n // 2]
    return upper if n % 2 else (s[..., n // 2 - 1] + upper) / 2


def _ratio_of_medians(num, den, axis=-1):
    with np.errstate(divide="ignore", invalid="ignore"):
        return _median(num, axis=axis) / _median(den, axis=axis)


def _bootstrap_block(samples: tuple[np.ndarray, ...], statistic) -> tuple[np.ndarray, ...]:
    """(low, high, bca) per row of the stacked samples (each 2-D: cells x values)."""
    from scipy import stats as scipy_stats  # ~1 s to import: only where a CI is computed

    common = {
        "statistic": statistic,
        "vectorized": True,
        "paired": False,
        "axis": -1,
        "confidence_level": CONFIDENCE,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy_stats.DegenerateDataWarning)
        with np.errstate(divide="ignore", invalid="ignore"):
            result = scipy_stats.bootstrap(
                samples,
                n_resamples=N_RESAMPLES,
                method="BCa",
                rng=np.random.default_rng(SEED),
                **common,
            )
    low = np.atleast_1d(np.asarray(result.confidence_interval.low, dtype=float))
    high = np.atleast_1d(np.asarray(result.confidence_interval.high, dtype=float))
    bca = np.isfinite(low) & np.isfinite(high)
    if not bca.all():
        with np.errstate(divide="ignore", invalid="ignore"):
            pct = scipy_stats.bootstrap(
                samples,
                n_resamples=0,
                method="percentile",
                bootstrap_result=result,
                rng=np.random.default_rng(SEED),
                **common,
            )
        low = np.where(bca, low, np.atleast_1d(pct.confidence_interval.low))
        high = np.where(bca, high, np.atleast_1d(pct.confidence_interval.high))
    return low, high, bca


def _bootstrap_many(samples: list[tuple[np.ndarray, ...]], statistic) -> list[tuple]:
    """Bootstrap CIs of ``statistic`` for many cells: cells whose samples have the same
    sizes are stacked into one scipy call (chunked to bound memory)."""
    by_shape: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, sample in enumerate(samples):
        by_shape[tuple(len(s) for s in sample)].append(i)
    out: list[tuple] = [()] * len(samples)
    for shape, members in by_shape.items():
        step = max(1, _CHUNK_FLOATS // (N_RESAMPLES * sum(shape)))
        for start in range(0, len(members), step):
            chunk = members[start : start + step]
            stacked = tuple(np.stack([samples[i][j] for i in chunk]) for j in range(len(shape)))
            low, high, bca = _bootstrap_block(stacked, statistic)
            for k, i in enumerate(chunk):
                out[i] = (float(low[k]), float(high[k]), bool(bca[k]))
    return out


# ----------------------------------------------------------------------------- public


def summarize_many(samples: Sequence, noun: str = "runs") -> list[Interval]:
    """:func:`summarize` for many samples at once (the bootstraps vectorized)."""
    clean = [_as_clean(s) for s in samples]
    boot_idx = [i for i, x in enumerate(clean) if x.size >= MIN_BOOTSTRAP]
    boots = _bootstrap_many([(clean[i],) for i in boot_idx], _median) if boot_idx else []
    boot = dict(zip(boot_idx, boots, strict=True))
    result = []
    for i, x in enumerate(clean):
        if x.size == 0:
            result.append(Interval(math.nan, math.nan, math.nan, f"no {noun}", 0))
            continue
        median = float(np.median(x))
        if i in boot:
            low, high, bca = boot[i]
            kind = KIND_BCA if bca else KIND_PERCENTILE
            result.append(Interval(median, low, high, kind, int(x.size)))
        else:
            kind = f"range of {_runs(int(x.size), noun)}"
            result.append(Interval(median, float(x[0]), float(x[-1]), kind, int(x.size)))
    return result


def summarize(values, noun: str = "runs") -> Interval:
    """The median of ``values`` (NaN/None dropped) and its interval: the range (min–max)
    below 5 values, a 95% bootstrap CI of the median (BCa, percentile where BCa is
    degenerate) from 5 on. No values: estimate NaN, kind "no runs"."""
    return summarize_many([values], noun)[0]


def ratio_intervals(pairs: Sequence[tuple]) -> list[Interval]:
    """:func:`ratio_interval` for many (num, den) pairs at once."""
    clean = [(_as_clean(a), _as_clean(b)) for a, b in pairs]
    result: list[Interval | None] = [None] * len(clean)
    boot_idx = []
    for i, (num, den) in enumerate(clean):
        n, m = int(num.size), int(den.size)
        if n == 0 or m == 0 or np.median(den) <= 0:
            result[i] = Interval(math.nan, math.nan, math.nan, "no ratio", (n, m))
        elif n >= MIN_BOOTSTRAP and m >= MIN_BOOTSTRAP:
            boot_idx.append(i)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                low, high = num[0] / den[-1], num[-1] / den[0]
            estimate = float(np.median(num) / np.median(den))
            kind = f"range of {n} vs {_runs(m, 'runs')}"
            result[i] = Interval(estimate, float(low), float(high), kind, (n, m))
    if boot_idx:
        boots = _bootstrap_many([clean[i] for i in boot_idx], _ratio_of_medians)
        for i, (low, high, bca) in zip(boot_idx, boots, strict=True):
            num, den = clean[i]
            estimate = float(np.median(num) / np.median(den))
            kind = KIND_BCA if bca else KIND_PERCENTILE
            result[i] = Interval(estimate, low, high, kind, (int(num.size), int(den.size)))
    return result  # type: ignore[return-value]


def ratio_interval(num, den) -> Interval:
    """median(num) / median(den) and its interval. Either side below 5 values: the
    extreme pairwise ratios min(num)/max(den) … max(num)/min(den) ("range of n vs m
    runs"); both from 5: a 95% bootstrap CI of the ratio of medians, the two samples
    resampled independently (BCa, percentile where BCa is degenerate). An empty side or
    a baseline median ≤ 0: estimate NaN, kind "no ratio"."""
    return ratio_intervals([(num, den)])[0]


def paired_ratio_interval(ratios) -> Interval:
    """The median of per-round paired ratios (device/baseline measured in the same
    round) and its interval: the range below 5 rounds ("range of n paired rounds"),
    a 95% bootstrap CI of the median from 5 on."""
    return summarize(ratios, noun="paired rounds")


def verdict(low: float, high: float) -> str:
    """ "faster" when the interval's low end is above 1, "slower" when its high end is
    below 1, else "no clear difference"; "insufficient data" when either end is missing."""
    if low is None or high is None or not (np.isfinite(low) and np.isfinite(high)):
        return INSUFFICIENT
    if low > 1:
        return FASTER
    if high < 1:
        return SLOWER
    return NO_CLEAR
