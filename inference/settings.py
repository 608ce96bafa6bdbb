"""LoadGen TestSettings from the model's defaults plus a user.conf.

user.conf lines read `model.scenario.key = value` (`*` matches any model or
scenario; times in ms). LoadGen silently ignores keys it does not know and
values it cannot parse; this module reads the file first and names them.
"""

import re

import mlperf_loadgen as lg

SCENARIOS = {
    'SingleStream': lg.TestScenario.SingleStream,
    'MultiStream': lg.TestScenario.MultiStream,
    'Server': lg.TestScenario.Server,
    'Offline': lg.TestScenario.Offline,
}
MODES = {'performance': lg.TestMode.PerformanceOnly,
         'accuracy': lg.TestMode.AccuracyOnly}
# The keys LoadGen's config parser understands (test_settings_internal.cc).
KNOWN_KEYS = {
    'qsl_rng_seed', 'sample_index_rng_seed', 'schedule_rng_seed',
    'accuracy_log_rng_seed', 'accuracy_log_probability',
    'accuracy_log_sampling_target', 'test05', 'test05_qsl_rng_seed',
    'test05_sample_index_rng_seed', 'test05_schedule_rng_seed',
    'target_latency_percentile', 'target_latency', 'target_qps',
    'samples_per_query', 'max_async_queries', 'min_duration', 'max_duration',
    'min_query_count', 'max_query_count', 'performance_sample_count_override',
    'performance_issue_unique', 'performance_issue_same',
    'performance_issue_same_index', 'coalesce_queries',
    'server_num_issue_query_threads', 'sample_concatenate_permutation',
    'print_timestamps', 'use_token_latencies', 'ttft_latency', 'tpot_latency',
    'infer_token_latencies', 'token_latency_scaling_factor',
}
LINE = re.compile(r'^\s*([\w*-]+)\.([\w*]+)\.(\w+)\s*=\s*(\S+)\s*$')
# The rules' minimum duration of a submission run.
RULES_MIN_DURATION_MS = 600000


def check_user_conf(path: str) -> None:
  """Raises ValueError naming the line of an unknown key or a bad value."""
  with open(path) as f:
    for number, line in enumerate(f, start=1):
      text = line.split('#', 1)[0].strip()
      if not text:
        continue
      match = LINE.match(text)
      if not match:
        raise ValueError(f'{path}:{number}: "{text}" is not '
                         '"model.scenario.key = value".')
      _, scenario, key, value = match.groups()
      if scenario != '*' and scenario not in SCENARIOS:
        raise ValueError(f'{path}:{number}: unknown scenario {scenario!r}; '
                         f'one of {sorted(SCENARIOS)} or *.')
      if key not in KNOWN_KEYS:
        raise ValueError(f'{path}:{number}: LoadGen does not know the key '
                         f'{key!r} (it would ignore it silently).')
      try:
        float(value)
      except ValueError:
        raise ValueError(f'{path}:{number}: {key} = {value!r} is not a '
                         'number.') from None


def make_settings(*, model: str, scenario: str, mode: str,
                  user_conf: str = '', **values) -> lg.TestSettings:
  """TestSettings for `scenario`/`mode`: defaults, then user.conf, then values.

  Args:
    model: the model name user.conf lines use (e.g. resnet50).
    scenario: SingleStream, MultiStream, Server or Offline.
    mode: performance or accuracy.
    user_conf: optional user.conf path.
    **values: TestSettings attributes to set last (e.g. min_duration_ms).
  """
  if scenario not in SCENARIOS:
    raise ValueError(f'Unknown scenario {scenario!r}: {sorted(SCENARIOS)}.')
  if mode not in MODES:
    raise ValueError(f'Unknown mode {mode!r}: {sorted(MODES)}.')
  settings = lg.TestSettings()
  settings.scenario, settings.mode = SCENARIOS[scenario], MODES[mode]
  if user_conf:
    check_user_conf(user_conf)
    if settings.FromConfig(user_conf, model, scenario) != 0:
      raise ValueError(f'LoadGen could not read {user_conf}.')
  for key, value in values.items():
    if value is not None:
      setattr(settings, key, value)
  return settings
