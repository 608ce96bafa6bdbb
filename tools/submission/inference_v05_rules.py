"""MLPerf Inference v0.5's submission rules, as its checker applies them.

The checker is a script in mlcommons/inference (v0.5/tools/submission/
submission-checker.py with system_desc_id.json and system_desc_id_imp.json,
commit 675557a5, 2019-10-18), not a package; this is our reading of it,
rule by rule, so a package is checked here before it is written:

- `<division>/<submitter>/results/<system>/<model>/<scenario>/`: the model
  one of v0.5's in the closed division; `accuracy/` holds exactly
  mlperf_log_accuracy.json, mlperf_log_summary.txt, mlperf_log_detail.txt
  and accuracy.txt (mlperf_log_trace.json and results.json are let
  through), accuracy.txt has `accuracy=`, `mAP=` or `BLEU:` at least the
  model's target; `performance/run_1` (Server: run_1 to run_5) holds the
  three LoadGen files, its summary says `Result is : VALID`, its
  performance_sample_count is at least the model's and its seeds are
  v0.5's.
- `systems/<system>.json` has exactly system_desc_id.json's fields, its
  submitter and division those of the folders.
- `measurements/<system>/<model>/<scenario>/` holds mlperf.conf, user.conf,
  README.md and `<system>_<impl>_<scenario>.json` with exactly
  system_desc_id_imp.json's fields; `code/<model>/<impl>/` exists.

One deviation, said where it applies: the v0.5 checker reads the
scenario's metric under v0.5 LoadGen's names ("Samples per query" for
MultiStream); today's LoadGen (6.x) writes its own, so the metric is not
read here, only the verdict.
"""

import json
import os
import re

from tools.submission import system as system_lib

MODELS = ('ssd-small', 'ssd-large', 'mobilenet', 'resnet', 'gnmt')
# The suite's model names (Task.inference_model) as v0.5's folders.
FOLDER = {'mobilenet': 'mobilenet', 'resnet50': 'resnet',
          'ssd-mobilenet': 'ssd-small', 'ssd-resnet34': 'ssd-large',
          'gnmt': 'gnmt'}
PERFORMANCE_SAMPLE_COUNT = {'mobilenet': 1024, 'resnet': 1024,
                            'ssd-small': 256, 'ssd-large': 64,
                            'gnmt': 3903900}
ACCURACY_TARGET = {'mobilenet': 71.68 * 0.98, 'resnet': 76.46 * 0.99,
                   'ssd-small': 22 * 0.99, 'ssd-large': 20 * 0.99,
                   'gnmt': 23.9 * 0.99}
SEEDS = {'qsl_rng_seed': 3133965575612453542,
         'sample_index_rng_seed': 665484352860916858,
         'schedule_rng_seed': 3622009729038561421}
LOADGEN_FILES = ('mlperf_log_accuracy.json', 'mlperf_log_summary.txt',
                 'mlperf_log_detail.txt')
ACCURACY_FILES = LOADGEN_FILES + ('accuracy.txt',)
IGNORED = ('mlperf_log_trace.json', 'results.json')
MEASUREMENT_FILES = ('mlperf.conf', 'user.conf', 'README.md')
IMPLEMENTATION_FIELDS = ('input_data_types', 'retraining',
                         'starting_weights_filename', 'weight_data_types',
                         'weight_transformations')
SERVER_RUNS = ('run_1', 'run_2', 'run_3', 'run_4', 'run_5')


def _dirs(path: str) -> list[str]:
  return sorted(f for f in os.listdir(path)
                if os.path.isdir(os.path.join(path, f)))


def _files(path: str) -> set[str]:
  return {f for f in os.listdir(path)
          if os.path.isfile(os.path.join(path, f))} - set(IGNORED)


def _summary(path: str) -> dict:
  values = {}
  with open(path) as f:
    for line in f:
      key, sep, value = line.partition(':')
      if sep:
        values.setdefault(key.strip(), value.strip())
  return values


def _accuracy(path: str) -> float | None:
  with open(path) as f:
    for line in f:
      m = re.match(r'^(?:accuracy=|mAP=|BLEU:\s*)([\d.]+)', line)
      if m:
        return float(m.group(1))
  return None


def check(root: str) -> list[str]:
  """Every rule the package at `root` breaks, one line each."""
  problems = []
  for division in _dirs(root):
    if division not in ('open', 'closed'):
      problems.append(f'{division}: the top folders are open and closed.')
      continue
    for submitter in _dirs(os.path.join(root, division)):
      problems += _check_submitter(root, division, submitter)
  if not problems and not any(os.path.isdir(os.path.join(root, d))
                              for d in ('open', 'closed')):
    problems.append(f'{root} has no open/ or closed/ folder.')
  return problems


