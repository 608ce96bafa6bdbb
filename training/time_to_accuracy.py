"""Time-to-accuracy: read MLPerf logs, draw quality against time.

`read_log` takes the `:::MLLOG` lines a run wrote (training/mlperf_log.py):
run_start, each eval_accuracy with its time, run_stop with its status, and
the `quality_target` this suite logs. `plot` draws one curve per log
(time since run_start against eval quality) with the target as a line,
into a PNG. The run writes `<model_dir>/time_to_accuracy.png` at its end;
`python -m tools.score` draws N runs together.
"""

import dataclasses
import json
import os

from core import startup

QUALITY_TARGET = 'quality_target'
MLLOG_PREFIX = ':::MLLOG '
# What MLPerf's eval_accuracy is for each benchmark (the y-axis).
METRIC_NAMES = {'resnet': 'top-1 accuracy', 'bert': 'masked-LM accuracy',
                'transformer': 'BLEU', 'gnmt': 'BLEU', 'ssd': 'COCO box mAP',
                'maskrcnn': 'COCO AP / target (lower of box and mask)',
                'dlrm': 'ROC AUC', 'minigo': 'move-prediction accuracy'}
# Benchmarks whose eval_accuracy holds several figures, each with its
# target (MLPerf v0.7: Mask R-CNN's box and mask AP). A run's own
# quality_target line, when it has one, takes precedence.
FIGURE_TARGETS = {'maskrcnn': {'BBOX': 0.377, 'SEGM': 0.339}}


def figures_quality(value: dict, targets: dict) -> float:
  """One number for an eval of several figures: the lowest figure's
  fraction of its target (1.0: every figure at its target)."""
  return min(float(value[k]) / float(t) for k, t in targets.items())


def run_name(path: str) -> str:
  """A log's run name: `result_3` for results/.../result_3.txt, the
  model_dir's name for <model_dir>/mlperf.log."""
  base = os.path.basename(path.rstrip('/'))
  if base.startswith('mlperf.log'):
    return os.path.basename(os.path.dirname(path.rstrip('/'))) or base
  return base[:-len('.txt')] if base.endswith('.txt') else base


@dataclasses.dataclass
class RunLog:
  """What one mlperf.log says about its run."""
  path: str
  benchmark: str | None
  run_start_ms: float | None
  run_stop_ms: float | None
  status: str | None
  evals: list  # (milliseconds since run_start, epoch_num, quality).
  target: float | None

  @property
  def name(self) -> str:
    return run_name(self.path)

  @property
  def metric(self) -> str:
    return METRIC_NAMES.get(self.benchmark or '', 'eval quality')

  @property
  def minutes(self) -> float | None:
    """Time to train (run_start to run_stop), as MLPerf scores it."""
    if self.run_start_ms is None or self.run_stop_ms is None:
      return None
    return (self.run_stop_ms - self.run_start_ms) / 60000.0


def _open(path: str, mode: str):
  """A local file, or through TensorFlow's file system for gs:// and the
  other remote schemes (TensorFlow loads only then: local scoring and
  `tools.score --help` stay quick)."""
  if '://' not in path:
    return open(path, mode)  # pylint: disable=unspecified-encoding
  return startup.import_tensorflow().io.gfile.GFile(path, mode)


