"""The model against Google's v0.7 results: every folder of a benchmark the
suite costs, predicted from the suite's own config at that folder's global
batch and slice, next to the olympic mean of Google's runs.

One efficiency per benchmark and generation is fitted, on that
generation's largest slice (its TF folder where TF and JAX ran the same
slice); every other row is a prediction. Before it, the time a kernel of
each generation is measured from Google's ResNet-50 step times
(`kernel_seconds`): the same for every benchmark of the generation.
`python -m tools.predict --fit` writes the constants
(tools/predictor/data/ttt_fit.json); `--compare` prints the table docs/benchmarks.md
holds (tests/tools/test_predict.py checks that they agree).
"""

import dataclasses
import functools
import json
import os
import statistics

from tools.predictor import configs
from tools.predictor import convergence
from tools.predictor import cost as cost_lib
from tools.predictor import costs_file
from tools.predictor import model

FIT_PATH = os.path.join(cost_lib.ROOT, 'tools', 'predictor', 'data', 'ttt_fit.json')
# The suite's config for a benchmark, by Google system (else the pod one).
CONFIGS = {
    'resnet': {'tpu-v3-32-TF2.0': 'gin/resnet50_v3_32.gin',
               '': 'gin/resnet50_pod.gin'},
    'bert': {'tpu-v3-32-TF2.0': 'gin/bert_v3_32.gin', '': 'gin/bert_pod.gin'},
    'transformer': {'': 'gin/transformer_pod.gin'},
    'ssd': {'tpu-v4-16-TF': 'gin/ssd_v4_16.gin', '': 'gin/ssd_pod.gin'},
    'dlrm': {'': 'gin/dlrm_pod.gin'},
}
TARGET_MEDIAN, TARGET_MAX = 0.15, 0.35


@dataclasses.dataclass
class Row:
  system: str
  benchmark: str
  accelerator: str
  generation: str
  chips: int
  global_batch: int
  measured_minutes: float
  config: str
  evals: int
  block_step_ms: float | None = None  # Median of the runs' (google_v07).
  fitted: bool = False
  predicted_minutes: float | None = None
  prediction: model.Prediction | None = None

  @property
  def error(self) -> float | None:
    if self.predicted_minutes is None:
      return None
    return self.predicted_minutes / self.measured_minutes - 1.0


def _median_or_none(values) -> float | None:
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def google_rows() -> list[Row]:
  with open(convergence.GOOGLE_TABLE) as f:
    folders = json.load(f)['folders']
  rows = []
  for folder in folders:
    by_system = CONFIGS.get(folder['benchmark'])
    if by_system is None or folder['score_minutes'] is None:
      continue
    success = [r for r in folder['runs'] if r['status'] == 'success']
    rows.append(Row(
        system=folder['system'], benchmark=folder['benchmark'],
        accelerator=folder['accelerator'], generation=folder['generation'],
        chips=folder['chips'], global_batch=folder['global_batch_size'],
        measured_minutes=folder['score_minutes'],
        config=by_system.get(folder['system'], by_system['']),
        evals=round(statistics.median(r['evals'] for r in success)),
        block_step_ms=_median_or_none(
            r.get('block_step_ms') for r in success)))
  return rows


@functools.lru_cache(maxsize=None)
def _config(path: str):
  """A config's Run, slice and stored cost, read once for all its rows."""
  run, accelerator = configs.read([path], [])
  return run, accelerator, costs_file.lookup([path], [])


