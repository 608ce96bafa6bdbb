"""A benchmark judged on several figures (Mask R-CNN's box and mask AP):
the MLPerf log's eval_accuracy holds them all, and the time-to-accuracy
reader turns them into one quality against their targets, for our logs and
Google's."""

import json

import pytest

from training import events as ev
from training import mlperf_log
from training import time_to_accuracy

TARGETS = {'BBOX': 0.377, 'SEGM': 0.339}


def test_the_log_holds_every_figure_and_reads_back_as_one_quality(tmp_path):
  path = str(tmp_path / 'mlperf.log')
  log = mlperf_log.MlperfLog(
      path=path, benchmark='maskrcnn', submission=mlperf_log.Submission(),
      epoch_num=lambda step: step // 10, target=TARGETS,
      accuracy=lambda m: {'BBOX': m['AP'], 'SEGM': m['segm_AP']})
  figures = [(0.30, 0.35), (0.38, 0.33), (0.39, 0.34)]
  log(ev.InitStart())
  log(ev.InitEnd(step=0))
  log(ev.RunStart(step=0))
  for i, (box, mask) in enumerate(figures, start=1):
    log(ev.EvalStart(step=10 * i))
    log(ev.EvalEnd(step=10 * i, quality=0.0,
                   metrics={'AP': box, 'segm_AP': mask}))
  log(ev.RunEnd(step=30, status='success', quality=1.0, time_to_train=1.0))
  lines = [json.loads(l.split(time_to_accuracy.MLLOG_PREFIX, 1)[1])
           for l in open(path) if time_to_accuracy.MLLOG_PREFIX in l]
  accuracy = [l for l in lines if l['key'] == 'eval_accuracy']
  assert [l['value'] for l in accuracy] == [
      {'BBOX': b, 'SEGM': m} for b, m in figures]
  assert [l['metadata']['epoch_num'] for l in accuracy] == [1, 2, 3]
  run = time_to_accuracy.read_log(path)
  assert run.target == 1.0
  quality = [q for _, _, q in run.evals]
  assert quality == pytest.approx([0.30 / 0.377, 0.33 / 0.339,
                                   min(0.39 / 0.377, 0.34 / 0.339)])
  # Reaches 1 only when both figures reach their targets.
  assert [q >= 1.0 for q in quality] == [False, False, True]


def test_googles_log_reads_with_the_benchmark_named_last(tmp_path):
  # Lines as Google's v0.7 result_*.txt has them (tpu-v3-1024, maskrcnn):
  # the submission keys come after the run, with time 0.
  def line(key, value, time_ms, **meta):
    return ':::MLLOG ' + json.dumps({'namespace': '', 'time_ms': time_ms,
                                     'key': key, 'value': value,
                                     'metadata': meta})
  path = tmp_path / 'result_0.txt'
  path.write_text('\n'.join([
      line('run_start', None, 1000),
      line('eval_accuracy', {'BBOX': 0.3774, 'SEGM': 0.3402}, 61000,
           epoch_num=13),
      line('run_stop', None, 62000, status='success'),
      line('submission_benchmark', 'maskrcnn', 0)]) + '\n')
  run = time_to_accuracy.read_log(str(path))
  assert run.benchmark == 'maskrcnn' and run.target == 1.0
  assert run.evals == [(60000, 13, pytest.approx(0.3774 / 0.377))]
  # Figures with no known targets are named, not guessed.
  path.write_text(path.read_text().replace('maskrcnn', 'other'))
  with pytest.raises(ValueError, match='several figures .* no target'):
    time_to_accuracy.read_log(str(path))
