"""inference/table.py's results table on a fake `run` (each call recorded
and answered with a Report): which runs it asks for, the Server target it
derives, the quality gate and the cells. The real LoadGen runs behind it
are tested in tests/inference/test_inference_mobilenet.py."""

import types

from inference import run as run_lib
from inference import table


def fake_run(calls, quality, rate=1000.0):
  def run(mode, folder, **extra):
    calls.append((mode, folder, extra.get('scenario'),
                  extra.get('server_target_qps'),
                  extra.get('multi_stream_samples_per_query'),
                  extra['backend']))
    scenario = extra.get('scenario')
    n = extra.get('multi_stream_samples_per_query') or 1
    value = {'Offline': rate, 'SingleStream': 2.5e6, 'Server': rate / 2,
             'MultiStream': n * 1e6}[scenario]
    return run_lib.Report(
        scenario=scenario, mode=mode, valid=mode == 'performance' or None,
        reasons=[], metric='', value=value,
        quality=quality[extra['backend']] if mode == 'accuracy' else None,
        summary={}, short_run=True)
  return run


def test_every_scenario_of_each_precision_and_the_int8_gate():
  calls = []
  task = types.SimpleNamespace(inference_model='mobilenet')
  run = fake_run(calls, {'fp32': 0.96, 'int8': 0.93})
  text = table.results_table(run, task, {'FP32': 'fp32', 'INT8': 'int8'},
                             settings='v0.5', server_qps=0.0, count=64)
  # Server at half the precision's own Offline rate.
  assert ('performance', 'fp32/server', 'Server', 500.0, None, 'fp32') in calls
  # v0.5 MultiStream: 1 ms a sample, 50 ms bound: 50 samples a query.
  ms = [c[4] for c in calls if c[2] == 'MultiStream' and c[5] == 'int8']
  assert 50 in ms and 51 in ms and max(ms) <= 64
  assert '| FP32 | 0.9600 | 1000.0 samples/s (VALID) |' in text
  # 0.93 / 0.96 = 96.88% < v0.5's 98% for MobileNet.
  assert '| INT8 | 0.9300 (96.88% of FP32, gate 98%: FAILED) |' in text
  assert text.count('50 samples a query (emulated)') == 2


def test_current_settings_use_loadgens_multistream_and_todays_gate():
  calls = []
  task = types.SimpleNamespace(inference_model='resnet50')
  run = fake_run(calls, {'fp32': 0.76, 'int8': 0.755})
  text = table.results_table(run, task, {'FP32': 'fp32', 'INT8': 'int8'},
                             settings='current', server_qps=300.0)
  assert {c[3] for c in calls if c[2] == 'Server'} == {300.0}
  assert sum(c[2] == 'MultiStream' for c in calls) == 2
  assert 'p99 1.00 ms (VALID)' in text
  assert '(99.34% of FP32, gate 99%: passed)' in text
