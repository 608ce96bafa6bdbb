"""Audit verdicts (TEST01, TEST04) judged on recorded results.

The timing half of an audit cannot be judged reliably from sub-second runs
on a shared machine; these tests pin the verdict logic on recorded figures,
and tests/inference/test_inference.py runs the real audits end to end.
"""

import json

import numpy as np

from inference import audit
from inference.run import Report


def report(value, scenario='Offline'):
  return Report(scenario=scenario, mode='performance', valid=True, reasons=[],
                metric='', value=value, quality=None, summary={},
                short_run=True)


def write_accuracy(folder, responses):
  folder.mkdir()
  entries = [{'qsl_idx': i, 'data': np.asarray(v, np.int32).tobytes().hex()}
             for i, v in responses.items()]
  (folder / 'mlperf_log_accuracy.json').write_text(json.dumps(entries))
  return str(folder)


def test_test04_passes_unless_the_same_sample_run_is_over_10_percent_faster():
  assert audit.verify_test04(audit=report(1050), reference=report(1000)).passed
  slow = audit.verify_test04(audit=report(900), reference=report(1000))
  assert slow.passed
  cached = audit.verify_test04(audit=report(1250), reference=report(1000))
  assert not cached.passed and '1.250x' in str(cached)
  # Latency scenarios: lower is faster.
  assert not audit.verify_test04(audit=report(0.8, 'SingleStream'),
                                 reference=report(1.0, 'SingleStream')).passed


def test_test01_needs_identical_responses_and_similar_speed(tmp_path):
  truth = {0: [3], 1: [7], 2: [1]}
  accuracy_dir = write_accuracy(tmp_path / 'accuracy', truth)
  honest = write_accuracy(tmp_path / 'honest', {0: [3], 2: [1]})
  lying = write_accuracy(tmp_path / 'lying', {0: [3], 2: [5]})
  kw = dict(accuracy_dir=accuracy_dir, dtype='int32')
  verdict = audit.verify_test01(audit=report(980), reference=report(1000),
                                audit_dir=honest, **kw)
  assert verdict.passed and '2 logged responses, 0 differ' in str(verdict)
  verdict = audit.verify_test01(audit=report(1000), reference=report(1000),
                                audit_dir=lying, **kw)
  assert not verdict.passed and '1 differ' in str(verdict)
  assert not audit.verify_test01(audit=report(850), reference=report(1000),
                                 audit_dir=honest, **kw).passed