def _check_submitter(root, division, submitter) -> list[str]:
  base = os.path.join(root, division, submitter)
  problems = []
  results = os.path.join(base, 'results')
  if not os.path.isdir(results):
    return [f'{division}/{submitter} has no results/.']
  for system in _dirs(results):
    problems += _check_system_file(base, division, submitter, system)
    for model in _dirs(os.path.join(results, system)):
      if division == 'closed' and model not in MODELS:
        problems.append(f'results/{system}/{model}: not a v0.5 model '
                        f'({", ".join(MODELS)}).')
      for scenario in _dirs(os.path.join(results, system, model)):
        where = os.path.join(results, system, model, scenario)
        problems += _check_scenario(where, model, scenario)
        problems += _check_measurements(base, system, model, scenario)
  return problems


def _check_scenario(where, model, scenario) -> list[str]:
  problems = []
  accuracy = os.path.join(where, 'accuracy')
  if not os.path.exists(os.path.join(accuracy, 'accuracy.txt')):
    return [f'{accuracy} has no accuracy.txt.']
  if _files(accuracy) != set(ACCURACY_FILES):
    problems.append(f'{accuracy} holds {sorted(_files(accuracy))}, not '
                    f'{sorted(ACCURACY_FILES)}.')
  value = _accuracy(os.path.join(accuracy, 'accuracy.txt'))
  if value is None:
    problems.append(f'{accuracy}/accuracy.txt has no accuracy=, mAP= or '
                    'BLEU: line.')
  elif model in ACCURACY_TARGET and value < ACCURACY_TARGET[model]:
    problems.append(f'{accuracy}: accuracy {value} is under v0.5\'s '
                    f'{ACCURACY_TARGET[model]:.2f} for {model}.')
  for run in (SERVER_RUNS if scenario == 'Server' else ('run_1',)):
    perf = os.path.join(where, 'performance', run)
    if not os.path.isdir(perf):
      problems.append(f'{perf} is missing.')
      continue
    if _files(perf) != set(LOADGEN_FILES):
      problems.append(f'{perf} holds {sorted(_files(perf))}, not '
                      f'{sorted(LOADGEN_FILES)}.')
      continue
    summary = _summary(os.path.join(perf, 'mlperf_log_summary.txt'))
    if summary.get('Result is') != 'VALID':
      problems.append(f'{perf}: LoadGen says {summary.get("Result is")}, '
                      'not VALID.')
    need = PERFORMANCE_SAMPLE_COUNT.get(model)
    count = int(summary.get('performance_sample_count', 0))
    if need and count < need:
      problems.append(f'{perf}: performance_sample_count {count}, v0.5 '
                      f'wants {need} for {model}.')
    for seed, value in SEEDS.items():
      if summary.get(seed) != str(value):
        problems.append(f'{perf}: {seed} {summary.get(seed)}, not v0.5\'s '
                        f'{value}.')
  return problems


def _check_system_file(base, division, submitter, system) -> list[str]:
  path = os.path.join(base, 'systems', f'{system}.json')
  if not os.path.exists(path):
    return [f'{path} is missing.']
  with open(path) as f:
    desc = json.load(f)
  problems = [f'{path} lacks {k}.' for k in system_lib.INFERENCE_V05_FIELDS
              if k not in desc]
  problems += [f'{path} has a field v0.5 does not know: {k}.' for k in desc
               if k not in system_lib.INFERENCE_V05_FIELDS]
  if desc.get('submitter') != submitter:
    problems.append(f'{path}: submitter {desc.get("submitter")!r}, folder '
                    f'{submitter!r}.')
  if desc.get('division') != division:
    problems.append(f'{path}: division {desc.get("division")!r}, folder '
                    f'{division!r}.')
  return problems


def _check_measurements(base, system, model, scenario) -> list[str]:
  where = os.path.join(base, 'measurements', system, model, scenario)
  if not os.path.isdir(where):
    return [f'{where} is missing.']
  files = _files(where)
  problems = [f'{where} lacks {f}.' for f in MEASUREMENT_FILES
              if f not in files]
  described = [f for f in files if f.startswith(system + '_')
               and f.endswith(f'_{scenario}.json')]
  if not described:
    return problems + [f'{where} lacks {system}_<implementation>_'
                       f'{scenario}.json.']
  with open(os.path.join(where, described[0])) as f:
    fields = json.load(f)
  if sorted(fields) != sorted(IMPLEMENTATION_FIELDS):
    problems.append(f'{where}/{described[0]}: fields {sorted(fields)}, '
                    f'v0.5 wants {sorted(IMPLEMENTATION_FIELDS)}.')
  impl = described[0][len(system) + 1:-len(f'_{scenario}.json')]
  code = os.path.join(base, 'code', model, impl)
  if not os.path.isdir(code):
    problems.append(f'{code} is missing.')
  return problems