def read_log(path: str) -> RunLog:
  """Parses an MLPerf log (local or gs://).

  Raises:
    ValueError: naming the file when it holds no MLLOG line.
  """
  with _open(path, 'r') as f:
    lines = [json.loads(line.split(MLLOG_PREFIX, 1)[1])
             for line in f if MLLOG_PREFIX in line]
  if not lines:
    raise ValueError(f'{path} holds no MLPerf log lines (":::MLLOG ...").')
  run = RunLog(path=path, benchmark=None, run_start_ms=None, run_stop_ms=None,
               status=None, evals=[], target=None)
  target = None
  for line in lines:
    key, value, meta = line['key'], line.get('value'), line.get('metadata', {})
    if key == 'submission_benchmark':
      run.benchmark = value
    elif key == 'run_start':
      run.run_start_ms = line['time_ms']
    elif key == 'run_stop':
      run.run_stop_ms, run.status = line['time_ms'], meta.get('status')
    elif key == QUALITY_TARGET:
      target = value
    elif key == 'eval_accuracy' and run.run_start_ms is not None:
      run.evals.append((line['time_ms'] - run.run_start_ms,
                        meta.get('epoch_num'), value))
  # Several figures an eval: their quality against their targets (known
  # once every line is read: Google's logs name the benchmark last).
  if any(isinstance(q, dict) for _, _, q in run.evals) or isinstance(
      target, dict):
    targets = target if isinstance(target, dict) else FIGURE_TARGETS.get(
        run.benchmark or '')
    if not targets:
      raise ValueError(f'{path}: eval_accuracy holds several figures but '
                       'the log names no target for each (quality_target).')
    run.evals = [(t, e, figures_quality(q, targets)) for t, e, q in run.evals]
    run.target = 1.0
  else:
    run.evals = [(t, e, float(q)) for t, e, q in run.evals]
    run.target = None if target is None else float(target)
  return run


def plot(runs: list[RunLog], path: str, *, title: str = '',
         target: float | None = None, score_minutes: float | None = None,
         dropped: tuple[str, ...] = ()) -> str:
  """Writes a PNG of eval quality against time since run_start (seconds
  when the longest run is under two minutes, else minutes).

  Args:
    runs: parsed logs, one curve each, labelled with their run names.
    path: the PNG (local or gs://).
    title: the figure's title (default: the benchmark and the run's name).
    target: the quality target line (default: the logs' quality_target).
    score_minutes: the olympic score, drawn as a vertical line.
    dropped: names of the runs the score leaves out (drawn dashed).

  Returns:
    `path`.
  """
  import matplotlib  # Only runs that plot pay for the import.
  matplotlib.use('Agg')
  from matplotlib import pyplot

  target = target if target is not None else next(
      (r.target for r in runs if r.target is not None), None)
  longest = max([t for r in runs for t, _, _ in r.evals] +
                [(score_minutes or 0) * 60000.0], default=0)
  # Short runs (quickstarts) read better in seconds.
  unit, scale = ('seconds', 1000.0) if longest < 120000 else ('minutes',
                                                               60000.0)
  figure, axes = pyplot.subplots(figsize=(7, 4.5), dpi=100)
  for run in runs:
    if not run.evals:
      continue
    times = [t / scale for t, _, _ in run.evals]
    quality = [q for _, _, q in run.evals]
    label = run.name
    if run.minutes is not None:
      label += f' ({run.minutes * 60000.0 / scale:.3g} {unit[:3]}, '
      label += f'{run.status})'
    out = run.name in dropped
    if out:
      label += ', dropped'
    axes.plot(times, quality, marker='o', markersize=3, label=label,
              linestyle='--' if out else '-', alpha=0.5 if out else 1.0)
  if target is not None:
    axes.axhline(target, color='black', linestyle='--', linewidth=1,
                 label=f'target {target:g}')
  if score_minutes is not None:
    axes.axvline(score_minutes * 60000.0 / scale, color='black',
                 linestyle=':', linewidth=1.5, label=f'score {score_minutes * 60000.0 / scale:.3g} '
                 f'{unit[:3]} (olympic mean)')
  axes.set_xlabel(f'{unit} since run_start')
  axes.set_ylabel(f'eval {runs[0].metric}' if runs else 'eval quality')
  only = f', {runs[0].name}' if len(runs) == 1 else ''
  axes.set_title(title or
                 f'time to accuracy: {runs[0].benchmark or "run"}{only}')
  axes.grid(alpha=0.3)
  axes.legend(fontsize=8, loc='lower right')
  figure.tight_layout()
  with _open(path, 'wb') as f:
    figure.savefig(f, format='png')
  pyplot.close(figure)
  return path
