"""tools.score on real quickstart runs: checker verdicts, the olympic mean as
MLPerf's summarizer computes it, too few runs, the plot."""

import json
import os
import re
import shutil
import subprocess

import pytest

from tests import helpers
from tools import score as score_lib
from training import time_to_accuracy

pytestmark = pytest.mark.slow  # Five real training runs.


def minutes(log_path):
  """Time to train from the raw log lines, independently of the tool."""
  times = {}
  for line in open(log_path):
    if ':::MLLOG' in line:
      entry = json.loads(line.split(':::MLLOG ', 1)[1])
      if entry['key'] in ('run_start', 'run_stop'):
        times[entry['key']] = entry['time_ms']
  return (times['run_stop'] - times['run_start']) / 60000.0


def test_five_model_dirs_are_collected_checked_scored_and_plotted(
    five_runs, tmp_path):
  done = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.score', *five_runs, '--system=cpu',
       f'--collect_to={tmp_path / "results"}'],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2'))
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  folder = tmp_path / 'results' / 'cpu' / 'resnet'
  assert sorted(os.listdir(folder)) == [
      'result_0.txt', 'result_1.txt', 'result_2.txt', 'result_3.txt',
      'result_4.txt', 'time_to_accuracy.png']
  assert done.stdout.count('PASS') == 5
  # Each result names the model_dir it came from, in the order given.
  for i, model_dir in enumerate(five_runs):
    assert re.search(rf'^  result_{i} +PASS .*\(from {re.escape(model_dir)}\)$',
                     done.stdout, re.M), done.stdout
  # Fastest and slowest.
  assert len(re.findall(r'^  result_\d .* dropped  ', done.stdout, re.M)) == 2
  expected = sorted(minutes(os.path.join(d, 'mlperf.log'))
                    for d in five_runs)[1:4]
  printed = float(re.search(r'score: ([\d.]+) min', done.stdout).group(1))
  assert printed == pytest.approx(sum(expected) / 3, abs=1e-4)
  assert (folder / 'time_to_accuracy.png').read_bytes()[:4] == b'\x89PNG'


def shifted(log_path, out_path, minutes_to_train, *, converged=True):
  """A copy of a real log whose run_stop is `minutes_to_train` after
  run_start; not converged: every eval below MLPerf's ResNet target."""
  lines, start = [], None
  for line in open(log_path):
    if ':::MLLOG' in line:
      entry = json.loads(line.split(':::MLLOG ', 1)[1])
      if entry['key'] == 'run_start':
        start = entry['time_ms']
      if entry['key'] == 'run_stop':
        entry['time_ms'] = start + minutes_to_train * 60000
        entry['metadata']['status'] = 'success' if converged else 'aborted'
      if entry['key'] == 'eval_accuracy' and not converged:
        entry['value'] = 0.5
      line = ':::MLLOG ' + json.dumps(entry) + '\n'
    lines.append(line)
  with open(out_path, 'w') as f:
    f.writelines(lines)


def test_the_olympic_mean_drops_fastest_and_slowest_and_failed_runs(
    five_runs, tmp_path):
  log = os.path.join(five_runs[0], 'mlperf.log')
  folder = tmp_path / 'resnet'
  folder.mkdir()
  for i, m in enumerate([5.0, 1.0, 3.0, 2.0, 4.0]):
    shifted(log, folder / f'result_{i}.txt', m)
  result = score_lib.score_folder(str(folder), ruleset='0.7.0')
  assert result.score == pytest.approx(3.0)  # (2 + 3 + 4) / 3.
  assert all(passed for _, passed, _, _ in result.runs)
  assert sorted(result.dropped) == ['result_0', 'result_1']  # 5 and 1 min.
  # One run that fails the checker is dropped as the slowest.
  shifted(log, folder / 'result_1.txt', 1.0, converged=False)
  result = score_lib.score_folder(str(folder), ruleset='0.7.0')
  assert [passed for _, passed, _, _ in result.runs] == [
      True, False, True, True, True]
  assert result.score == pytest.approx((3.0 + 4.0 + 5.0) / 3)
  assert sorted(result.dropped) == ['result_1', 'result_3']  # Failed, 2 min.
  # Two: no score.
  shifted(log, folder / 'result_2.txt', 3.0, converged=False)
  assert score_lib.score_folder(str(folder), ruleset='0.7.0').score is None


def test_too_few_runs_or_mixed_benchmarks_are_one_line(five_runs, tmp_path):
  folder = tmp_path / 'resnet'
  folder.mkdir()
  for i in range(3):
    shutil.copyfile(os.path.join(five_runs[i], 'mlperf.log'),
                    folder / f'result_{i}.txt')
  done = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.score', str(folder)],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2'))
  assert done.returncode == 2
  assert done.stderr.strip().splitlines()[-1] == (
      f'error: {folder} has 3 runs; a resnet score needs 5 (MLPerf training '
      'rules).')
  text = open(folder / 'result_0.txt').read().replace(
      '"value": "resnet"', '"value": "bert"')
  (folder / 'result_0.txt').write_text(text)
  with pytest.raises(ValueError, match='mixes benchmarks'):
    score_lib.score_folder(str(folder), ruleset='0.7.0')


def test_a_run_log_reads_back_with_its_target(five_runs):
  run = time_to_accuracy.read_log(os.path.join(five_runs[0], 'mlperf.log'))
  assert run.benchmark == 'resnet' and run.status == 'success'
  assert run.target == 0.9 and run.evals[-1][2] >= 0.9
  assert run.minutes == pytest.approx(
      minutes(os.path.join(five_runs[0], 'mlperf.log')))
