"""Fit a collective's time against message size (docs/design.md 'Calibration').

    t(S) = L + S x f / B x (1 + (h / S)^p)

S: message bytes (nccl-tests 'size'); f: bus-bandwidth factor of the collective and rank count
(2(n-1)/n all_reduce, (n-1)/n all_gather / reduce_scatter / alltoall, 1 sendrecv);
B: large-message bus bandwidth; h, p: the size where achieved bus bandwidth is B / 2 and how
sharply it saturates -- achieved busbw(S) = B / (1 + (h / S)^p); L: fixed latency.
With p = 1 this is the cost model's default curve (peak x efficiency x S / (S + half)),
i.e. an affine alpha-beta model; measured NCCL curves saturate more slowly (p ~ 0.5-0.7).

Fitted with scipy.optimize.least_squares on log time with a robust (Cauchy) loss: a few sizes
in real logs run under another NCCL algorithm or protocol (e.g. the 64-256 MB dip of the OCI
RoCE A100 log); the fit follows the majority and every size's error is reported, the max too.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from autopar.cost.comm import busbw_factor
from calibration.nccl_log import NcclLog

MB = 1 << 20
# sizes at or below this are latency-dominated: L is fitted only when the log has one
LATENCY_SIZE_BYTES = 64 * 1024
# h (10-100 MB in the samples) is only resolved by data that reach down to this size
KNEE_SIZE_BYTES = 256 * MB
# shape used when a log has too few sizes to fit it: the median of h and p over the
# full-range sample logs' own fits (results/calibration/nccl_fits.txt)
PRIOR_HALF_BYTES = 25.6e6
PRIOR_EXPONENT = 0.67
ROBUST_SCALE = 0.05  # Cauchy loss scale on log time: residuals beyond ~5% count less


@dataclass(frozen=True)
class Curve:
    """Fitted coefficients; latency_seconds is 0 when the data did not measure it."""

    latency_seconds: float
    busbw_bytes_per_second: float
    half_bytes: float
    exponent: float

    def seconds(self, size_bytes: float, factor: float) -> float:
        return float(self.latency_seconds + size_bytes * factor / self.busbw_bytes_per_second
                     * (1.0 + (self.half_bytes / size_bytes) ** self.exponent))

    def busbw(self, size_bytes: float) -> float:
        """Achieved bus bandwidth at a size, latency left out."""
        return self.busbw_bytes_per_second / (1.0 + (self.half_bytes / size_bytes) ** self.exponent)


@dataclass(frozen=True)
class Observation:
    size_bytes: float
    seconds: float
    factor: float
    source: str


@dataclass
class FitResult:
    """A curve with what was fitted and its error on every observation it was fitted to."""

    curve: Curve
    fitted: tuple[str, ...]
    observations: list[Observation]

    def errors(self, source: str | None = None) -> list[tuple[Observation, float]]:
        """(observation, predicted / measured - 1)."""
        return [(o, self.curve.seconds(o.size_bytes, o.factor) / o.seconds - 1.0)
                for o in self.observations if source is None or o.source == source]

    def median_error(self, source: str | None = None, min_size: float = MB) -> float | None:
        """Median |error| over observations of at least min_size (the issue's 1 MB criterion)."""
        errs = [abs(e) for o, e in self.errors(source) if o.size_bytes >= min_size]
        return statistics.median(errs) if errs else None

    def max_error(self, source: str | None = None) -> float:
        return max(abs(e) for _, e in self.errors(source))


def observations(log: NcclLog) -> list[Observation]:
    factor = busbw_factor(log.collective, log.num_ranks)
    return [Observation(float(s), t, factor, log.path) for s, t in log.observations()]


def _free_parameters(obs: list[Observation]) -> tuple[bool, str]:
    """L when a latency-dominated size was measured; h with 3+ larger sizes over 4x reaching
    down to the knee (a log of 1 GiB and up cannot tell h); p too with 5+ sizes over 32x."""
    sizes = sorted({o.size_bytes for o in obs})
    big = [s for s in sizes if s > LATENCY_SIZE_BYTES]
    latency = len(big) < len(sizes)
    if len(big) >= 5 and big[-1] / big[0] >= 32:
        return latency, "half+exponent"
    knee_seen = bool(big) and big[0] <= KNEE_SIZE_BYTES
    return latency, "half" if len(big) >= 3 and big[-1] / big[0] >= 4 and knee_seen else "none"


def fit_observations(obs: list[Observation], prior: Curve | None = None) -> FitResult:
    """Fit B always; L, h and p when the sizes constrain them (else taken from prior)."""
    if not obs:
        raise ValueError("no observations to fit")
    size = np.array([o.size_bytes for o in obs])
    secs = np.array([o.seconds for o in obs])
    factor = np.array([o.factor for o in obs])
    peak = float(np.max(size * factor / secs))  # measured busbw, bytes/s
    prior = prior or Curve(0.0, peak, PRIOR_HALF_BYTES, PRIOR_EXPONENT)
    fit_latency, shape = _free_parameters(obs)
    names = ["busbw"] + (["latency"] if fit_latency else []) + (["half"] if shape != "none" else []) \
        + (["exponent"] if shape == "half+exponent" else [])

    def unpack(x: np.ndarray) -> Curve:
        values = dict(zip(names, x))
        return Curve(float(np.exp(values["latency"])) if fit_latency else prior.latency_seconds,
                     float(np.exp(values["busbw"])), float(np.exp(values.get("half", np.log(prior.half_bytes)))),
                     float(values.get("exponent", prior.exponent)))

    def residual(x: np.ndarray) -> np.ndarray:
        c = unpack(x)
        pred = c.latency_seconds + size * factor / c.busbw_bytes_per_second * (1.0 + (c.half_bytes / size) ** c.exponent)
        return np.log(pred) - np.log(secs)

    bounds = {"busbw": (np.log(0.5 * peak), np.log(4 * peak)), "latency": (np.log(1e-9), np.log(1e-2)),
              "half": (np.log(1e3), np.log(1e12)), "exponent": (0.2, 2.0)}
    lo, hi = [bounds[n][0] for n in names], [bounds[n][1] for n in names]
    best = None
    for half0 in ((1e6, 1e7, 1e8) if "half" in names else (prior.half_bytes,)):
        for p0 in ((0.5, 1.0) if "exponent" in names else (prior.exponent,)):
            start = {"busbw": np.log(peak * 1.05), "latency": np.log(max(secs.min() / 2, 1e-8)),
                     "half": np.log(half0), "exponent": p0}
            x0 = np.clip([start[n] for n in names], lo, hi)
            res = least_squares(residual, x0, bounds=(lo, hi), loss="cauchy", f_scale=ROBUST_SCALE)
            if best is None or res.cost < best.cost:
                best = res
    return FitResult(unpack(best.x), tuple(names), list(obs))


def fit_log(log: NcclLog, prior: Curve | None = None) -> FitResult:
    return fit_observations(observations(log), prior)


def fit_pool(logs: list[NcclLog], prior: Curve | None = None) -> FitResult:
    """One curve for several logs of the same collective and tier (busbw is factor-normalized)."""
    return fit_observations([o for log in logs for o in observations(log)], prior)


def with_latency(curve: Curve, latency_seconds: float) -> Curve:
    return replace(curve, latency_seconds=latency_seconds)
