"""TPU names resolved by TensorFlow's own resolver against a local GCE
metadata server and Cloud TPU API (tests/fake_cloud_tpu.py); one-line errors;
TPU flags that never reach a CPU process."""

import json
import os
import subprocess

import pytest

from core import exit_codes
from distribution import strategy
from distribution import tpu
from tests import fake_cloud_tpu
from tests import helpers

slow = pytest.mark.slow  # Child processes importing TensorFlow.


@pytest.fixture(scope='module')
def cloud():
  server = fake_cloud_tpu.FakeCloudTpu(nodes={
      'my-pod': fake_cloud_tpu.node(workers=4, accelerator='v3-32'),
      'one-host': fake_cloud_tpu.node(workers=1),
      'gone': fake_cloud_tpu.node(workers=4, state='PREEMPTED'),
      'sick': fake_cloud_tpu.node(health='UNHEALTHY_MAINTENANCE'),
  })
  yield server
  server.close()


def child(env_extra, *args, code=None):
  env = dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2',
             **env_extra)
  env.pop('GOOGLE_APPLICATION_CREDENTIALS', None)
  command = ([helpers.PYTHON, '-c', code, *args] if code else
             [helpers.PYTHON, '-m', 'tests.distribution.tpu_main', *args])
  return subprocess.run(command, capture_output=True, text=True,
                        cwd=helpers.ROOT, env=env, timeout=helpers.HANG_SECONDS)


@slow
def test_names_resolve_to_their_workers_and_problems_are_one_line(cloud):
  env = cloud.environment()
  env.pop('GOOGLE_APPLICATION_CREDENTIALS')
  done = child(env, 'my-pod', 'one-host', 'nope', 'gone', 'sick')
  assert done.returncode == 0, done.stderr[-3000:]
  results = {r['name']: r for r in map(json.loads, (
      l for l in done.stdout.splitlines() if l.startswith('{')))}
  assert results['my-pod']['workers'] == [
      '10.0.0.2:8470', '10.0.0.3:8470', '10.0.0.4:8470', '10.0.0.5:8470']
  assert ('TPU my-pod (project test-project, zone us-central1-a): 4 workers'
          in done.stdout)
  assert results['one-host']['workers'] == ['10.0.0.2:8470']
  errors = {n: results[n]['error'] for n in ('nope', 'gone', 'sick')}
  for message in errors.values():
    assert '\n' not in message
  assert errors['nope'].startswith(
      '--tpu=nope: no TPU of that name in project test-project, zone '
      'us-central1-a (the Cloud TPU API answered 404)')
  assert 'run on its worker 0 with --tpu=NAME' in errors['nope']
  assert errors['gone'].startswith('--tpu=gone (project test-project, zone '
                                   'us-central1-a) is PREEMPTED, not READY')
  assert 'health is UNHEALTHY_MAINTENANCE' in errors['sick']
  # The API was asked with the metadata server's token.
  assert '/v1/projects/test-project/locations/us-central1-a/nodes/my-pod' in (
      cloud.requests)


@slow
def test_a_missing_api_client_or_metadata_server_is_named(cloud):
  # googleapiclient absent: TensorFlow's client import fails as without it.
  hide = ('import sys; sys.modules["googleapiclient"] = None; '
          'from tests.distribution import tpu_main; '
          'tpu_main.main(["my-pod"])')
  env = cloud.environment()
  done = child(env, code=hide)
  error = json.loads(done.stdout.strip().splitlines()[-1])['error']
  assert 'needs google-api-python-client and oauth2client' in error
  assert 'python3 tools/tpu_venv.py --venv=.venv' in error
  closed = f'127.0.0.1:{helpers.free_port()}'
  done = child({'GCE_METADATA_HOST': closed, 'GCE_METADATA_IP': closed},
               'my-pod')
  error = json.loads(done.stdout.strip().splitlines()[-1])['error']
  assert error.startswith('--tpu=my-pod: cannot reach the GCE metadata '
                          'server')


@slow
def test_train_py_names_a_missing_tpu_in_one_line(cloud, tmp_path):
  env = cloud.environment()
  env.pop('GOOGLE_APPLICATION_CREDENTIALS')
  done = subprocess.run(
      [helpers.PYTHON, 'train.py', '--gin_file=gin/resnet_quickstart.gin',
       f'--model_dir={tmp_path / "run"}', '--tpu=nope',
       "--gin.distribution.strategy.StrategyConfig.kind='tpu'"],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2',
               **env))
  assert done.returncode == exit_codes.NO_TPU, done.stderr[-2000:]
  assert 'Traceback' not in done.stderr
  assert done.stderr.strip().splitlines()[-1].startswith(
      'error: --tpu=nope: no TPU of that name in project test-project')


