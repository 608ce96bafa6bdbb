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
    'maskrcnn': {'tpu-v4-16-TF': 'gin/maskrcnn_v4_16.gin',
                 '': 'gin/maskrcnn_pod.gin'},
    'gnmt': {'tpu-v4-16-TF': 'gin/gnmt_v4_16.gin', '': 'gin/gnmt_pod.gin'},
}
TARGET_MEDIAN, TARGET_MAX = 0.15, 0.35
# Benchmarks whose evaluation ran on the hosts beside training (Google's
# v0.7 Mask R-CNN: the COCO evaluation of boxes and masks on the CPUs while
# the TPU trains on): their time to train holds an eval time the device's
# count does not see (10-22 s an eval in Google's logs, beyond the logged
# steps), so their efficiency is fitted on the logged step time and the
# eval's unhidden host time is a second constant from the same folder.
EVAL_BESIDE_TRAINING = ('maskrcnn',)


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
  # Out of sample (out_of_sample): the folders the row's constants came
  # from, and the row's prediction with the stored largest-slice fit.
  constants_from: str = ''
  largest_fit_minutes: float | None = None
  largest_fit_source: bool = False  # The stored constants came from it.

  @property
  def folder(self) -> tuple[str, str]:
    """Google's results folder: results/<system>/<benchmark>."""
    return self.system, self.benchmark

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


def no_fit_reason(benchmark: str, generation: str, constants: dict) -> str:
  """Why no efficiency is fitted for `benchmark` on `generation`, in one
  line: Google ran no folder of it there, or the suite fits it on no
  generation yet (its folders named)."""
  ran = convergence.google_folders(benchmark)
  here = convergence.google_folders(benchmark, generation)
  fitted = sorted(name.split()[1] for name in constants
                  if name.split()[0] == benchmark)
  anyway = 'pass --efficiency=F (a fraction of peak) to predict anyway'
  if not ran:
    return (f'Google ran no {benchmark} in v0.7, so no efficiency is fitted '
            f'for it: {anyway}.')
  if benchmark not in CONFIGS or not fitted:
    return (f'No efficiency is fitted for {benchmark} yet, although Google '
            f'ran it in v0.7 ({", ".join(ran)}): the suite does not price '
            f'it yet (docs/predict.md); {anyway}.')
  if not here:
    return (f'Google ran no {benchmark} on {generation} in v0.7 (its '
            f'{benchmark} folders: {", ".join(ran)}; fitted on '
            f'{", ".join(fitted)}): {anyway}.')
  return (f'No efficiency is fitted for {benchmark} on {generation} although '
          f'Google ran {", ".join(here)}: refit with python -m tools.predict '
          f'--fit, or {anyway}.')


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
    run = dataclasses.replace(run, model_ways=1, spatial_partitions=1)
  samples = convergence.samples_to_target(row.benchmark,
                                          row.global_batch).samples
  return program, run, machine, samples


# The benchmark whose step times give each generation's time a kernel: the
# one Google ran at the most per-replica batches on each generation.
KERNEL_BENCHMARK = 'resnet'


def kernel_seconds(rows: list[Row]) -> dict:
  """{generation: the time a kernel}, from Google's ResNet-50 step times.

  A step's time less its modelled sums (gradients, batch-norm groups,
  halos) is its kernels' fixed cost
  plus a cost per image: t = kernels x k + per-replica batch x b (Google's
  blocks: on v4, 32, 128 and 256 images a chip lie within 2% of a line).
  k and b are the least-squares fit over the generation's ResNet-50
  folders, each with its config's kernels; b is left (the efficiency
  holds it). A generation with fewer than two per-replica batches has
  none.
  """
  return {g: k for g, (k, _) in _kernel_fit(rows, (KERNEL_BENCHMARK,)).items()}


