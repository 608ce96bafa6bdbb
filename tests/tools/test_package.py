"""tools.package training: five real quickstart runs into a package that
MLCommons' own checkers (mlperf_logging's package checker, system
description checker) accept, and every bad input refused in one line with
nothing written."""

import json
import os
import shutil
import subprocess

import pytest

from core import source
from tests import helpers
from tools.submission import system as system_lib

pytestmark = pytest.mark.slow  # Five real training runs (five_runs).

RUN_FILES = ('mlperf.log', 'config.gin', source.SOURCE_FILE)


def copy_runs(five_runs, root, *, division=None, changed=()):
  """The runs' record files in `root/run_<i>`, their source clean (or with
  `changed` files), their division rewritten if given."""
  out = []
  for i, run in enumerate(five_runs):
    folder = root / f'run_{i}'
    folder.mkdir(parents=True)
    for name in RUN_FILES:
      shutil.copy(os.path.join(run, name), folder / name)
    record = json.loads((folder / source.SOURCE_FILE).read_text())
    record['changed'] = list(changed)
    (folder / source.SOURCE_FILE).write_text(json.dumps(record))
    if division:
      log = folder / 'mlperf.log'
      log.write_text(log.read_text().replace(
          '"key": "submission_division", "value": "closed"',
          f'"key": "submission_division", "value": "{division}"'))
    out.append(str(folder))
  return out


def rewrite(run, old, new):
  """The run's mlperf.log with `old` replaced by `new` (which must be
  there)."""
  log = os.path.join(run, 'mlperf.log')
  text = open(log).read()
  assert old in text, old
  open(log, 'w').write(text.replace(old, new))