def train_py(tmp_path, *args, env=None):
  return subprocess.run(
      [helpers.PYTHON, 'train.py', f'--model_dir={tmp_path / "run"}', *args],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2',
               **(env or {})))


def test_tpu_with_a_cpu_hardware_file_is_an_error_naming_both():
  """What train.py's --tpu binds, on a CPU experiment: a ValueError, i.e.
  one `error:` line and exit 2, when gin builds the hardware config."""
  import gin
  from core import config as gin_config
  gin.clear_config()
  try:
    gin_config.parse(['gin/resnet_quickstart.gin'], [
        "DATA_DIR = '/nowhere'",
        "distribution.strategy.StrategyConfig.tpu = 'my-pod'"])
    with pytest.raises(ValueError) as raised:
      gin.query_parameter('distribution.plan.PlanOptions.distribution'
                          ).scoped_configurable_fn()
  finally:
    gin.clear_config()
  line = str(raised.value).splitlines()[0]  # What train.py prints.
  assert line.startswith("--tpu=my-pod asks for a TPU, but the experiment's "
                         "hardware file trains on 'default'")
  assert line.endswith('after the experiment (its batch sizes must divide '
                       "by the TPU's replicas); else drop --tpu.")


@slow
def test_no_tpu_here_is_one_line_saying_what_was_found(tmp_path):
  closed = f'127.0.0.1:{helpers.free_port()}'
  done = train_py(tmp_path, '--gin_file=gin/resnet_quickstart.gin',
                  '--gin_file=gin/hardware/tpu.gin', '--tpu=local',
                  env={'GCE_METADATA_HOST': closed})
  assert done.returncode == exit_codes.NO_TPU, done.stderr[-2000:]
  assert 'Traceback' not in done.stderr
  line = done.stderr.strip().splitlines()[-1]
  assert line.startswith('error: --tpu=local: no TPU on this machine: no TPU '
                         'device files (/dev/accel*, /dev/vfio/[0-9]*)')
  assert 'TensorFlow here has no TPU support (no libtpu' in line
  assert 'no GCE metadata server answered' in line
  assert line.endswith('with its environment built: python3 '
                       'tools/tpu_venv.py --venv=.venv.')


def test_the_exit_code_tells_a_crash_from_a_run(monkeypatch, capsys):
  import types
  import train
  monkeypatch.setattr(train.flags, 'FLAGS', types.SimpleNamespace(
      verbose=False))

  def fail(error):
    def run_command(argv, sugar):
      raise error
    return run_command

  monkeypatch.setattr(train, 'run_command', fail(RuntimeError('boom')))
  assert train.main([], []) == exit_codes.CRASH == 3
  err = capsys.readouterr().err
  assert 'Traceback' in err and 'RuntimeError: boom' in err
  assert 'crashed (exit 3)' in err
  monkeypatch.setattr(train, 'run_command', fail(tpu.TpuUnavailable('gone')))
  assert train.main([], []) == exit_codes.NO_TPU
  assert capsys.readouterr().err == 'error: gone\n'
  monkeypatch.setattr(train, 'run_command', fail(ValueError('bad\nmore')))
  assert train.main([], []) == exit_codes.USER_ERROR
  assert capsys.readouterr().err == 'error: bad\n'
  import tensorflow as tf
  monkeypatch.setattr(train, 'run_command', fail(tf.errors.UnavailableError(
      None, None, 'Collective ops is aborted by: The following tasks are '
      'unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1')))
  assert train.main([], []) == exit_codes.PEER_LOST
  assert capsys.readouterr().err.startswith(
      'error: a peer was lost: /job:worker/replica:0/task:1 stopped')
  assert {exit_codes.TARGET_REACHED, exit_codes.BUDGET_USED, exit_codes.CRASH,
          exit_codes.USER_ERROR, exit_codes.NO_TPU, exit_codes.PEER_LOST,
          exit_codes.STORAGE_UNAVAILABLE,
          exit_codes.PREEMPTED} == {0, 1, 3, 2, 4, 69, 74, 75}


