"""`inference.run --scenario=submission`'s folder into MLPerf Inference
v0.5's submission layout, checked against v0.5's rules
(tools/submission/inference_v05_rules.py) before it is written:

  <division>/<submitter>/results/<system>/<model>/<Scenario>/accuracy/
                                                 .../performance/run_<k>/
  <division>/<submitter>/compliance/<system>/<model>/<Scenario>/TEST0<n>/
  <division>/<submitter>/measurements/<system>/<model>/<Scenario>/
      mlperf.conf, user.conf, README.md, <system>_<impl>_<Scenario>.json
  <division>/<submitter>/code/<model>/<impl>/   (git archive of the commit)
  <division>/<submitter>/systems/<system>.json
"""

import json
import os

from models.common import inference_v05
from tools.submission import code
from tools.submission import inference_v05_rules as rules
from tools.submission import system as system_lib
from tools.submission import writer

RECORD = 'submission.json'  # inference/submission.py's.
# LoadGen's trace (mlperf_log_trace.json, hundreds of MB for a long run)
# stays out: v0.5's checker lets it through but does not ask for it.
LOADGEN_FILES = rules.LOADGEN_FILES


def read_record(folder: str) -> dict:
  path = os.path.join(folder, RECORD)
  if not os.path.exists(path):
    raise ValueError(
        f'{folder} has no {RECORD}: package the folder that `python -m '
        'inference.run --scenario=submission --settings=v0.5 '
        '--output_dir=FOLDER` wrote.')
  try:
    with open(path) as f:
      return json.load(f)
  except json.JSONDecodeError:
    raise ValueError(f'{path} is not JSON: the runs\' record is damaged; '
                     'run inference.run --scenario=submission again.'
                     ) from None


def _read(path: str) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def _copy(files: dict, source: str, target: str, names) -> None:
  for name in names:
    path = os.path.join(source, name)
    if os.path.exists(path):
      files[f'{target}/{name}'] = _read(path)


def conf_lines(model: str, values: dict, header: str) -> str:
  lines = [f'# {header}']
  for scenario, settings in values.items():
    lines += [f'{model}.{scenario}.{k} = {v}' for k, v in settings.items()]
  return '\n'.join(lines) + '\n'


def readme(model: str, scenario: str, record: dict, done: dict) -> str:
  """measurements/.../README.md: what was served and the command."""
  served = record['served']
  flag = {'tflite': 'tflite', 'onnx': 'onnx'}.get(served['format'],
                                                  'saved_model')
  command = ['python -m inference.run',
             *(f'--gin_file={g}' for g in record.get('gin_files', [])),
             f'--{flag}={served["path"]}', '--dataset=DATA',
             '--scenario=submission', '--settings=v0.5',
             *(f'--{k}={v}' for k, v in command_flags(record['settings'])),
             *([f'--count={record["count"]}'] if record.get('count') else []),
             '--output_dir=RUNS']
  audits = ', '.join(f'{t} {"PASS" if v["passed"] else "FAIL"}'
                     for t, v in done['audits'].items())
  return (f'# {model}, {scenario}\n\nServed: the {served["format"]} model '
          f'`{served["path"]}`. Every run of this submission, all '
          f'scenarios:\n\n    {" ".join(command)}\n\nQuality: '
          f'{done["quality"]}; audits: {audits}.\n')


def command_flags(settings: dict):
  """inference.run's flags for the recorded TestSettings values."""
  names = {'min_duration_ms': 'min_duration_ms',
           'min_query_count': 'min_query_count',
           'offline_expected_qps': 'expected_qps',
           'server_target_qps': 'target_qps'}
  for key, value in settings.items():
    if key in names:
      yield names[key], value
    elif key == 'server_target_latency_ns':
      yield 'target_latency_ms', value / 1e6


