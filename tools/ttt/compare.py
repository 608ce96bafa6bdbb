"""The model against Google's v0.7 results: every folder of a benchmark the
suite costs, predicted from the suite's own config at that folder's global
batch and slice, next to the olympic mean of Google's runs.

One efficiency per benchmark and generation is fitted, on that
generation's largest slice (its TF folder where TF and JAX ran the same
slice); every other row is a prediction. `python -m tools.predict --fit`
writes the constants (tools/data/ttt_fit.json); `--compare` prints the
table docs/benchmarks.md holds (tests/tools/test_predict.py checks that
they agree).
"""

import dataclasses
import functools
import json
import os
import statistics

from tools.ttt import configs
from tools.ttt import convergence
from tools.ttt import cost as cost_lib
from tools.ttt import costs_file
from tools.ttt import model

FIT_PATH = os.path.join(cost_lib.ROOT, 'tools', 'data', 'ttt_fit.json')
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
  fitted: bool = False
  predicted_minutes: float | None = None
  prediction: model.Prediction | None = None

  @property
  def error(self) -> float | None:
    if self.predicted_minutes is None:
      return None
    return self.predicted_minutes / self.measured_minutes - 1.0


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
        evals=round(statistics.median(r['evals'] for r in success))))
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


def fit(rows: list[Row]) -> dict:
  """{'<benchmark> <generation>': efficiency} from each largest slice."""
  constants = {}
  for row in sorted(rows, key=lambda r: (r.chips, 'TF' in r.system)):
    program, run, machine, samples = _inputs(row)
    constants[f'{row.benchmark} {row.generation}'] = {
        'efficiency': model.fit_efficiency(
            cost=program, machine_=machine, run=run, samples=samples,
            evals=row.evals, measured_seconds=row.measured_minutes * 60),
        'fitted_on': row.system,
        'per_replica_batch': row.global_batch * run.model_ways /
                             machine.replicas}
  return constants


def load_fit(path: str = FIT_PATH) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)['constants']


def write_fit(constants: dict, path: str = FIT_PATH) -> None:
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump({'about': 'One efficiency per benchmark and generation, '
                        'fitted by `python -m tools.predict --fit` on the '
                        'largest slice of Google\'s v0.7 results.',
               'constants': constants}, f, indent=1, sort_keys=True)
    f.write('\n')
  os.replace(tmp, path)


def compare(rows: list[Row], constants: dict) -> list[Row]:
  for row in rows:
    name = f'{row.benchmark} {row.generation}'
    if name not in constants:
      continue
    program, run, machine, samples = _inputs(row)
    row.prediction = model.predict(
        cost=program, machine_=machine, run=run,
        efficiency=constants[name]['efficiency'], samples=samples,
        evals=row.evals)
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
           'efficiency | bound |',
           '|---|---|---:|---:|---:|---:|---:|---:|---:|---|']
  for r in rows:
    p = r.prediction
    if p is None:
      continue
    error = 'fitted' if r.fitted else f'{r.error:+.0%}'
    lines.append(
        f'| {r.system} | {r.benchmark} | {r.chips:,} | {r.global_batch:,} | '
        f'{r.measured_minutes:.2f} | {r.predicted_minutes:.2f} | {error} | '
        f'{p.per_replica_batch:g} | {p.efficiency:.2f} | {p.bound} |')
  s = summary(rows)
  if s['rows']:
    lines.append('')
    lines.append(
        f'Predicted rows: {s["rows"]}; median absolute error '
        f'{s["median"]:.0%} (target {TARGET_MEDIAN:.0%}), largest '
        f'{s["max"]:.0%} (target {TARGET_MAX:.0%}); rows off by more than '
        f'{TARGET_MAX:.0%}: {", ".join(s["misses"]) or "none"}.')
  return '\n'.join(lines)
