"""models/common/inference_v05.py against r0.5's own mlperf.conf as LoadGen 6
reads it (tests/inference/data/v05_mlperf.conf), and against the v0.5 rules'
table."""

import os

import mlperf_loadgen as lg
import pytest

from inference import settings as settings_lib
from models.common import inference_v05

CONF = os.path.join(os.path.dirname(__file__), 'data', 'v05_mlperf.conf')
# LoadGen's name of each scenario's settings in r0.5's conf.
SCENARIO_KEYS = {
    'SingleStream': ('single_stream_expected_latency_ns',
                     'single_stream_target_latency_percentile'),
    'MultiStream': ('multi_stream_samples_per_query',
                    'multi_stream_expected_latency_ns',
                    'multi_stream_target_latency_percentile'),
    'Server': ('server_target_qps', 'server_target_latency_ns',
               'server_target_latency_percentile'),
    'Offline': ('offline_expected_qps',),
}


@pytest.mark.parametrize('model', sorted(inference_v05.BENCHMARKS))
@pytest.mark.parametrize('scenario', sorted(settings_lib.SCENARIOS))
def test_v05_settings_are_what_loadgen_reads_from_r05_mlperf_conf(model,
                                                                  scenario):
  lines = [text for _, text in settings_lib.user_conf_lines(CONF)]
  read = lg.TestSettings()
  read.scenario = settings_lib.SCENARIOS[scenario]
  assert settings_lib._from_config(read, lines, model, scenario,
                                   settings_lib.FILE_ALONE)
  ours = inference_v05.settings(model)[scenario]
  keys = ('min_duration_ms', 'min_query_count') + SCENARIO_KEYS[scenario]
  assert set(ours) == set(keys) | set(inference_v05.SEEDS)
  for key in keys:
    assert ours[key] == pytest.approx(getattr(read, key)), key
  assert inference_v05.multistream_bound(model) == pytest.approx((
      read.multi_stream_expected_latency_ns / 1e9,
      read.multi_stream_target_latency_percentile))


def test_v05_rules_table():
  # inference_policies@32c6bfa "Benchmarks" and the v0.5 submission
  # checker: QSL sizes and the closed division's gates.
  assert {m: (b.performance_samples, b.quality)
          for m, b in inference_v05.BENCHMARKS.items()} == {
              'resnet50': (1024, 0.99), 'mobilenet': (1024, 0.98),
              'ssd-resnet34': (64, 0.99), 'ssd-mobilenet': (256, 0.99),
              'gnmt': (3903900, 0.99)}


def test_an_unknown_v05_model_is_named():
  with pytest.raises(ValueError, match=r"v0.5 has no benchmark 'bert'"):
    inference_v05.settings('bert')