def _kernel_fit(rows: list[Row], benchmarks) -> dict:
  """{generation: (k, the folders it came from)}: one k shared by
  `benchmarks`, each with its own cost per example, over their folders
  that ran two per-replica batches or more."""
  points = {}
  for row in rows:
    if row.benchmark not in benchmarks or row.block_step_ms is None:
      continue
    program, run, machine, samples = _inputs(row)
    at_peak = model.predict(cost=program, machine_=machine, run=run,
                            efficiency=1.0, samples=samples, evals=row.evals)
    points.setdefault(row.generation, []).append(
        (row, program.train_kernels(), at_peak.per_replica_batch,
         row.block_step_ms / 1e3 - at_peak.gradient_sum -
         at_peak.group_sums))
  out = {}
  import numpy as np  # pylint: disable=import-outside-toplevel
  for generation, pts in sorted(points.items()):
    slopes = sorted({r.benchmark for r, _, _, _ in pts
                     if len({b for q, _, b, _ in pts
                             if q.benchmark == r.benchmark}) >= 2})
    pts = [p for p in pts if p[0].benchmark in slopes]
    if not pts or not all(k for _, k, _, _ in pts):
      continue
    (per_kernel, *_), *_ = np.linalg.lstsq(
        np.array([[k] + [b * (r.benchmark == s) for s in slopes]
                  for r, k, b, _ in pts]),
        np.array([t for _, _, _, t in pts]), rcond=None)
    if per_kernel > 0:
      out[generation] = (float(per_kernel),
                         sorted(r.system + ' ' + r.benchmark
                                for r, _, _, _ in pts))
  return out


def _largest_slice_key(row: Row) -> tuple:
  """Which folder a benchmark's efficiency is fitted on: the most chips,
  TF before JAX on the same slice."""
  return row.chips, 'TF' in row.system


def _constants(row: Row, kernel_seconds: float) -> dict:
  """{'efficiency', 'eval_overhead_seconds'} fitted on `row`: the
  efficiency that reproduces its measured time to train; for a benchmark
  that evaluated beside training, the one that reproduces its logged step
  time, and the eval time on the hosts the rest of its time to train
  leaves (over its evals)."""
  program, run, machine, samples = _inputs(row)
  seconds = row.measured_minutes * 60
  if row.benchmark not in EVAL_BESIDE_TRAINING or row.block_step_ms is None:
    return {'efficiency': model.fit_efficiency(
        cost=program, machine_=machine, run=run, samples=samples,
        evals=row.evals, measured_seconds=seconds,
        kernel_seconds=kernel_seconds), 'eval_overhead_seconds': 0.0}
  efficiency = model.fit_step_efficiency(
      cost=program, machine_=machine, run=run,
      step_seconds=row.block_step_ms / 1e3, kernel_seconds=kernel_seconds)
  device = model.predict(cost=program, machine_=machine, run=run,
                         efficiency=efficiency, samples=samples,
                         evals=row.evals, kernel_seconds=kernel_seconds)
  return {'efficiency': efficiency, 'eval_overhead_seconds': max(
      0.0, (seconds - device.time_to_train) / max(row.evals, 1))}


def fit(rows: list[Row]) -> dict:
  """The constants: each generation's time a kernel (measured) and
  {'<benchmark> <generation>': efficiency} from each largest slice."""
  kernels = kernel_seconds(rows)
  constants = {}
  for row in sorted(rows, key=_largest_slice_key):
    _, run, machine, _ = _inputs(row)
    constants[f'{row.benchmark} {row.generation}'] = {
        **_constants(row, kernels.get(row.generation, 0.0)),
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
        evals=row.evals, kernel_seconds=kernels.get(row.generation, 0.0),
        eval_overhead=constants[name].get('eval_overhead_seconds', 0.0))
    row.predicted_minutes = row.prediction.time_to_train / 60
    row.fitted = constants[name]['fitted_on'] == row.system
  return rows