def test_the_hardware_file_names_the_slice_and_checks_its_replicas():
  config = strategy.StrategyConfig(kind='tpu', accelerator='v3-32')
  assert config.platform == 'tpu-v3-32'
  config.check_replicas(32)
  with pytest.raises(ValueError, match=r'for a v3-32 slice \(32 replicas\), '
                     'but the TPU has 8'):
    config.check_replicas(8)
  assert strategy.StrategyConfig(kind='tpu').platform == 'tpu'
  strategy.StrategyConfig(kind='tpu').check_replicas(8)  # Any slice.
  assert strategy.StrategyConfig(
      kind='tpu', accelerator='v3-8192').platform == 'tpu-v3-8192'
  with pytest.raises(ValueError, match='v4 slices are'):
    strategy.StrategyConfig(kind='tpu', accelerator='v4-12')
  with pytest.raises(ValueError, match="asks for a TPU"):
    strategy.StrategyConfig(kind='mirrored', tpu='local')


def test_a_tpu_vm_with_its_devices_gone_is_named(tmp_path):
  server = fake_cloud_tpu.FakeCloudTpu(nodes={}, accelerator_type='v4-8')
  try:
    os.environ['GCE_METADATA_HOST'] = server.host
    problem = tpu.local_tpu_problem(devices=(str(tmp_path / 'accel*'),))
    assert 'the metadata server says this VM is a v4-8 host' in problem
    assert 'Recreate the TPU VM' in problem
    (tmp_path / 'accel0').write_bytes(b'')
    assert tpu.local_tpu_problem(devices=(str(tmp_path / 'accel*'),)) is None
  finally:
    os.environ.pop('GCE_METADATA_HOST')
    server.close()


def test_tpu_flags_go_to_libtpu_only_for_a_tpu_run(capsys):
  environ = {'LIBTPU_INIT_ARGS': '--xla_tpu_a=1'}
  value = tpu.apply_flags(('--xla_tpu_b=true', '--xla_tpu_a=1'), environ)
  assert value == environ['LIBTPU_INIT_ARGS'] == '--xla_tpu_a=1 --xla_tpu_b=true'
  with pytest.raises(ValueError, match='must read --name=value'):
    tpu.apply_flags(('xla_tpu_b',), {})
  before = {k: os.environ.get(k) for k in ('XLA_FLAGS', 'LIBTPU_INIT_ARGS')}
  strategy.make_strategy(kind='default',
                         tpu_flags=('--xla_tpu_enable_data_parallel_all_reduce_'
                                    'opt=true',))
  assert {k: os.environ.get(k) for k in before} == before
  assert 'TPU flags not applied' in capsys.readouterr().out


def test_tpu_flags_from_gin_reach_the_operative_config():
  import gin
  from core import config as gin_config
  gin.clear_config()
  try:
    gin_config.parse(['gin/resnet50_pod.gin'], [
        "DATA_DIR = '/nowhere'",
        "distribution.strategy.StrategyConfig.tpu_flags = "
        "('--xla_tpu_enable_data_parallel_all_reduce_opt=true',)"])
    config = gin.get_configurable(strategy.StrategyConfig)()
    assert config.tpu_flags == (
        '--xla_tpu_enable_data_parallel_all_reduce_opt=true',)
    assert 'xla_tpu_enable_data_parallel_all_reduce_opt' in (
        gin.operative_config_str())
  finally:
    gin.clear_config()


@pytest.mark.parametrize('accelerator,expected', [
    ('', ('', 'CPU: no TPU')),
    ('v3-8', ('local', 'a single-host TPU VM (v3-8)')),
    ('v4-8', ('local', 'a single-host TPU VM (v4-8)')),
    ('v3-32', ('', 'a host of a v3-32 slice (4 hosts)')),
])
def test_the_runtime_is_detected_from_devices_and_metadata(
    tmp_path, monkeypatch, accelerator, expected):
  server = fake_cloud_tpu.FakeCloudTpu(nodes={}, accelerator_type=accelerator)
  try:
    monkeypatch.setenv('GCE_METADATA_HOST', server.host)
    if accelerator:  # A TPU VM's device files.
      (tmp_path / 'accel0').write_bytes(b'')
    tpu_arg, note = tpu.detect_runtime(devices=str(tmp_path / 'accel*'))
    assert tpu_arg == expected[0] and note.startswith(expected[1])
  finally:
    server.close()
