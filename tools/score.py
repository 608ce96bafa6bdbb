"""The MLPerf score of N runs, each run's checker verdict, and their plot.

  python -m tools.score results/                       # a results tree
  python -m tools.score results/tpu-v3-32/bert         # one benchmark
  python -m tools.score runs/qs_1 runs/qs_2 ... --system=cpu   # model_dirs

A results folder holds `result_<i>.txt` MLPerf logs (the submission layout
`results/<system>/<benchmark>/result_<i>.txt`). Model dirs are collected
into that layout first (`--collect_to`, default a folder beside nothing: a
temporary one), their `mlperf.log` becoming `result_<i>.txt`.

For each benchmark folder: every run through the compliance checker, its time
to train (run_start to run_stop), and the score as MLPerf computes it: the
olympic mean (fastest and slowest dropped) of the runs' minutes, from
`mlperf_logging`'s result summarizer (one run that fails the checker may be
dropped, counting as the slowest; two or more: no score). MLPerf asks for a
number of runs per benchmark (5 for ResNet, 10 for BERT): fewer is an error.
The runs' time-to-accuracy curves go to `<folder>/time_to_accuracy.png`.
"""

import contextlib
import dataclasses
import glob
import io
import logging
import os
import shutil
import sys
import tempfile

from absl import app
from absl import flags

from core import entry_point
from training import time_to_accuracy

FLAGS = flags.FLAGS
RESULT_GLOB = 'result_*.txt'


@dataclasses.dataclass
class Score:
  folder: str
  benchmark: str
  runs: list  # (file, passed checker, minutes or None, status).
  required: int
  score: float | None  # Minutes; None when too many runs failed.
  dropped: tuple = ()  # Run names the olympic mean leaves out.
  sources: dict = dataclasses.field(default_factory=dict)  # File -> model_dir.

  def __str__(self):
    lines = [f'{self.folder}: {self.benchmark}, {len(self.runs)} runs '
             f'(MLPerf asks for {self.required})']
    for path, passed, minutes, status in self.runs:
      name = time_to_accuracy.run_name(path)
      time = f'{minutes:.4f} min' if minutes is not None else 'no run_stop'
      out = '  dropped' if name in self.dropped else ''
      source = (f'  (from {self.sources[path]})' if path in self.sources
                else '')
      lines.append(f'  {name:10s} {"PASS" if passed else "FAIL"}  {time}  '
                   f'{status}{out}{source}')
    if self.score is None:
      lines.append('score: none (more than one run failed the checker or '
                   'missed the target)')
    else:
      lines.append(f'score: {self.score:.4f} min (olympic mean: fastest and '
                   'slowest dropped)')
    return '\n'.join(lines)


def required_runs(benchmark: str) -> int:
  from mlperf_logging import benchmark_meta
  counts = benchmark_meta.get_result_file_counts('training')
  if benchmark not in counts:
    raise ValueError(f'Unknown MLPerf benchmark {benchmark!r} (known: '
                     f'{", ".join(sorted(counts))}).')
  return counts[benchmark]


def _summarizer_score(folder: str, benchmark: str, ruleset: str):
  """(file -> minutes of runs that pass, olympic score or None)."""
  # mlperf_logging 4.1.68's `compute_score` command crashes ("too many
  # values to unpack"); the summarizer's own function is what it wraps.
  from mlperf_logging.result_summarizer import result_summarizer
  with contextlib.redirect_stdout(io.StringIO()):
    scores, _, score, _, _ = (
        result_summarizer._compute_strong_score_standalone(  # pylint: disable=protected-access
            benchmark, 'system', False, folder, 'training', ruleset,
            return_full_scores=True))
  return scores, score


def dropped_runs(runs: list) -> tuple:
  """The runs the olympic mean leaves out, by name: the failed one (it
  counts as the slowest), the fastest passing run, and the slowest passing
  run unless a failed one took its place (mlperf_logging's
  _compute_olympic_average with one score dropped at each end)."""
  passing = sorted((m, time_to_accuracy.run_name(f)) for f, ok, m, _ in runs
                   if ok and m is not None)
  failed = [time_to_accuracy.run_name(f) for f, ok, m, _ in runs
            if not (ok and m is not None)]
  out = failed + [passing[0][1]] if passing else failed
  if not failed and len(passing) > 1:
    out.append(passing[-1][1])
  return tuple(out)


