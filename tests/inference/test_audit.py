"""Audit verdicts (TEST01, TEST04, TEST05) judged on recorded results.

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


def audit_report(value, scenario='Offline', valid=True, estimate=None):
  summary = ({'* Early stopping 90th percentile estimate': str(estimate)}
             if estimate else {})
  return Report(scenario=scenario, mode='performance', valid=valid,
                reasons=[], metric='', value=value, quality=None,
                summary=summary, short_run=True)


def test_test05_needs_both_runs_valid_and_within_5_percent():
  passes = lambda got, ref, **kw: audit.verify_test05(
      audit=audit_report(got, **kw), reference=audit_report(ref, **kw))
  assert passes(960, 1000).passed and not passes(940, 1000).passed
  assert passes(2000, 1000).passed  # Faster under other seeds is fine.
  invalid = audit.verify_test05(audit=audit_report(1000, valid=False),
                                reference=audit_report(1000))
  assert not invalid.passed and 'other-seed run is INVALID' in str(invalid)
  # Latency: lower is better; the early stopping estimate is the score, and
  # under 0.2 ms (SingleStream) the threshold relaxes to 20%.
  ss = dict(scenario='SingleStream')
  slow = audit.verify_test05(
      audit=audit_report(1e6, estimate=1.04e6, **ss),
      reference=audit_report(1e6, estimate=1e6, **ss))
  assert slow.passed and '1.040x' in str(slow)
  assert not audit.verify_test05(
      audit=audit_report(1e6, estimate=1.06e6, **ss),
      reference=audit_report(1e6, estimate=1e6, **ss)).passed
  assert audit.verify_test05(
      audit=audit_report(1, estimate=1.9e5, **ss),
      reference=audit_report(1, estimate=1.6e5, **ss)).passed
