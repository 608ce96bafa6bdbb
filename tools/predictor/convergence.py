"""Samples to reach the quality target, by benchmark and global batch.

Two published sources, each point named by its source:
- Google's v0.7 runs (tools/predictor/data/google_v07_results.json, built by
  tools/predictor/google_v07.py from mlcommons/training_results_v0.7): the median of
  the successful runs' samples at the eval that reached the target, pooled
  over the folders that ran that batch.
- MLCommons' reference convergence points, as the `mlperf-logging` package
  ships them (mlperf_logging/rcp_checker/training_1.0.0/rcps_<benchmark>.json:
  the mean of the reference runs' epochs, or samples for BERT, at each
  batch), used only where the v1.0 quality target is v0.7's (not BERT:
  0.712 then, 0.720 in v1.0) and v0.7 has no run at that batch.

Between points: linear in log2(batch); outside them the nearest point, with
a warning that says so.
"""

import dataclasses
import json
import math
import os
import statistics

from tools.predictor import google_v07


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
GOOGLE_TABLE = os.path.join(ROOT, 'tools', 'predictor', 'data', 'google_v07_results.json')
# Benchmarks whose v1.0 target is v0.7's (notes/mlperf.md, quality targets)
# and whose RCPs count epochs of a known set (google_v07.TRAIN_SET).
SAME_TARGET_IN_V1 = ('resnet', 'ssd', 'maskrcnn')
RCP_RULESET = 'training_1.0.0'


@dataclasses.dataclass(frozen=True)
class Point:
  benchmark: str
  global_batch: int
  samples: float
  runs: int
  source: str


def google_folders(benchmark: str, generation: str = '',
                   table_path: str = GOOGLE_TABLE) -> list[str]:
  """Google's v0.7 results folders of `benchmark` (on `generation` if
  given), as their systems without 'tpu-', sorted."""
  with open(table_path) as f:
    folders = json.load(f)['folders']
  return sorted(f['system'].removeprefix('tpu-') for f in folders
                if f['benchmark'] == benchmark and
                generation in ('', f['generation']))


def google_points(table_path: str = GOOGLE_TABLE) -> list[Point]:
  with open(table_path) as f:
    folders = json.load(f)['folders']
  pooled = {}
  for row in folders:
    samples = [r['samples_at_target'] for r in row['runs']
               if r['status'] == 'success' and r.get('samples_at_target')]
    if samples and row['global_batch_size']:
      key = (row['benchmark'], row['global_batch_size'])
      pooled.setdefault(key, ([], []))
      pooled[key][0].extend(samples)
      pooled[key][1].append(row['system'])
  return [Point(b, batch, statistics.median(s), len(s),
                'Google v0.7 ' + ', '.join(sorted(systems)))
          for (b, batch), (s, systems) in sorted(pooled.items())]


def rcp_points() -> list[Point]:
  import mlperf_logging  # pylint: disable=import-outside-toplevel
  folder = os.path.join(os.path.dirname(mlperf_logging.__file__),
                        'rcp_checker', RCP_RULESET)
  points = []
  for benchmark in SAME_TARGET_IN_V1:
    path = os.path.join(folder, f'rcps_{benchmark}.json')
    if not os.path.exists(path):
      continue
    with open(path) as f:
      for name, rcp in json.load(f).items():
        runs = rcp['Epochs to converge']
        points.append(Point(benchmark, int(rcp['BS']),
                            statistics.fmean(runs) * google_v07.TRAIN_SET[benchmark],
                            len(runs), f'MLCommons RCP {RCP_RULESET} {name}'))
  return points


def points_for(benchmark: str) -> list[Point]:
  """Every point of a benchmark, one per batch (Google's run first)."""
  by_batch = {}
  for point in rcp_points() + google_points():
    if point.benchmark == benchmark:
      by_batch[point.global_batch] = point  # Google's replace the RCP's.
  return [by_batch[b] for b in sorted(by_batch)]


@dataclasses.dataclass(frozen=True)
class Estimate:
  samples: float
  sources: tuple[str, ...]
  warning: str = ''


def samples_to_target(benchmark: str, global_batch: int) -> Estimate:
  """Samples to the target at `global_batch`.

  Raises:
    ValueError: no convergence point for the benchmark.
  """
  points = points_for(benchmark)
  if not points:
    raise ValueError(f'No convergence data for {benchmark!r}: neither '
                     'Google\'s v0.7 runs nor MLCommons\' reference points '
                     f'(with v0.7\'s target) have it (tools/predictor/convergence.py).')
  batches = [p.global_batch for p in points]
  for point in points:
    if point.global_batch == global_batch:
      return Estimate(point.samples, (point.source,))
  if global_batch < batches[0] or global_batch > batches[-1]:
    near = points[0] if global_batch < batches[0] else points[-1]
    return Estimate(near.samples, (near.source,), warning=(
        f'global batch {global_batch} is outside the {benchmark} '
        f'convergence data ({batches[0]}..{batches[-1]}): the samples of '
        f'batch {near.global_batch}, which likely '
        f'{"over" if global_batch < batches[0] else "under"}states '
        'what is needed.'))
  hi = next(i for i, b in enumerate(batches) if b > global_batch)
  lo_p, hi_p = points[hi - 1], points[hi]
  t = ((math.log2(global_batch) - math.log2(lo_p.global_batch)) /
       (math.log2(hi_p.global_batch) - math.log2(lo_p.global_batch)))
  return Estimate(lo_p.samples + t * (hi_p.samples - lo_p.samples),
                  (lo_p.source, hi_p.source))