def score_folder(folder: str, *, ruleset: str, plot: bool = True,
                 sources: dict | None = None) -> Score:
  """Scores one benchmark's result_*.txt files.

  Raises:
    ValueError: no results, logs of several benchmarks, or fewer runs than
      MLPerf asks for.
  """
  files = sorted(glob.glob(os.path.join(folder, RESULT_GLOB)),
                 key=lambda p: (len(p), p))
  if not files:
    raise ValueError(f'{folder} holds no {RESULT_GLOB} files.')
  logs = [time_to_accuracy.read_log(f) for f in files]
  benchmarks = {log.benchmark for log in logs}
  if len(benchmarks) != 1 or None in benchmarks:
    raise ValueError(f'{folder} mixes benchmarks {sorted(map(str, benchmarks))}'
                     ': one folder a benchmark.')
  benchmark = benchmarks.pop()
  required = required_runs(benchmark)
  if len(files) < required:
    raise ValueError(f'{folder} has {len(files)} runs; a {benchmark} score '
                     f'needs {required} (MLPerf training rules).')
  passing, score = _summarizer_score(folder, benchmark, ruleset)
  runs = [(f, f in passing, log.minutes, log.status)
          for f, log in zip(files, logs)]
  dropped = dropped_runs(runs) if score is not None else ()
  if plot:
    scored = (f', score {score:.4g} min' if score is not None else
              ', no score')
    time_to_accuracy.plot(
        logs, os.path.join(folder, 'time_to_accuracy.png'),
        title=f'time to accuracy: {benchmark}, {len(logs)} runs in '
              f'{os.path.basename(os.path.dirname(folder.rstrip("/")))}/'
              f'{os.path.basename(folder.rstrip("/"))}{scored}',
        score_minutes=score, dropped=dropped)
  return Score(folder=folder, benchmark=benchmark, runs=runs,
               required=required, score=score, dropped=dropped,
               sources={f: s for f, s in (sources or {}).items()
                        if f in files})


def collect(model_dirs: list[str], target: str, system: str,
            sources: dict | None = None) -> list[str]:
  """Copies each model_dir's mlperf.log to
  <target>/<system>/<benchmark>/result_<i>.txt, in the order given; returns
  the folders and records which model_dir became which file in `sources`."""
  folders = []
  counts = {}
  sources = {} if sources is None else sources
  for model_dir in model_dirs:
    log = os.path.join(model_dir, 'mlperf.log')
    if not os.path.exists(log):
      raise ValueError(f'{model_dir} has no mlperf.log (and no '
                       f'{RESULT_GLOB}).')
    benchmark = time_to_accuracy.read_log(log).benchmark
    folder = os.path.join(target, system, str(benchmark))
    os.makedirs(folder, exist_ok=True)
    i = counts.get(folder, 0)
    counts[folder] = i + 1
    result = os.path.join(folder, f'result_{i}.txt')
    shutil.copyfile(log, result)
    sources[result] = model_dir
    if folder not in folders:
      folders.append(folder)
  return folders


def benchmark_folders(paths: list[str], *, collect_to: str, system: str,
                      sources: dict | None = None) -> list[str]:
  """Result folders named or found below `paths`; model dirs collected
  (`sources` gets which model_dir became which result file)."""
  folders, model_dirs = [], []
  for path in paths:
    if not os.path.isdir(path):
      raise ValueError(f'{path} is not a folder.')
    if glob.glob(os.path.join(path, RESULT_GLOB)):
      folders.append(path)
    elif os.path.exists(os.path.join(path, 'mlperf.log')):
      model_dirs.append(path)
    else:
      found = sorted({os.path.dirname(p) for p in glob.glob(
          os.path.join(path, '**', RESULT_GLOB), recursive=True)})
      if not found:
        raise ValueError(f'{path} holds no {RESULT_GLOB} files and no '
                         'mlperf.log.')
      folders += found
  if model_dirs:
    folders += collect(model_dirs, collect_to, system, sources)
  return folders


def main(argv):
  paths = argv[1:]
  if not paths:
    raise app.UsageError('Give results folders or model dirs.')
  # The checker logs every rule it runs; the verdicts are printed below.
  logging.getLogger().setLevel(logging.ERROR)
  collect_to = FLAGS.collect_to or tempfile.mkdtemp(prefix='results_')
  sources = {}
  try:
    folders = benchmark_folders(paths, collect_to=collect_to,
                                system=FLAGS.system, sources=sources)
    scores = [score_folder(f, ruleset=FLAGS.ruleset, sources=sources)
              for f in folders]
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  for score in scores:
    print(score)
    print(f'plot: {os.path.join(score.folder, "time_to_accuracy.png")}')
  return 0 if all(s.score is not None for s in scores) else 1


if __name__ == '__main__':
  flags.DEFINE_string('ruleset', '0.7.0', 'Compliance ruleset of the logs.')
  flags.DEFINE_string('system', 'system', 'The system folder name for '
                      'collected model dirs.')
  flags.DEFINE_string('collect_to', '', 'The folder that model dirs\' logs '
                      'are copied into, as <system>/<benchmark>/result_<i>.txt '
                      '(default: a new temporary folder).')
  entry_point.parse_flags_early(lambda: None)
  app.run(entry_point.tool_main(main))