def out_of_sample(rows: list[Row]) -> list[Row]:
  """Predicts every row from constants fitted without its folder's data.

  For each row, the rest of the folders (Google's other results folders:
  every other system and benchmark) give:
  - the generation's time a kernel: ResNet-50's step times
    (kernel_seconds), or, where ResNet-50 has fewer than two per-replica
    batches left, the TF folders of every benchmark with block times, one
    shared k and a cost per example each (JAX's steps are another
    program's);
  - the benchmark's efficiency on that generation, fitted on its largest
    remaining slice (TF before JAX on the same slice) with that k.
  A row with no other folder of its benchmark and generation (the V100
  server's) is not predicted. Each row keeps the largest-slice fit's
  prediction (the stored constants: `largest_fit_minutes`) beside it.
  Samples to target are the published ones and evaluations the folder's
  own count, as in `compare`.
  """
  largest = compare([dataclasses.replace(r) for r in rows], load_fit())
  for row, fitted in zip(rows, largest):
    row.largest_fit_minutes = fitted.predicted_minutes
    row.largest_fit_source = fitted.fitted
  for row in rows:
    others = [r for r in rows if r.folder != row.folder]
    kernels = _kernel_fit(others, (KERNEL_BENCHMARK,))
    if row.generation not in kernels:
      kernels = _kernel_fit([r for r in others if 'JAX' not in r.system],
                            tuple(CONFIGS))
    k, k_from = kernels.get(row.generation, (0.0, []))
    same = [r for r in others if (r.benchmark, r.generation) ==
            (row.benchmark, row.generation)]
    row.fitted, row.prediction, row.predicted_minutes = False, None, None
    if not same:
      row.constants_from = 'none: no other folder of this benchmark'
      continue
    source = max(same, key=_largest_slice_key)
    try:
      fitted = _constants(source, k)
    except ValueError as e:  # Its sums and kernels exceed its time.
      row.constants_from = f'none: {e}'
      continue
    program, run, machine, samples = _inputs(row)
    row.prediction = model.predict(
        cost=program, machine_=machine, run=run,
        efficiency=fitted['efficiency'], samples=samples, evals=row.evals,
        kernel_seconds=k, eval_overhead=fitted['eval_overhead_seconds'])
    row.predicted_minutes = row.prediction.time_to_train / 60
    row.constants_from = (
        f'efficiency: {source.system}; a kernel: '
        + (_folders(k_from) if k_from else 'none (no two batches)'))
  return rows


MINIGO_CONFIG = 'gin/minigo_pod.gin'


def minigo_line() -> str:
  """MiniGo beside Google's v4-128 folder, from measured rates (not
  fitted: tools/predictor/minigo.py)."""
  from tools.predictor import minigo  # pylint: disable=import-outside-toplevel
  try:
    configs.read([MINIGO_CONFIG], [])
  except configs.SelfPlayConfig as selfplay:
    return minigo.compare_line(selfplay.macros, minigo.load_rates())
  raise ValueError(f'{MINIGO_CONFIG} is not a self-play config.')


def _folders(names: list[str]) -> str:
  """'tpu-v4-16-TF resnet', ... as 'resnet on v4-16-TF, v4-128-TF'."""
  by_benchmark = {}
  for name in names:
    system, benchmark = name.rsplit(' ', 1)
    by_benchmark.setdefault(benchmark, []).append(
        system.removeprefix('tpu-'))
  return '; '.join(f'{b} on {", ".join(s)}'
                   for b, s in sorted(by_benchmark.items()))


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
  """out_of_sample's rows as docs/benchmarks.md's table, then the errors'
  median and largest against their targets."""
  lines = ['| Google v0.7 folder | benchmark | chips | global batch | '
           'measured (min) | predicted (min) | error | largest-slice fit: '
           'error | per-replica batch | step (ms): Google\'s blocks | '
           'predicted | efficiency | bound | constants from |',
           '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|'
           '---|']
  for r in rows:
    p = r.prediction
    blocks = '' if r.block_step_ms is None else f'{r.block_step_ms:.1f}'
    largest = ''
    if r.largest_fit_minutes is not None:
      largest = ('fitted' if r.largest_fit_source else
                 f'{r.largest_fit_minutes / r.measured_minutes - 1:+.0%}')
    if p is None:
      cells = ['-', '-', largest, '', blocks, '', '', '']
    else:
      cells = [f'{r.predicted_minutes:.2f}', f'{r.error:+.0%}', largest,
               f'{p.per_replica_batch:g}', blocks, f'{p.step * 1e3:.1f}',
               f'{p.efficiency:.2f}', p.bound]
    lines.append(
        f'| {r.system} | {r.benchmark} | {r.chips:,} | {r.global_batch:,} | '
        f'{r.measured_minutes:.2f} | ' + ' | '.join(cells) +
        f' | {r.constants_from} |')
  s = summary(rows)
  if s['rows']:
    lines.append('')
    lines.append(
        f'Predicted rows, each out of sample: {s["rows"]}; median absolute '
        f'error {s["median"]:.0%} (target {TARGET_MEDIAN:.0%}), largest '
        f'{s["max"]:.0%} (target {TARGET_MAX:.0%}); rows off by more than '
        f'{TARGET_MAX:.0%}: {", ".join(s["misses"]) or "none"}.')
  return '\n'.join(lines)