def package(*args, cwd=helpers.ROOT):
  return subprocess.run(
      [helpers.PYTHON, '-m', 'tools.package', *map(str, args)],
      capture_output=True, text=True, cwd=cwd, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2'))


def official(*args, cwd):
  return subprocess.run(
      [helpers.PYTHON, '-m', *map(str, args)], capture_output=True,
      text=True, cwd=cwd, timeout=helpers.HANG_SECONDS)


def checker_accepts(package_dir, ruleset, tmp_path):
  checked = official('mlperf_logging.package_checker', package_dir,
                     'training', ruleset, '--log_output',
                     tmp_path / 'checker.log', cwd=tmp_path)
  assert 'PACKAGE CHECKER FOUND NO ERRORS, SUCCESS' in (
      checked.stdout + checked.stderr), checked.stderr[-3000:]


def test_five_runs_make_a_package_the_package_checker_accepts(
    five_runs, tmp_path):
  runs = copy_runs(five_runs, tmp_path / 'runs')
  desc = tmp_path / 'system.json'
  desc.write_text(json.dumps({'host_storage_type': 'NVMe SSD',
                              'submitter': 'Tester'}))
  out = tmp_path / 'package'
  done = package('training', tmp_path / 'runs', f'--output={out}',
                 f'--system_desc={desc}', '--system=cpu-2')
  assert done.returncode == 0, done.stdout + done.stderr
  # MLCommons' checker, as a submitter runs it.
  checker_accepts(out, '0.7.0', tmp_path)
  for i, run in enumerate(runs):
    assert (out / 'results' / 'cpu-2' / 'resnet' /
            f'result_{i}.txt').read_text() == open(
                os.path.join(run, 'mlperf.log')).read()
  desc_out = json.loads((out / 'systems' / 'cpu-2.json').read_text())
  assert list(desc_out) == list(system_lib.TRAINING_FIELDS)
  assert desc_out['submitter'] == 'Tester'  # The file over the logs.
  assert desc_out['host_storage_type'] == 'NVMe SSD'
  assert desc_out['division'] == 'closed'  # As the runs logged it.
  assert desc_out['host_processor_core_count'] == str(os.cpu_count())
  for ruleset in ('0.7.0', '4.0.0'):
    checked = official('mlperf_logging.system_desc_checker',
                       out / 'systems' / 'cpu-2.json', 'training', ruleset,
                       '--log_output', tmp_path / 'desc.log', cwd=tmp_path)
    assert 'System description checker passed' in checked.stderr, (
        checked.stderr[-2000:])
  # The code the runs recorded, byte for byte, and their config.
  commit = json.loads(open(os.path.join(runs[0], source.SOURCE_FILE)).read())[
      'commit']
  impl = out / 'benchmarks' / 'resnet' / 'implementations' / 'resnet-tf-cpu'
  for name in ('train.py', 'training/controller.py'):
    assert (impl / name).read_bytes() == subprocess.run(
        ['git', 'show', f'{commit}:{name}'], capture_output=True,
        check=True, cwd=helpers.ROOT).stdout
  assert (impl / 'config.gin').read_text() == open(
      os.path.join(runs[0], 'config.gin')).read()
  assert commit in (impl / 'README.md').read_text()
  # The score printed is tools.score's (mlperf_logging's summarizer).
  from tools import score as score_lib
  score = score_lib.score_folder(str(out / 'results' / 'cpu-2' / 'resnet'),
                                 ruleset='0.7.0', plot=False).score
  assert f'score resnet: {score:.4f} min' in done.stdout
  assert 'package checker, training 0.7.0: SUCCESS' in done.stdout
  assert not [p for p in os.listdir(tmp_path) if p.startswith('.package-')]


def test_an_open_division_package_passes_ruleset_4_0_too(five_runs, tmp_path):
  # 4.0.0 is the last training ruleset with ResNet; its package checker
  # also checks the system file (status words) and, closed, the RCPs.
  copy_runs(five_runs, tmp_path / 'runs', division='open')
  out = tmp_path / 'package'
  done = package('training', tmp_path / 'runs', f'--output={out}',
                 '--ruleset=4.0.0')
  assert done.returncode == 0, done.stdout + done.stderr
  checker_accepts(out, '4.0.0', tmp_path)
  desc = json.loads((out / 'systems' / 'cpu.json').read_text())
  assert desc['status'] == 'Research, Development, or Internal (RDI)'
  assert desc['division'] == 'open'


refused = helpers.refused_whole


def test_bad_runs_are_one_line_and_no_package(five_runs, tmp_path):
  good = copy_runs(five_runs, tmp_path / 'good')
  out = tmp_path / 'package'

  def variant(name, edit):
    root = tmp_path / name
    runs = copy_runs(five_runs, root)
    edit(runs)
    return package('training', *runs, f'--output={out}')

  # A run folder without a log.
  done = variant('nolog', lambda runs: os.remove(
      os.path.join(runs[2], 'mlperf.log')))
  refused(done, out, 'run_2', 'no mlperf.log')
  # A log the checker refuses (no init_start).
  def drop_init_start(runs):
    log = os.path.join(runs[1], 'mlperf.log')
    lines = [l for l in open(log) if '"init_start"' not in l]
    open(log, 'w').writelines(lines)
  refused(variant('unchecked', drop_init_start), out, 'run_1',
          'fails the 0.7.0 compliance checker')
  # A run that missed its target.
  refused(variant('aborted', lambda runs: rewrite(
      runs[3], '"status": "success"', '"status": "aborted"')), out, 'run_3',
      "'aborted'")
  # Fewer runs than the rules want.
  refused(package('training', *good[:4], f'--output={out}'), out,
          '4 run(s) given', 'exactly 5')
  # Two benchmarks' runs in one package: each needs its count.
  refused(variant('mixed', lambda runs: rewrite(
      runs[4], '"key": "submission_benchmark", "value": "resnet"',
      '"key": "submission_benchmark", "value": "bert"')), out,
      'resnet: 4 run(s) given', 'exactly 5',
      'mix benchmarks: resnet 4, bert 1 (', 'run_4)')
  # Runs of two systems (platforms).
  refused(variant('platforms', lambda runs: rewrite(
      runs[0], '"key": "submission_platform", "value": "cpu"',
      '"key": "submission_platform", "value": "tpu-v3-8"')), out,
      'submission_platform', 'one system')
  # No record of the code.
  refused(variant('nosource', lambda runs: os.remove(
      os.path.join(runs[0], source.SOURCE_FILE))), out, 'run_0',
      'source.json')
  # Changed code, unless allowed.
  root = tmp_path / 'changed'
  runs = copy_runs(five_runs, root, changed=['train.py'])
  refused(package('training', *runs, f'--output={out}'), out,
          'changed from commit', 'train.py', '--allow_changed_source')
  # A system file with a field MLPerf does not have, and one not JSON.
  bad = tmp_path / 'bad.json'
  bad.write_text('{"accelerator_kind": "x"}')
  refused(package('training', *good, f'--output={out}',
                  f'--system_desc={bad}'), out, 'accelerator_kind')
  bad.write_text('{"submitter": ')
  refused(package('training', *good, f'--output={out}',
                  f'--system_desc={bad}'), out, 'is not JSON')
  # A closed package the 4.0.0 checker refuses (no RCP for batch 64).
  refused(package('training', *good, f'--output={out}', '--ruleset=4.0.0'),
          out, 'package checker refused', 'RCP')
  # An existing destination is never written into.
  out.mkdir()
  (out / 'keep.txt').write_text('mine')
  done = package('training', *good, f'--output={out}')
  assert done.returncode == 2 and 'exists' in done.stderr
  assert os.listdir(out) == ['keep.txt']


def test_closed_runs_need_distinct_seeds(five_runs, tmp_path):
  runs = copy_runs(five_runs, tmp_path / 'runs')
  rewrite(runs[1], '"key": "seed", "value": 1', '"key": "seed", "value": 0')
  out = tmp_path / 'package'
  refused(package('training', *runs, f'--output={out}'), out,
          'distinct seeds')


def test_a_system_field_no_source_fills_is_named():
  with pytest.raises(ValueError, match='lacks accelerator_model_name, '
                     'framework'):
    system_lib.build({'submitter': 's', 'division': 'open', 'status': 'x',
                      'system_name': 'n', 'number_of_nodes': '1',
                      'host_processors_per_node': '1',
                      'host_processor_model_name': 'cpu',
                      'accelerators_per_node': '0'})
  # A slice fills what it knows.
  desc = system_lib.build(system_lib.tpu_slice('v3-32'), {
      'submitter': 's', 'division': 'open', 'status': 'x',
      'system_name': 'n', 'host_processors_per_node': '1',
      'host_processor_model_name': 'Intel Xeon'})
  assert (desc['number_of_nodes'], desc['accelerators_per_node'],
          desc['accelerator_model_name'],
          desc['accelerator_memory_capacity']) == ('4', '4', 'TPU v3',
                                                   '32 GiB')