def _inputs(row: Row):
  run, accelerator, program = _config(row.config)
  # Google's global batch (and eval batch) on the config's program.
  run = dataclasses.replace(run, global_batch=row.global_batch,
                            eval_batch=row.global_batch)
  machine = model.machine(row.accelerator)
  if row.accelerator != accelerator or machine.replicas % run.model_ways or (
      row.global_batch % (machine.replicas // run.model_ways)):
    # Google's batch on another slice than the config's, or one its
    # partitions do not divide: data parallel, as Google's smaller runs.
    run = dataclasses.replace(run, model_ways=1)
  samples = convergence.samples_to_target(row.benchmark,
                                          row.global_batch).samples
  return program, run, machine, samples


# The benchmark whose step times give each generation's time a kernel: the
# one Google ran at the most per-replica batches on each generation.
KERNEL_BENCHMARK = 'resnet'


def kernel_seconds(rows: list[Row]) -> dict:
  """{generation: the time a kernel}, from Google's ResNet-50 step times.

  A step's time less its modelled gradient sum is its kernels' fixed cost
  plus a cost per image: t = kernels x k + per-replica batch x b (Google's
  blocks: on v4, 32, 128 and 256 images a chip lie within 2% of a line).
  k and b are the least-squares fit over the generation's ResNet-50
  folders, each with its config's kernels; b is left (the efficiency
  holds it). A generation with fewer than two per-replica batches has
  none.
  """
  points = {}
  for row in rows:
    if row.benchmark != KERNEL_BENCHMARK or row.block_step_ms is None:
      continue
    program, run, machine, samples = _inputs(row)
    at_peak = model.predict(cost=program, machine_=machine, run=run,
                            efficiency=1.0, samples=samples, evals=row.evals)
    points.setdefault(row.generation, []).append(
        (program.train_kernels(), at_peak.per_replica_batch,
         row.block_step_ms / 1e3 - at_peak.gradient_sum))
  out = {}
  for generation, pts in sorted(points.items()):
    if len({b for _, b, _ in pts}) < 2 or not all(k for k, _, _ in pts):
      continue
    import numpy as np  # pylint: disable=import-outside-toplevel
    (per_kernel, _), *_ = np.linalg.lstsq(
        np.array([(k, b) for k, b, _ in pts]),
        np.array([t for _, _, t in pts]), rcond=None)
    if per_kernel > 0:
      out[generation] = float(per_kernel)
  return out


def fit(rows: list[Row]) -> dict:
  """The constants: each generation's time a kernel (measured) and
  {'<benchmark> <generation>': efficiency} from each largest slice."""
  kernels = kernel_seconds(rows)
  constants = {}
  for row in sorted(rows, key=lambda r: (r.chips, 'TF' in r.system)):
    program, run, machine, samples = _inputs(row)
    constants[f'{row.benchmark} {row.generation}'] = {
        'efficiency': model.fit_efficiency(
            cost=program, machine_=machine, run=run, samples=samples,
            evals=row.evals, measured_seconds=row.measured_minutes * 60,
            kernel_seconds=kernels.get(row.generation, 0.0)),
        'fitted_on': row.system,
        'per_replica_batch': row.global_batch * run.model_ways /
                             machine.replicas}
  return {'constants': constants, 'kernel_seconds': kernels}


def _load(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def load_fit(path: str = FIT_PATH) -> dict:
  """{'<benchmark> <generation>': {'efficiency': ..., ...}}."""
  return _load(path).get('constants', {})


def load_kernel_seconds(path: str = FIT_PATH) -> dict:
  """{generation: the time a kernel} (kernel_seconds)."""
  return _load(path).get('kernel_seconds', {})


def write_fit(fitted: dict, path: str = FIT_PATH) -> None:
  """Writes fit()'s constants."""
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump({'about': 'One efficiency per benchmark and generation, '
                        'fitted by `python -m tools.predict --fit` on the '
                        'largest slice of Google\'s v0.7 results; the time '
                        'a kernel of each generation, measured from '
                        'Google\'s ResNet-50 step times.',
               'constants': fitted['constants'],
               'kernel_seconds': fitted['kernel_seconds']}, f, indent=1,
              sort_keys=True)
    f.write('\n')
  os.replace(tmp, path)


def compare(rows: list[Row], constants: dict,
            kernels: dict | None = None) -> list[Row]:
  """Predicts every row that has a fitted efficiency; `kernels`: the time
  a kernel by generation (default: the stored one)."""
  if kernels is None:
    kernels = load_kernel_seconds()
  for row in rows:
    name = f'{row.benchmark} {row.generation}'
    if name not in constants:
      continue
    program, run, machine, samples = _inputs(row)
    row.prediction = model.predict(
        cost=program, machine_=machine, run=run,
        efficiency=constants[name]['efficiency'], samples=samples,
        evals=row.evals, kernel_seconds=kernels.get(row.generation, 0.0))
    row.predicted_minutes = row.prediction.time_to_train / 60
    row.fitted = constants[name]['fitted_on'] == row.system
  return rows


def summary(rows: list[Row]) -> dict:
  errors = [abs(r.error) for r in rows if r.error is not None and not r.fitted]
  if not errors:
    return {'rows': 0}
  return {'rows': len(errors), 'median': statistics.median(errors),
          'max': max(errors),
          'misses': [r.system + ' ' + r.benchmark for r in rows
                     if r.error is not None and not r.fitted
                     and abs(r.error) > TARGET_MAX]}


def markdown(rows: list[Row]) -> str:
  lines = ['| Google v0.7 folder | benchmark | chips | global batch | '
           'measured (min) | predicted (min) | error | per-replica batch | '
           'step (ms): Google\'s blocks | predicted | efficiency | bound |',
           '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|']
  for r in rows:
    p = r.prediction
    if p is None:
      continue
    error = 'fitted' if r.fitted else f'{r.error:+.0%}'
    blocks = ('' if r.block_step_ms is None
              else f'{r.block_step_ms:.1f}')
    lines.append(
        f'| {r.system} | {r.benchmark} | {r.chips:,} | {r.global_batch:,} | '
        f'{r.measured_minutes:.2f} | {r.predicted_minutes:.2f} | {error} | '
        f'{p.per_replica_batch:g} | {blocks} | {p.step * 1e3:.1f} | '
        f'{p.efficiency:.2f} | {p.bound} |')
  s = summary(rows)
  if s['rows']:
    lines.append('')
    lines.append(
        f'Predicted rows: {s["rows"]}; median absolute error '
        f'{s["median"]:.0%} (target {TARGET_MEDIAN:.0%}), largest '
        f'{s["max"]:.0%} (target {TARGET_MAX:.0%}); rows off by more than '
        f'{TARGET_MAX:.0%}: {", ".join(s["misses"]) or "none"}.')
  return '\n'.join(lines)
