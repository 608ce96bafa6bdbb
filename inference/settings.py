"""LoadGen TestSettings from the model's defaults plus a user.conf.

user.conf lines read `model.scenario.key = value` (`*` matches any model or
scenario; times in ms). LoadGen silently ignores keys it does not know,
values it cannot parse and models it does not know, and rejects a whole file
for one trailing comment; this module reads the file first and names the
line, then hands LoadGen a copy without comments.
"""

import difflib
import math
import os
import re
import tempfile
from typing import Mapping

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
# Model names of MLPerf Inference's mlperf.conf (LoadGen 6.0.17 builds it
# in): user.conf lines for these are legitimate even when this run serves
# another model; any other name is a mistake.
MLPERF_MODELS = {
    '3d-unet', 'bert', 'deepseek-r1', 'deepseek-r1-interactive', 'dlrm',
    'dlrm-v2', 'dlrm-v3', 'gpt-oss-120b', 'gpt-oss-120b-interactive', 'gptj',
    'llama2-70b', 'llama2-70b-interactive', 'llama3_1-405b',
    'llama3_1-405b-interactive', 'llama3_1-8b', 'llama3_1-8b-edge',
    'llama3_1-8b-interactive', 'mixtral-8x7b', 'pointpainting',
    'qwen3-vl-235b-a22b', 'resnet50', 'retinanet', 'rgat', 'rnnt',
    'ssd-mobilenet', 'stable-diffusion-xl', 'wan-2', 'whisper', 'yolo'}
# Keys LoadGen reads as floating point; all others are whole numbers.
FLOAT_KEYS = {'target_qps', 'target_latency_percentile',
              'accuracy_log_probability'}
LINE = re.compile(r'^\s*([\w*-]+)\.([\w*]+)\.(\w+)\s*=\s*(\S+)\s*$')
# The rules' minimum duration of a submission run.
RULES_MIN_DURATION_MS = 600000


def user_conf_lines(path: str) -> list[tuple[int, str]]:
  """(line number, text) of each setting, comments and blank lines dropped."""
  with open(path) as f:
    numbered = [(n, line.split('#', 1)[0].strip())
                for n, line in enumerate(f, start=1)]
  return [(n, text) for n, text in numbered if text]


def check_user_conf(path: str, model: str = '') -> None:
  """Raises ValueError naming the line of an unknown model, scenario or key,
  or of a bad value."""
  known = MLPERF_MODELS | {model} - {''}
  for number, text in user_conf_lines(path):
    match = LINE.match(text)
    if not match:
      raise ValueError(f'{path}:{number}: "{text}" is not '
                       '"model.scenario.key = value".')
    name, scenario, key, value = match.groups()
    if name != '*' and name not in known:
      close = difflib.get_close_matches(name, sorted(known), n=1)
      hint = f'; did you mean {close[0]!r}?' if close else ''
      raise ValueError(f'{path}:{number}: no known model is named {name!r} '
                       f'(LoadGen would ignore the line){hint}')
    if scenario != '*' and scenario not in SCENARIOS:
      raise ValueError(f'{path}:{number}: unknown scenario {scenario!r}; '
                       f'one of {sorted(SCENARIOS)} or *.')
    if key not in KNOWN_KEYS:
      raise ValueError(f'{path}:{number}: LoadGen does not know the key '
                       f'{key!r} (it would ignore it silently).')
    if key in FLOAT_KEYS:
      try:
        ok = math.isfinite(float(value))
      except ValueError:
        ok = False
    else:
      ok = value.isdigit()
    if not ok:
      kind = 'a finite number' if key in FLOAT_KEYS else (
          'a whole number >= 0 (LoadGen reads "1e3" as 1 and "-5" as 2^64-5)')
      raise ValueError(f'{path}:{number}: {key} = {value!r} is not {kind}.')


def make_settings(*, model: str, scenario: str, mode: str,
                  user_conf: str = '', defaults: Mapping | None = None,
                  **values) -> lg.TestSettings:
  """TestSettings for `scenario`/`mode`: LoadGen's defaults, the model's,
  then user.conf, then values.

  Args:
    model: the model name user.conf lines use (e.g. resnet50).
    scenario: SingleStream, MultiStream, Server or Offline.
    mode: performance or accuracy.
    user_conf: optional user.conf path.
    defaults: TestSettings attributes of the model's benchmark where
      LoadGen's built-in mlperf.conf has none (the task's
      `inference_settings` of this scenario). Reading a user.conf makes
      LoadGen apply its mlperf.conf first, whose `*` lines would override
      them; each is set again unless the user.conf itself sets it.
    **values: TestSettings attributes to set last (e.g. min_duration_ms).
  """
  if scenario not in SCENARIOS:
    raise ValueError(f'Unknown scenario {scenario!r}: {sorted(SCENARIOS)}.')
  if mode not in MODES:
    raise ValueError(f'Unknown mode {mode!r}: {sorted(MODES)}.')
  defaults = dict(defaults or {})

  def fresh():
    settings = lg.TestSettings()
    settings.scenario, settings.mode = SCENARIOS[scenario], MODES[mode]
    for key, value in defaults.items():
      setattr(settings, key, value)
    return settings

  settings = fresh()
  if user_conf:
    check_user_conf(user_conf, model)
    read_user_conf(settings, user_conf, model, scenario)
    given = keys_user_conf_sets(user_conf, model, scenario, defaults)
    for key, value in defaults.items():
      if key not in given:
        setattr(settings, key, value)
  for key, value in values.items():
    if value is not None:
      setattr(settings, key, value)
  return settings


# LoadGen's FromConfig conf_type: 1 is a user.conf (the first one read in a
# process makes LoadGen apply its built-in mlperf.conf before it); any
# other non-zero type reads the file alone.
USER_CONF, FILE_ALONE = 1, 2


def _from_config(settings, lines: list[str], model: str, scenario: str,
                 conf_type: int = USER_CONF) -> bool:
  with tempfile.NamedTemporaryFile('w', suffix='.conf', delete=False) as f:
    f.write(''.join(line + '\n' for line in lines))
  try:
    return settings.FromConfig(f.name, model, scenario, conf_type) == 0
  finally:
    os.remove(f.name)


def keys_user_conf_sets(path: str, model: str, scenario: str,
                        keys) -> set[str]:
  """Which of the TestSettings attributes `keys` the user.conf's lines set
  for this model and scenario, as LoadGen reads them (the file alone, no
  mlperf.conf): read into two settings holding different values of each
  key, the keys it sets end equal."""
  lines = [text for _, text in user_conf_lines(path)]
  probes = []
  for offset in (1, 2):
    probe = lg.TestSettings()
    for key in keys:
      value = getattr(probe, key)
      setattr(probe, key, value + offset if isinstance(value, int)
              else value / 4 * offset)
    _from_config(probe, lines, model, scenario, FILE_ALONE)
    probes.append(probe)
  return {key for key in keys
          if getattr(probes[0], key) == getattr(probes[1], key)}


def read_user_conf(settings, path: str, model: str, scenario: str) -> None:
  """Applies user.conf through LoadGen, from a copy without comments (LoadGen
  rejects the whole file for a trailing one).

  Raises:
    ValueError: naming the line LoadGen cannot parse.
  """
  lines = user_conf_lines(path)
  if _from_config(settings, [text for _, text in lines], model, scenario):
    return
  for number, text in lines:  # Find the line: LoadGen does not say.
    if not _from_config(lg.TestSettings(), [text], model, scenario):
      raise ValueError(f'{path}:{number}: LoadGen cannot parse "{text}".')
  raise ValueError(f'LoadGen could not read {path}.')