def layout(folder: str, record: dict, *, desc: dict, system: str,
           implementation: str, tree: bytes) -> dict:
  """Relative path -> bytes of the whole package."""
  model = rules.FOLDER[record['model']]
  base = f'{desc["division"]}/{desc["submitter"]}'
  served = record['served']
  int8 = served['format'] == 'tflite'
  files = {f'{base}/systems/{system}.json':
           json.dumps({k: desc[k] for k in system_lib.INFERENCE_V05_FIELDS},
                      indent=2) + '\n'}
  for scenario, done in record['scenarios'].items():
    here = os.path.join(folder, scenario)
    results = f'{base}/results/{system}/{model}/{scenario}'
    _copy(files, os.path.join(here, 'accuracy'), f'{results}/accuracy',
          LOADGEN_FILES + ('accuracy.txt',))
    runs = sorted(os.listdir(os.path.join(here, 'performance')))
    for run in runs:
      _copy(files, os.path.join(here, 'performance', run),
            f'{results}/performance/{run}', LOADGEN_FILES)
    for test in done['audits']:
      _copy(files, os.path.join(here, test),
            f'{base}/compliance/{system}/{model}/{scenario}/{test}',
            LOADGEN_FILES + ('verify.txt', 'audit.config'))
    measured = f'{base}/measurements/{system}/{model}/{scenario}'
    v05 = inference_v05.settings(record['model'])[scenario]
    files[f'{measured}/mlperf.conf'] = conf_lines(
        record['model'], {scenario: v05},
        'MLPerf Inference v0.5\'s settings as applied '
        '(models/common/inference_v05.py; LoadGen 6 TestSettings names)')
    used = dict(record['settings'])
    for key, setting in (('server_target_qps', 'server_target_qps'),
                         ('samples_per_query',
                          'multi_stream_samples_per_query')):
      if key in done:
        used[setting] = done[key]
    files[f'{measured}/user.conf'] = conf_lines(
        record['model'], {scenario: used}, 'This run\'s own settings '
        '(the command line\'s; Server\'s target QPS; MultiStream\'s samples '
        'a query as found)')
    files[f'{measured}/README.md'] = readme(model, scenario, record, done)
    files[f'{measured}/{system}_{implementation}_{scenario}.json'] = (
        json.dumps({
            'input_data_types': 'int8' if int8 else 'fp32',
            'retraining': 'no',
            'starting_weights_filename': os.path.basename(
                served['path'].rstrip('/')),
            'weight_data_types': 'int8' if int8 else 'fp32',
            'weight_transformations': (
                'post-training quantization (tools.quantize_tflite)'
                if int8 else 'none')}, indent=2) + '\n')
  where = f'{base}/code/{model}/{implementation}'
  files.update(code.files(tree, where))
  files[f'{where}/README.md'] = (
      f'# {model}: {implementation}\n\nThis suite at commit '
      f'{record["source"]["commit"]} (`git archive`); '
      'docs/submitting.md says how the runs were made.\n')
  return files


def main(args: list[str], flags_) -> int:
  """tools.package inference FOLDER: see the module docstring."""
  if len(args) != 1:
    raise ValueError('tools.package inference takes one folder: the '
                     'output_dir of inference.run --scenario=submission.')
  writer.check_destination(flags_.output)
  given = (system_lib.read_file(flags_.system_desc) if flags_.system_desc
           else {})
  folder = args[0]
  record = read_record(folder)
  model = record['model']
  if model not in rules.FOLDER:
    raise ValueError(f'{model} is not an MLPerf Inference v0.5 benchmark.')
  source = record.get('source') or {}
  if not source.get('commit'):
    raise ValueError(f'{folder}/{RECORD} names no commit: the package '
                     'needs the code that served the runs.')
  if source.get('changed') and not flags_.allow_changed_source:
    raise ValueError(
        f'{folder} was run with files changed from commit '
        f'{source["commit"][:12]} ({", ".join(source["changed"][:3])}): '
        'rerun from a clean checkout, or pass --allow_changed_source.')
  invalid = [s for s, d in record['scenarios'].items() if not d['valid']]
  if invalid:
    raise ValueError(f'{folder}: the performance runs of '
                     f'{", ".join(invalid)} are INVALID (their '
                     'mlperf_log_summary.txt says why): not a result.')
  failed = [f'{s} {t}' for s, d in record['scenarios'].items()
            for t, v in d['audits'].items() if not v['passed']]
  system = flags_.system or 'cpu'
  desc = system_lib.build(
      system_lib.this_host(),
      {'submitter': 'reference', 'division': 'open',
       'status': 'Research, Development, or Internal (RDI)',
       'system_name': system},
      given, {'submitter': flags_.submitter,
              'system_name': flags_.system_name},
      fields=system_lib.INFERENCE_V05_FIELDS)
  if desc['division'] == 'closed' and failed:
    raise ValueError(f'{folder}: audits failed ({", ".join(failed)}; '
                     'verify.txt in each says why): a closed-division '
                     'submission needs every audit to pass.')
  implementation = flags_.implementation.format(
      benchmark=rules.FOLDER[model], platform=system)
  files = layout(folder, record, desc=desc, system=system,
                 implementation=implementation,
                 tree=code.archive(source['commit']))
  with writer.staged(flags_.output) as stage:
    writer.write_files(stage, files)
    problems = rules.check(stage)
    if problems:
      raise ValueError(f'the package breaks MLPerf Inference v0.5\'s rules '
                       f'({len(problems)}): {problems[0]} Nothing was '
                       'written.')
  print(f'package: {flags_.output} ({rules.FOLDER[model]}, '
        f'{len(record["scenarios"])} scenarios; system {system}, '
        f'{desc["division"]} division)')
  print('MLPerf Inference v0.5 rules (tools/submission/'
        'inference_v05_rules.py): every one met')
  for t in failed:
    print(f'note: audit {t} failed (the package holds its verify.txt); an '
          'open-division package may carry it, a closed one may not.')
  return 0
