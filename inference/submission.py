"""Every run an MLPerf Inference v0.5 submission holds for one model:
`python -m inference.run --scenario=submission --settings=v0.5`.

For each scenario, in `output_dir/<Scenario>/`:
  accuracy/            an accuracy-mode run in that scenario, and
                       accuracy.txt as v0.5's accuracy scripts print it
  performance/run_1    the performance run (Server: run_1 to run_5, as
                       v0.5's checker wants five; MultiStream: the run of
                       the most samples a query within v0.5's bound, from
                       inference/multistream.py's emulation)
  TEST01, TEST04, TEST05  the audits (inference/audit.py), each with its
                       runs and verify.txt
and `output_dir/submission.json`: the model, the settings each scenario ran
with, the verdicts, the code (core/source.py). tools.package inference
turns the folder into v0.5's layout and checks it against v0.5's rules.
"""

import json
import os
import shutil

from core import source as source_lib
from inference import audit as audit_lib
from inference import multistream

SCENARIOS = ('Offline', 'SingleStream', 'MultiStream', 'Server')
SERVER_RUNS = 5  # v0.5's submission checker: performance/run_1 .. run_5.
RECORD = 'submission.json'

# How v0.5's accuracy scripts print quality (accuracy-imagenet.py,
# accuracy-coco.py, process_accuracy.py for GNMT): the checker reads these.
ACCURACY_LINE = {'resnet50': 'accuracy', 'mobilenet': 'accuracy',
                 'ssd-mobilenet': 'mAP', 'ssd-resnet34': 'mAP',
                 'gnmt': 'BLEU'}


def accuracy_text(model: str, quality: float) -> str:
  kind = ACCURACY_LINE[model]
  if kind == 'BLEU':
    return f'BLEU: {quality * 100:.3f}\n'
  return f'{kind}={quality * 100:.3f}%\n'


def run_all(run, task, *, output_dir: str, model: str, settings_used: dict,
            served: dict, gin_files: list, server_qps: float = 0.0,
            count: int = 0) -> dict:
  """Runs every scenario's accuracy, performance and audit runs.

  Args:
    run: inference.run's (mode, folder, **extra) -> Report, writing under
      `output_dir`.
    task: the model's task.
    output_dir: the run's output folder.
    model: the v0.5 benchmark (task.inference_model).
    settings_used: what the command line set (recorded as user.conf).
    served: the model served: {'format': savedmodel, tflite or onnx,
      'path': ...}.
    gin_files: the model's gin files (for the package's README).
    server_qps: Server's target (0: half the Offline rate measured).
    count: samples used (0: all).

  Returns:
    The record (also written to RECORD).
  """
  if model not in ACCURACY_LINE:
    raise ValueError(f'MLPerf Inference v0.5 has no {model!r} benchmark: '
                     f'a v0.5 submission serves one of '
                     f'{", ".join(sorted(ACCURACY_LINE))}.')
  path = lambda rel: os.path.join(output_dir, rel)  # pylint: disable=unnecessary-lambda-assignment
  record = {'model': model, 'settings': settings_used, 'served': served,
            'gin_files': list(gin_files), 'count': count, 'scenarios': {},
            'source': source_lib.describe()}
  offline_rate = None
  for scenario in SCENARIOS:
    done = record['scenarios'][scenario] = {}
    accuracy = run('accuracy', f'{scenario}/accuracy', scenario=scenario)
    print(accuracy, flush=True)
    done['quality'] = accuracy.quality
    with open(path(f'{scenario}/accuracy/accuracy.txt'), 'w') as f:
      f.write(accuracy_text(model, accuracy.quality))
    extra = {}
    if scenario == 'Server':
      qps = server_qps or max(1.0, round(offline_rate / 2, 1))
      extra = {'server_target_qps': qps}
      done['server_target_qps'] = qps
    if scenario == 'MultiStream':
      found = multistream.emulate_v05(run, task, f'{scenario}/search',
                                      count=count)
      if not found.samples_per_query:
        raise RuntimeError('No MultiStream run met v0.5\'s bound: no '
                           'MultiStream result to submit.')
      shutil.copytree(
          path(f'{scenario}/search/multistream_{found.samples_per_query}'),
          path(f'{scenario}/performance/run_1'))
      extra = {'multi_stream_samples_per_query': found.samples_per_query}
      done['samples_per_query'] = found.samples_per_query
      reference = run('performance', f'{scenario}/search/reference',
                      scenario=scenario, **extra)
    else:
      runs = SERVER_RUNS if scenario == 'Server' else 1
      reports = [run('performance', f'{scenario}/performance/run_{k + 1}',
                     scenario=scenario, **extra) for k in range(runs)]
      for report in reports:
        print(report, flush=True)
      reference = reports[0]
      if scenario == 'Offline':
        offline_rate = reference.value
    done['valid'] = bool(reference.valid)
    done['value'] = reference.value
    done['audits'] = audits(run, task, scenario, reference, extra, path)
  with open(path(RECORD), 'w') as f:
    json.dump(record, f, indent=1)
  return record


def audits(run, task, scenario: str, reference, extra: dict,
           path) -> dict:
  """TEST01, TEST04, TEST05 against `reference` (the scenario's
  performance run); each verdict also in <Scenario>/<TEST>/verify.txt."""
  verdicts = {}
  folder = f'{scenario}/TEST01'
  audited = run('performance', folder, scenario=scenario,
                audit_config=audit_lib.write_audit_config(
                    'TEST01', path(folder)), **extra)
  verdicts['TEST01'] = audit_lib.verify_test01(
      audit=audited, reference=reference,
      accuracy_dir=path(f'{scenario}/accuracy'),
      audit_dir=path(folder), dtype=task.inference_output[1])
  folder = f'{scenario}/TEST04'
  audited = run('performance', folder, scenario=scenario,
                audit_config=audit_lib.write_audit_config(
                    'TEST04', path(folder)), **extra)
  verdicts['TEST04'] = audit_lib.verify_test04(audit=audited,
                                               reference=reference)
  audited = run('performance', f'{scenario}/TEST05', scenario=scenario,
                **audit_lib.TEST05_SETTINGS, **extra)
  verdicts['TEST05'] = audit_lib.verify_test05(audit=audited,
                                               reference=reference)
  out = {}
  for test, verdict in verdicts.items():
    print(verdict, flush=True)
    with open(path(f'{scenario}/{test}/verify.txt'), 'w') as f:
      f.write(f'{verdict}\n')
    out[test] = {'passed': verdict.passed, 'details': verdict.details}
  return out
