"""MLPerf Inference v0.5's MultiStream metric, emulated with LoadGen 6.

v0.5's LoadGen issued a query of N samples every latency bound (50 ms for
the vision models, 100 ms for GNMT); a query still running when the next
was due made that one late, and the metric was the largest N at which the
percentile (99%, GNMT 97%) of queries finished within the bound
(mlcommons/inference r0.5, `loadgen/test_settings.h`). LoadGen 6 issues
MultiStream queries back to back and reports the percentile latency of
queries of a fixed N.

The emulation: N meets v0.5's bound when a LoadGen 6 run of N samples a
query has its percentile latency within the bound (such a query would have
ended before the next one was due). N is searched by doubling from v0.5's
starting value (4) and then by bisection, one LoadGen run a probe, assuming
the latency grows with N. Back-to-back queries leave the system no idle
time between them, which v0.5's schedule did: the emulation can only
understate v0.5's N, never overstate it. Every printed figure says it is an
emulation.
"""

import dataclasses
import math
import os
from typing import Callable

from models.common import inference_v05

LABEL = ("v0.5 MultiStream, emulated (LoadGen 6's back-to-back queries, "
         "inference/multistream.py)")


@dataclasses.dataclass
class Emulation:
  """The search's result.

  Attributes:
    samples_per_query: the largest N within the bound (0: not even 1).
    bound_s: the latency bound, seconds.
    percentile: the tail judged, e.g. 0.99.
    tried: {N: its percentile latency in seconds}, in the order run.
  """
  samples_per_query: int
  bound_s: float
  percentile: float
  tried: dict

  def __str__(self):
    lines = [f'{LABEL}: {self.samples_per_query} samples per query within '
             f'{self.bound_s * 1000:g} ms at the {self.percentile * 100:g}th '
             'percentile']
    for n, latency in self.tried.items():
      verdict = 'within' if latency <= self.bound_s else 'over'
      lines.append(f'  {n} samples a query: {latency * 1000:.2f} ms '
                   f'({verdict})')
    return '\n'.join(lines)


def largest_within(latency_at: Callable[[int], float], *, bound_s: float,
                   percentile: float, most: int,
                   start: int = 4) -> Emulation:
  """The largest N in [1, most] whose `latency_at(N)` (seconds) is within
  `bound_s`.

  Args:
    latency_at: runs N samples a query, returns the percentile latency.
    bound_s, percentile: v0.5's bound and tail (the report's).
    most: the largest N to try (the QSL's performance samples).
    start: the first N (v0.5's mlperf.conf starts MultiStream at 4).
  """
  if most < 1:
    raise ValueError(f'MultiStream needs at least one sample, got {most}.')
  tried = {}
  lo, hi = 0, most + 1  # lo meets the bound (0 trivially); hi does not.
  n = min(max(start, 1), most)
  while hi - lo > 1:
    tried[n] = latency_at(n)
    if tried[n] <= bound_s:
      lo = n
    else:
      hi = n
    n = min(2 * lo, most) if hi == most + 1 else (lo + hi) // 2
  return Emulation(samples_per_query=lo, bound_s=bound_s,
                   percentile=percentile, tried=tried)


def emulate_v05(run, task, folder: str = '', count: int = 0,
                **extra) -> Emulation:
  """v0.5's MultiStream metric of the task's benchmark: LoadGen runs of
  growing samples a query (each in its own folder, multistream_N), up to
  the QSL's performance samples (or `count`, the samples used).

  Args:
    run: inference.run's (mode, folder, **extra) -> Report.
    task: the model's task (its `inference_model` names the benchmark).
    folder: under the run's output folder.
    count: the samples the runs use (0: all).
    **extra: passed to every run (a backend, say).
  """
  bound_s, percentile = inference_v05.multistream_bound(task.inference_model)

  def latency_at(n):
    report = run('performance', os.path.join(folder, f'multistream_{n}'),
                 scenario='MultiStream', multi_stream_samples_per_query=n,
                 **extra)
    print(report, flush=True)
    if report.value is None:
      raise RuntimeError(f'The MultiStream run of {n} samples a query '
                         f'reported no {report.metric}: {report.summary}')
    return report.value / 1e9

  found = largest_within(
      latency_at, bound_s=bound_s, percentile=percentile,
      most=min(inference_v05.performance_samples(task.inference_model),
               count or math.inf))
  print(found, flush=True)
  return found
