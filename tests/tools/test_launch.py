"""The TPU launcher: slice types and images as Google documents them,
dry-run command lines for v3-8, v3-32, v4-32 and v5e checked against
gcloud's reference pages, slices the experiment is not for, the rerun
table, the package, node and queued-resource states through
google-cloud-tpu's REST transport against a local Cloud TPU API, --execute
end to end against that API, the GCS emulator and a gcloud that checks every
line (queued resources walked to ACTIVE, FAILED, stale ones deleted, a
preempted and a vanished spot node recreated and their runs rerun, a
restarted launcher picking up, teardown after success, failure and
Ctrl-C), and the GCS preflight and data staging."""

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile

import pytest

from core import source
from distribution import tpu_slices
from tests import fake_cloud_tpu
from tests import helpers
from tools import gcs_emulator
from tools import launch
from tools.launcher import execute as launch_execute
from tools.launcher import gcloud
from tools.launcher import job as job_lib
from tools.launcher import preflight
from tools import stage_data


# BERT's experiments require it (%gin.REQUIRED): the launcher refuses a
# plan without it, as train.py would on the TPU.
INIT = "--gin_param=INIT_CHECKPOINT='gs://bucket/ckpt/model.ckpt-28252'"


def dry_run(accelerator, *extra, gin_file='gin/bert_v3_32.gin', code=0,
            zone=None):
  """`python -m tools.launch ...` in this process (its own flag values),
  in the slice's first documented zone unless `zone`: the printed lines,
  or the error line."""
  from absl import flags
  if zone is None:
    try:
      zone = tpu_slices.parse(accelerator).zones[0]
    except ValueError:
      zone = 'us-central1-a'
  values = flags.FlagValues()
  launch.define_flags(values)
  values(['launch', f'--gin_file={gin_file}', '--tpu=my-slice',
          f'--zone={zone}', '--project=my-proj',
          f'--accelerator={accelerator}', '--model_dir=gs://bucket/bert',
          '--runs=2', "--gin_param=DATA_DIR='gs://bucket/bert_data'",
          *([INIT] if 'bert' in gin_file and not any(
              'INIT_CHECKPOINT' in e for e in extra) else []), *extra])
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    assert launch.main([], values) == code, err.getvalue()[-2000:]
  if code:
    return err.getvalue().strip().splitlines()[-1]
  return out.getvalue().splitlines()


# Each slice as Google's pages give it: a zone that offers it (regions-zones),
# the image the launcher creates (the runtimes page's base image for pip
# installs), the TensorFlow image an image's own TensorFlow would use
# (--noinstall; 2.18: -pod on multi-host, -pjrt, the hardware suffix), its
# TPU VMs (4 chips a VM; single-host v5e/v6e up to 8) and replicas.
SLICES = {
    'v3-8': ('us-central1-a', 'tpu-ubuntu2204-base',
             'tpu-vm-tf-2.18.0-pjrt-v5p-and-below', 1, 8),
    'v3-32': ('europe-west4-a', 'tpu-ubuntu2204-base',
              'tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below', 4, 32),
    'v4-32': ('us-central2-b', 'tpu-ubuntu2204-base',
              'tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below', 4, 16),
    'v5litepod-8': ('us-west4-a', 'v2-alpha-tpuv5-lite',
                    'tpu-vm-tf-2.18.0-pjrt-v5e-and-v6', 1, 8),
    'v5litepod-16': ('us-west4-a', 'v2-alpha-tpuv5-lite',
                     'tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6', 4, 16),
    'v5p-16': ('us-east5-a', 'v2-alpha-tpuv5',
               'tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below', 2, 8),
    'v6e-8': ('us-east1-d', 'v2-alpha-tpuv6e',
              'tpu-vm-tf-2.18.0-pjrt-v5e-and-v6', 1, 8),
    'v6e-16': ('us-east1-d', 'v2-alpha-tpuv6e',
               'tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6', 4, 16),
}


@pytest.mark.parametrize('accelerator', sorted(SLICES))
def test_slices_zones_images_hosts_and_replicas(accelerator):
  zone, base, image, hosts, replicas = SLICES[accelerator]
  s = tpu_slices.parse(accelerator)
  assert zone in s.zones
  assert (s.base_image, s.image(), s.hosts, s.replicas) == (
      base, image, hosts, replicas)
  tpu_slices.check_image(base, s)
  tpu_slices.check_image(image, s, install=False)


def test_a_zone_that_does_not_offer_the_slice_is_refused_in_one_line():
  line = dry_run('v3-32', zone='us-central1-a', code=2)
  assert line == ('error: --zone=us-central1-a does not offer v3-32: Google '
                  'offers it in europe-west4-a (https://cloud.google.com/tpu/'
                  'docs/regions-zones, read 2026-12-04).')
  assert 'us-central1-a' in tpu_slices.parse('v3-8').zones
  with pytest.raises(ValueError, match='offers it in us-central2-b'):
    tpu_slices.parse('v4-8').check_zone('us-central1-a')


@pytest.mark.parametrize('accelerator,message', [
    ('v3-4096', 'public v3 slices end at v3-2048'),
    ('v3-6', 'v3 slices are v3-8, v3-32'),
    ('v5e-8', "v5e is 'v5litepod-N'"),
    ('v4-3', 'v4 slices are v4-8'),
])
def test_unknown_slices_are_refused_in_one_line(accelerator, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    tpu_slices.parse(accelerator)


@pytest.mark.parametrize('image,message', [
    ('tpu-vm-tf-2.20', 'is not a TPU VM image name'),
    ('tpu-vm-tf-2.20.0', 'TensorFlow 2.20.0 has no image'),
    ('tpu-vm-tf-2.20.0-pod-pjrt-v5p-and-below', 'TensorFlow 2.20.0 has no image'),
    ('tpu-vm-tf-2.18.0-pjrt-v5p-and-below', 'needs -pod'),
    ('tpu-vm-tf-2.16.1-pod', 'need -pjrt or -se'),
    ('tpu-vm-tf-2.18.0-pod-pjrt-v5e-and-v6', 'end in -v5p-and-below'),
    ('tpu-ubuntu2204-base', 'a base image has no TensorFlow'),
])
def test_an_image_s_own_tensorflow_must_fit_the_slice(image, message):
  """--noinstall runs the image's TensorFlow: a TF image that fits."""
  with pytest.raises(ValueError, match=re.escape(message)):
    tpu_slices.check_image(image, tpu_slices.parse('v3-32'), install=False)
  tpu_slices.check_image('tpu-vm-tf-2.16.1-pod-pjrt',
                         tpu_slices.parse('v3-32'), install=False)


def test_an_image_with_another_tensorflow_than_the_venv_s_is_refused():
  """The venv installs tensorflow-tpu 2.20.0; Google says the TPU software
  matches the TensorFlow version, and no 2.20 image exists."""
  line = dry_run('v3-32', '--runtime=tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below',
                 code=2)
  assert ('carries TensorFlow 2.18.0, but the suite installs tensorflow-tpu '
          '2.20.0') in line
  assert 'use tpu-ubuntu2204-base (the default)' in line
  out = dry_run('v3-32', '--runtime=tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below',
                '--noinstall', '--worker_python=python3')
  assert any('--version=tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below' in l
             for l in out)
  assert not any('tpu_venv.py' in l or 'tpu-runtime' in l for l in out
                 if l.startswith('gcloud'))


@pytest.mark.parametrize('accelerator,extra', [
    ('v3-8', ["--gin_param=ACCELERATOR='v3-8'"]),
    ('v3-32', []),
    ('v4-32', ["--gin_param=ACCELERATOR='v4-32'", '--queued', '--tier=spot',
               '--valid_until=6h']),
    ('v5litepod-8', ["--gin_param=ACCELERATOR='v5litepod-8'", '--tier=spot',
                     '--max_hours=3']),
    ('v5litepod-16', ["--gin_param=ACCELERATOR='v5litepod-16'"]),
])
def test_dry_run_prints_documented_commands(accelerator, extra):
  """Every gcloud line fits its reference page (tools/launcher/gcloud.py SYNTAX); the
  create line, the image, the environment and the detached start are
  exactly as Google's pages and TF tests give them."""
  out = dry_run(accelerator, *extra, zone=SLICES[accelerator][0])
  lines = [l for l in out if not l.startswith('#')]
  for line in lines:
    if line.startswith('gcloud'):
      gcloud.check(shlex.split(line))
  zone, image, _, hosts, _ = SLICES[accelerator]
  at = f'--zone={zone} --project=my-proj'
  queued = '--queued' in extra
  tier = ' --spot' if '--tier=spot' in extra else ''
  create = (
      f'gcloud compute tpus queued-resources create my-slice '
      f'--node-id=my-slice --accelerator-type={accelerator} '
      f'--runtime-version={image}{tier} --valid-until-duration=6h {at}'
      if queued else
      f'gcloud compute tpus tpu-vm create my-slice '
      f'--accelerator-type={accelerator} --version={image}{tier} {at}')
  assert create in lines
  unpack = ('rm -rf suite && mkdir suite && tar xzf suite.tar.gz -C suite && '
            'python3 suite/tools/tpu_venv.py --venv=suite/.venv')
  if hosts > 1:  # Every worker's TPU runtime runs the client's TensorFlow.
    unpack += (" && sudo sed -i 's#TF_DOCKER_URL=.*#TF_DOCKER_URL="
               'gcr.io/cloud-tpu-v2-images/grpc_tpu_worker:tf-2.20.0-pjrt"#\' '
               '/etc/systemd/system/tpu-runtime.service && sudo systemctl '
               'daemon-reload && sudo systemctl restart tpu-runtime')
  install = next(l for l in lines if 'tar xzf' in l)
  assert f'--command={unpack}' in shlex.split(install)
  environment = next(l for l in out if l.startswith(f'# image {image}, '))
  assert 'tensorflow-tpu 2.20.0 with its libtpu' in environment
  assert ('TPU_NAME=my-slice TPU_LOAD_LIBRARY=0' in environment) == (
      hosts > 1)
  assert ('NEXT_PLUGGABLE_DEVICE_USE_C_API=true' in environment) == (
      hosts == 1)
  assert f'# zone {zone}: offers {accelerator}' in '\n'.join(out)
  tpu = ('TPU_NAME=my-slice TPU_LOAD_LIBRARY=0 ', '--tpu=my-slice') if (
      hosts > 1) else ('', '--tpu=local')
  start = (
      "gcloud compute tpus tpu-vm ssh my-slice --worker=0 '--command=cd suite "
      f'&& {tpu[0]}nohup setsid .venv/bin/python -m tools.launcher.job_runner '
      '--job_dir=gs://bucket/bert/run_1/job --attempt=ATTEMPT -- '
      '.venv/bin/python train.py --gin_file=gin/bert_v3_32.gin '
      f'--gin_file=launch.gin --gin.SEED=1 {tpu[1]} '
      "--model_dir=gs://bucket/bert/run_1 </dev/null >/dev/null 2>&1 &' "
      f'{at}')
  assert start in lines
  kind = 'queued-resources' if queued else 'tpu-vm'
  assert lines[-1].startswith(f'gcloud compute tpus {kind} delete my-slice')
  assert f'results/tpu-{accelerator}/bert/result_1.txt' in '\n'.join(lines)
  cost = next(l for l in out if 'chip-hours an hour' in l)
  chips = tpu_slices.parse(accelerator).chips
  assert f'{chips} chips on {hosts} host' in cost
  assert ('caps it at' in cost) == ('--max_hours=3' in extra)


def test_v6e_is_launched_with_what_google_says_of_tensorflow_there():
  out = dry_run('v6e-8', "--gin_param=ACCELERATOR='v6e-8'")
  note = next(l for l in out if l.startswith('# note: v6e'))
  assert "v6e training guides cover JAX and PyTorch only" in note


def test_valid_until_without_queued_names_the_real_cause():
  line = dry_run('v3-32', '--tier=spot', '--valid_until=6h', code=2)
  assert line.startswith('error: --valid_until=6h needs --queued: only a '
                         'queued resource waits for capacity')
  assert 'spot' not in line
  line = dry_run('v3-32', '--tier=guaranteed', code=2)
  assert line.startswith('error: --tier=guaranteed needs --queued')


def test_a_slice_the_experiment_is_not_for_is_refused_before_anything():
  line = dry_run('v3-2048', gin_file='gin/resnet50_pod.gin', code=2)
  assert line.startswith('error: gin/resnet50_pod.gin is for a v3-8192 slice '
                         '(8192 replicas, platform tpu-v3-8192), not v3-2048')
  assert 'v3-8192 is not a public slice' in line
  line = dry_run('v3-4096', gin_file='gin/resnet50_pod.gin', code=2)
  assert 'public v3 slices end at v3-2048' in line
  line = dry_run('v3-32', gin_file='gin/resnet_quickstart.gin', code=2)
  assert "trains on hardware 'default', not a TPU" in line


@pytest.mark.parametrize('code,state,timed,decision', [
    (0, 'READY', True, ('done', 0)),
    (1, 'READY', True, ('done', 0)),         # Budget out: still a run.
    (1, 'PREEMPTED', True, ('done', 0)),     # Its log is complete.
    (75, 'READY', True, ('rerun', 1)),       # SIGTERM: a timed run restarts.
    (75, 'READY', False, ('rerun', 0)),      # An untimed one resumes.
    (None, 'PREEMPTED', True, ('recreate', 1)),
    (255, 'TERMINATED', False, ('recreate', 0)),
    (None, None, True, ('recreate', 1)),     # A spot node that vanished.
    (2, 'READY', True, ('give_up', 0)),      # Bad input is not retried.
    (3, 'READY', True, ('give_up', 0)),      # A crash is not a run.
    (4, 'READY', True, ('give_up', 0)),      # No TPU on a healthy node.
    (4, 'PREEMPTED', True, ('recreate', 1)),
    (None, 'READY', True, ('give_up', 0)),   # The job vanished, node fine.
])
def test_what_happens_after_a_run(code, state, timed, decision):
  assert launch_execute.next_step(exit_code=code, node_state=state,
                                  timed=timed, retry=0,
                                  max_retries=3) == decision
  assert launch_execute.next_step(exit_code=75, node_state='READY',
                                  timed=True, retry=3,
                                  max_retries=3)[0] == 'give_up'


def job(**kw):
  args = dict(tpu='my-slice', zone='us-central1-a', project='test-project',
              slice=tpu_slices.parse('v3-32'),
              runtime='tpu-vm-tf-2.18.0-pod-pjrt-v5p-and-below',
              gin_files=('gin/resnet_quickstart.gin',),
              gin_params=("DATA_DIR = 'gs://test/data'",),
              model_dir='gs://test/runs', runs=5, benchmark='resnet',
              system='tpu-v3-32')
  args.update(kw)
  return job_lib.Job(**args)


def test_the_package_is_head_plus_the_bindings(tmp_path):
  tarball = str(tmp_path / 'suite.tar.gz')
  job_lib.package(job(), tarball)
  with tarfile.open(tarball) as t:
    names = t.getnames()
    assert 'train.py' in names and 'requirements-tpu.txt' in names
    assert t.extractfile('launch.gin').read() == (
        b"DATA_DIR = 'gs://test/data'\n")
    # The copy has no .git: its runs read the commit from COMMIT.
    assert t.extractfile('COMMIT').read().decode().strip() == (
        source.describe()['commit'])
    t.extractall(tmp_path / 'suite', filter='data')
  assert '.git' not in names
  assert source.describe(str(tmp_path / 'suite')) == {
      'commit': source.describe()['commit'], 'changed': [],
      'from': 'COMMIT file'}


def test_node_state_through_google_cloud_tpu():
  from google.auth.credentials import AnonymousCredentials
  from google.cloud import tpu_v2
  from google.cloud.tpu_v2.services.tpu import transports
  server = fake_cloud_tpu.FakeCloudTpu(nodes={
      'my-slice': fake_cloud_tpu.node(state='PREEMPTED', workers=4)})
  try:
    client = tpu_v2.TpuClient(transport=transports.TpuRestTransport(
        host=server.host, credentials=AnonymousCredentials(),
        url_scheme='http'))
    cloud = launch_execute.GoogleCloud(job(zone=fake_cloud_tpu.ZONE),
                                       client=client)
    assert cloud.node_state() == 'PREEMPTED'
    cloud = launch_execute.GoogleCloud(
        job(tpu='nothing', zone=fake_cloud_tpu.ZONE), client=client)
    assert cloud.node_state() is None
    assert cloud.queued_state() == (None, '')
  finally:
    server.close()


@pytest.fixture
def gcs(monkeypatch):
  server, port = gcs_emulator.start_emulator('test')
  monkeypatch.setenv('STORAGE_EMULATOR_HOST', f'http://127.0.0.1:{port}')
  from google.cloud import storage
  yield storage.Client(project='test-project')
  server.stop()


def test_stage_data_uploads_resumes_and_verifies(gcs, tmp_path):
  for i in range(3):
    (tmp_path / f'train-0000{i}-of-00003').write_bytes(os.urandom(50000))
  (tmp_path / 'notes.txt').write_text('not data')
  first = stage_data.stage(str(tmp_path), 'gs://test/imagenet',
                           patterns=['train-*'], client=gcs)
  assert first == {'uploaded': ['train-00000-of-00003', 'train-00001-of-00003',
                                'train-00002-of-00003'], 'skipped': []}
  # Run again after one file changed: only that one goes up.
  (tmp_path / 'train-00001-of-00003').write_bytes(os.urandom(50000))
  again = stage_data.stage(str(tmp_path), 'gs://test/imagenet',
                           patterns=['train-*'], client=gcs)
  assert again['uploaded'] == ['train-00001-of-00003']
  assert len(again['skipped']) == 2
  for name in first['uploaded']:
    blob = gcs.bucket('test').get_blob(f'imagenet/{name}')
    assert blob.crc32c == stage_data.crc32c(str(tmp_path / name))
  assert gcs.bucket('test').get_blob('imagenet/notes.txt') is None
  with pytest.raises(ValueError, match='Bucket gs://nope does not exist'):
    stage_data.stage(str(tmp_path), 'gs://nope/x', client=gcs)


def test_preflight_checks_bucket_region_writes_data_and_checkpoint(gcs):
  bucket = gcs.bucket('test')
  for i in range(4):
    bucket.blob(f'data/train-0000{i}-of-00004').upload_from_string(b'x')
  for i in range(2):
    bucket.blob(f'data/validation-0000{i}-of-00002').upload_from_string(b'x')
  region = (gcs.get_bucket('test').location or '').lower()
  zone = f'{region}-a' if '-' in region else 'us-central1-a'
  lines = preflight.check(job(zone=zone), shards=[4, 2], client=gcs)
  assert 'gs://test/runs is writable' in lines
  assert 'gs://test/data/train-*: 4 files' in lines
  assert 'gs://test/data/validation-*: 2 files' in lines
  assert not list(gcs.list_blobs('test', prefix='runs/.preflight'))
  with pytest.raises(ValueError, match=r'data/train-\* matches 4 files; '
                     'expected 1024'):
    preflight.check(job(zone=zone), shards=[1024, 2], client=gcs)
  with pytest.raises(ValueError, match='Bucket gs://nope .* does not exist'):
    preflight.check(job(zone=zone, model_dir='gs://nope/runs'), client=gcs)
  far = gcs.create_bucket('far', location='europe-west4')
  assert far.location.lower() == 'europe-west4'
  with pytest.raises(ValueError, match='is in europe-west4, the TPU --zone=us-'
                     'central1-a in us-central1'):
    preflight.check(job(model_dir='gs://far/runs'), client=gcs)
  with pytest.raises(ValueError, match='INIT_CHECKPOINT gs://test/ckpt/model '
                     'does not exist'):
    preflight.check_checkpoint(gcs, 'gs://test/ckpt/model')
  bucket.blob('ckpt/model.index').upload_from_string(b'x')
  assert 'exists' in preflight.check_checkpoint(gcs, 'gs://test/ckpt/model')


# -- --execute against the fake cloud -----------------------------------------


@pytest.fixture
def cloud(gcs, tmp_path, monkeypatch):
  """A local Cloud TPU API, `gcloud` on PATH checking every line and doing
  it there (tests/fake_gcloud.py), VMs as folders, GCS in the emulator."""
  from google.auth.credentials import AnonymousCredentials
  from google.cloud import tpu_v2
  from google.cloud.tpu_v2.services.tpu import transports
  from tools.launcher import object_store
  server = fake_cloud_tpu.FakeCloudTpu(
      nodes={}, failure='There is no more capacity in the zone')
  bin_dir, vms = tmp_path / 'bin', tmp_path / 'vms'
  bin_dir.mkdir()
  vms.mkdir()
  (bin_dir / 'gcloud').write_text(
      f'#!/bin/sh\nexec {helpers.PYTHON} -m tests.fake_gcloud "$@"\n')
  (bin_dir / 'gcloud').chmod(0o755)
  for name, value in {
      'PATH': f'{bin_dir}:{os.environ["PATH"]}',
      'FAKE_CLOUD_URL': server.base_url, 'FAKE_VM_ROOT': str(vms),
      'REAL_PYTHON': helpers.PYTHON, 'GOOGLE_CLOUD_PROJECT': 'test-project',
      'FAKE_TPU': 'my-slice', 'TF_CPP_MIN_LOG_LEVEL': '2'}.items():
    monkeypatch.setenv(name, value)
  monkeypatch.delenv('PYTHONPATH', raising=False)  # The VM's own package.
  monkeypatch.chdir(helpers.ROOT)
  object_store._CLIENT.clear()  # pylint: disable=protected-access
  client = tpu_v2.TpuClient(transport=transports.TpuRestTransport(
      host=server.host, credentials=AnonymousCredentials(),
      url_scheme='http'))
  yield server, client, vms
  object_store._CLIENT.clear()  # pylint: disable=protected-access
  server.close()


def execute(cloud, tmp_path, workload, clock=None, **kw):
  server, client, _ = cloud
  os.environ['FAKE_WORKLOAD'] = json.dumps(workload)
  args = dict(zone=fake_cloud_tpu.ZONE, slice=tpu_slices.parse('v3-8'),
              runtime='tpu-vm-tf-2.18.0-pjrt-v5p-and-below', gin_params=(),
              runs=len(workload), system='tpu-v3-8',
              results_dir=str(tmp_path / 'results'), queued=True,
              tier='spot', python=os.path.join(helpers.ROOT, 'tests',
                                               'fake_vm_python'),
              install=False)
  args.update(kw)
  the_job = job(**args)
  poll = launch_execute.Poll(seconds=0.2, stale_after=120, start_timeout=120)
  if clock:
    poll.clock = clock
  code = launch_execute.execute(
      the_job, str(tmp_path / 'suite.tar.gz'),
      launch_execute.GoogleCloud(the_job, client=client), poll=poll)
  return the_job, code


def gcloud_calls(vms):
  return [json.loads(l) for l in open(vms / 'gcloud.log')]


def status(gcs, path):
  blob = gcs.bucket('test').get_blob(f'runs/{path}/job/status.json')
  return json.loads(blob.download_as_text()) if blob else None


@pytest.mark.slow  # Scores five real runs' logs (the five_runs fixture).
def test_execute_runs_reruns_collects_scores_and_deletes(
    cloud, gcs, five_runs, tmp_path, capfd):
  server, _, vms = cloud
  logs = tmp_path / 'logs'
  logs.mkdir()
  for i, run in enumerate(five_runs):
    shutil.copy(os.path.join(run, 'mlperf.log'), logs / f'result_{i}.txt')
  os.environ['FAKE_LOGS'] = str(logs)
  the_job, code = execute(cloud, tmp_path, {
      '0': ['success'], '1': ['preempted', 'success'],
      '2': ['vanished', 'success'], '3': ['success'], '4': ['success']},
      package=str(tmp_path / 'package'))
  out = capfd.readouterr()
  assert code == 0, out.out[-3000:] + out.err[-3000:]
  results = tmp_path / 'results' / 'tpu-v3-8' / 'resnet'
  for i in range(5):
    assert (results / f'result_{i}.txt').read_bytes() == (
        logs / f'result_{i}.txt').read_bytes()
  # The package: the scored attempts' logs, the code of the commit the
  # workers' copy recorded (COMMIT in the tarball), checked.
  package = tmp_path / 'package'
  for i in range(5):
    assert (package / 'results' / 'tpu-v3-8' / 'resnet' /
            f'result_{i}.txt').read_bytes() == (
                logs / f'result_{i}.txt').read_bytes()
  head = source.describe()['commit']
  impl = package / 'benchmarks' / 'resnet' / 'implementations' / 'resnet-tf-cpu'
  assert head in (impl / 'README.md').read_text()
  assert (impl / 'train.py').read_bytes() == subprocess.run(
      ['git', 'show', f'{head}:train.py'], capture_output=True, check=True,
      cwd=helpers.ROOT).stdout
  assert 'package checker, training 0.7.0: SUCCESS' in out.out
  # The preempted and the vanished runs started over in new folders.
  assert status(gcs, 'run_1')['exit_code'] == 75
  assert status(gcs, 'run_1_retry1')['exit_code'] == 0
  assert status(gcs, 'run_2_retry1')['exit_code'] == 0
  assert status(gcs, 'run_0_retry1') is None
  # Created three times (first, after the preemption, after the node
  # vanished), each stale one deleted first, and deleted at the end.
  assert server.calls == [
      ('create queued resource', 'my-slice'),
      ('delete queuedResources', 'my-slice'),
      ('create queued resource', 'my-slice'),
      ('delete queuedResources', 'my-slice'),
      ('create queued resource', 'my-slice'),
      ('delete queuedResources', 'my-slice')]
  assert server.nodes == {} and server.queued == {}
  for state in fake_cloud_tpu.QUEUED_WALK:
    assert f'queued resource my-slice: {state} (waited' in out.out
  assert 'fake train.py: seed 1, attempt 0: preempted' in gcs.bucket(
      'test').get_blob('runs/run_1/job/log.txt').download_as_text()
  starts = [c for c in gcloud_calls(vms) if 'ssh' in c and any(
      'job_runner' in a for a in c)]
  assert len(starts) == 7
  assert 'olympic' in out.out.lower() or 'score' in out.out.lower()


def test_a_failed_queued_resource_stops_with_its_reason_and_is_deleted(
    cloud, tmp_path, capfd):
  server, _, vms = cloud
  server.queued['my-slice'] = {'walk': ['FAILED'], 'workers': 1,
                               'accelerator': 'v3-8'}  # A stale one.
  server.queued_walk = ['ACCEPTED', 'FAILED']
  _, code = execute(cloud, tmp_path, {'0': ['success']})
  out = capfd.readouterr()
  assert code == 1
  assert ('error: queued resource my-slice is FAILED: There is no more '
          'capacity in the zone') in out.err
  assert 'queued resource my-slice is FAILED: deleting it first.' in out.out
  assert server.calls == [('delete queuedResources', 'my-slice'),
                          ('create queued resource', 'my-slice'),
                          ('delete queuedResources', 'my-slice')]
  assert server.queued == {} and server.nodes == {}
  assert not any('ssh' in c for c in gcloud_calls(vms))


def test_a_suspended_queued_resource_stops_with_who_suspended_it(
    cloud, tmp_path, capfd):
  server, _, _ = cloud
  server.queued_walk = ['ACCEPTED', 'WAITING_FOR_RESOURCES', 'SUSPENDED']
  _, code = execute(cloud, tmp_path, {'0': ['success']})
  assert code == 1
  assert ('error: queued resource my-slice is SUSPENDED: suspended, '
          'initiated by SERVICE') in capfd.readouterr().err
  assert server.queued == {}


class Interrupt:
  """A clock whose sleep is interrupted (Ctrl-C) once a run is running."""

  def __init__(self, gcs):
    self.gcs = gcs

  def time(self):
    import time
    return time.time()

  def sleep(self, seconds):
    import time
    running = status(self.gcs, 'run_0')
    if running and running['state'] == 'running':
      os.kill(running['pid'], 9)  # The fake workload: no orphans.
      raise KeyboardInterrupt
    time.sleep(seconds)


def test_ctrl_c_deletes_the_tpu_unless_kept(cloud, gcs, tmp_path):
  server, _, _ = cloud
  server.queued_walk = ['ACTIVE']
  with pytest.raises(KeyboardInterrupt):
    execute(cloud, tmp_path, {'0': ['hang']}, clock=Interrupt(gcs))
  assert server.calls[-1] == ('delete queuedResources', 'my-slice')
  assert server.queued == {} and server.nodes == {}


def test_a_restarted_launch_picks_up_finished_runs(cloud, gcs, tmp_path,
                                                   capfd):
  """A run an earlier --execute saw through is collected, not run again;
  a kept TPU is reused as it is."""
  server, _, vms = cloud
  server.nodes['my-slice'] = fake_cloud_tpu.node()
  bucket = gcs.bucket('test')
  bucket.blob('runs/run_0/mlperf.log').upload_from_string(b':::MLLOG {}\n')
  bucket.blob('runs/run_0/job/status.json').upload_from_string(json.dumps({
      'state': 'exited', 'exit_code': 1, 'attempt': 'earlier', 'host': 'w0',
      'pid': 1, 'started': 0, 'heartbeat': 0}))
  bucket.blob('runs/run_0/job/log.txt').upload_from_string('done\n')
  _, code = execute(cloud, tmp_path, {'0': ['crash']}, queued=False,
                    keep=True)
  out = capfd.readouterr().out
  assert 'run 0: found gs://test/runs/run_0/job (exited); picking it up.' in (
      out)
  assert not any(any('job_runner' in a for a in c)
                 for c in gcloud_calls(vms))
  assert (tmp_path / 'results' / 'tpu-v3-8' / 'resnet' /
          'result_0.txt').read_bytes() == b':::MLLOG {}\n'
  assert server.calls == []  # Reused, and kept (--keep).
  assert 'TPU my-slice kept (--keep)' in out
  assert code != 0  # One run cannot be scored (MLPerf asks for 5).


def test_an_experiment_for_any_slice_is_bound_to_the_launched_one():
  """gin/hardware/tpu.gin fits any slice: the launch binds the slice, so
  the run checks its replicas and logs platform tpu-v5litepod-8."""
  out = dry_run('v5litepod-8', '--gin_file=gin/hardware/tpu.gin',
                gin_file='gin/resnet_quickstart.gin')
  assert "#   ACCELERATOR = 'v5litepod-8'" in out
  assert any(l.startswith('gcloud compute tpus tpu-vm ssh') and
             '--gin_file=gin/hardware/tpu.gin --gin_file=launch.gin' in l
             for l in out)


def test_a_mesh_on_a_multi_host_slice_starts_on_every_host():
  """DTensor drives a slice with one client a host: every worker runs
  train.py with --tpu=local, worker k writing its status to job/worker_k."""
  out = dry_run('v3-32', '--gin_param=MESH_SHAPE = (8, 4)',
                '--gin_param=DETERMINISTIC = True',
                gin_file='gin/transformer_v3_32.gin')
  start = next(l for l in out if 'job_runner' in l)
  assert start.startswith('gcloud compute tpus tpu-vm ssh my-slice '
                          '--worker=all ')
  assert '--per_worker --' in start and '--tpu=local' in start
  assert 'TPU_NAME' not in start
  gcloud.check(shlex.split(start))


def test_each_host_of_a_slice_has_its_own_job_folder(monkeypatch):
  from tools.launcher import job_runner
  for number, expected in (('0', 'gs://b/run_0/job'),
                           ('3', 'gs://b/run_0/job/worker_3')):
    server = fake_cloud_tpu.FakeCloudTpu(
        nodes={}, attributes={'agent-worker-number': number})
    try:
      monkeypatch.setenv('GCE_METADATA_HOST', server.host)
      assert job_runner.worker_job_dir('gs://b/run_0/job') == expected
    finally:
      server.close()


def test_the_job_runner_publishes_the_output_and_the_exit_code(tmp_path):
  done = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.launcher.job_runner', f'--job_dir={tmp_path}',
       '--attempt=a1', '--', helpers.PYTHON, '-c',
       'print("step 1"); raise SystemExit(3)'],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=120)
  assert done.returncode == 3, done.stderr
  state = json.loads((tmp_path / 'status.json').read_text())
  assert (state['state'], state['exit_code'], state['attempt']) == (
      'exited', 3, 'a1')
  assert state['heartbeat'] >= state['started']
  assert (tmp_path / 'log.txt').read_text() == 'step 1\n'


def test_a_vanished_spot_node_is_recreated_and_its_run_rerun(cloud, gcs,
                                                              tmp_path):
  """Without a queued resource: `tpu-vm create --spot`, the node vanishes
  mid-run, the launcher creates it again and reruns the run from scratch."""
  server, _, vms = cloud
  bucket = gcs.bucket('test')
  os.environ['FAKE_LOGS'] = str(tmp_path)
  (tmp_path / 'result_0.txt').write_text(':::MLLOG {}\n')
  _, code = execute(cloud, tmp_path, {'0': ['vanished', 'success']},
                    queued=False)
  assert server.calls == [('create node', 'my-slice'),
                          ('create node', 'my-slice'),
                          ('delete nodes', 'my-slice')]
  creates = [c for c in gcloud_calls(vms) if c[:4] == [
      'compute', 'tpus', 'tpu-vm', 'create']]
  assert len(creates) == 2 and all('--spot' in c for c in creates)
  assert status(gcs, 'run_0')['exit_code'] == 143
  assert status(gcs, 'run_0_retry1')['exit_code'] == 0
  assert bucket.get_blob('runs/run_0_retry1/mlperf.log') is not None
  assert code != 0  # One run cannot be scored (MLPerf asks for 5).


class Clock:
  """A clock that advances an hour at every sleep."""

  def __init__(self):
    self.now = 0.0

  def time(self):
    return self.now

  def sleep(self, seconds):
    self.now += 3600


def test_max_hours_stops_a_queued_wait_and_deletes_the_request(
    cloud, tmp_path, capfd):
  server, _, _ = cloud
  server.queued_walk = ['WAITING_FOR_RESOURCES']  # Never provisioned.
  _, code = execute(cloud, tmp_path, {'0': ['success']}, clock=Clock(),
                    max_hours=2)
  assert code == 1
  assert ('--max_hours=2 reached waiting for the queued resource'
          in capfd.readouterr().err)
  assert server.calls[-1] == ('delete queuedResources', 'my-slice')
  assert server.queued == {}


def documented_launch_commands():
  """Each `python -m tools.launch` command of README.md and docs/, its
  continuation lines joined, as shlex words after `tools.launch`; an
  optional `[...]` group is kept, its alternatives' first choice taken."""
  found = []
  for path in ['README.md'] + sorted(
      os.path.join('docs', n) for n in os.listdir(
          os.path.join(helpers.ROOT, 'docs')) if n.endswith('.md')):
    with open(os.path.join(helpers.ROOT, path)) as f:
      text = f.read().replace('\\\n', ' ')
    for block in re.findall(r'```(?:sh|bash)\n(.*?)```', text, re.S):
      for line in block.splitlines():
        if line.startswith('python -m tools.launch '):
          line = re.sub(r'\[(--[^\]|]*)(\|[^\]]*)?\]', r'\1', line)
          found.append((path, shlex.split(line)[3:]))
  return found


COMMANDS = documented_launch_commands()


def test_the_docs_have_launch_commands():
  assert len(COMMANDS) >= 4
  assert any(path == 'README.md' for path, _ in COMMANDS)


@pytest.mark.parametrize('path,words', COMMANDS,
                         ids=[f'{p}:{i}' for i, (p, _) in enumerate(COMMANDS)])
def test_every_documented_launch_command_runs_as_a_dry_run(path, words,
                                                           tmp_path):
  """The command as the page prints it, without --execute (and --preflight,
  which needs the bucket): it passes every check and prints its plan."""
  from absl import flags
  words = [w for w in words if w not in ('--execute', '--preflight')]
  if any(w.startswith('--backend=gke') for w in words):
    words.append(f'--manifest_dir={tmp_path}')
  values = flags.FlagValues()
  launch.define_flags(values)
  values(['launch', *words])
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = launch.main([], values)
  assert code == 0, f'{path}: {err.getvalue().strip()}'
  lines = out.getvalue().splitlines()
  for line in lines:
    if line.startswith('gcloud'):
      gcloud.check(shlex.split(line))


def test_a_dry_run_with_package_prints_the_package_step_last_but_teardown(
    tmp_path):
  out = dry_run('v3-32', '--package=gs://bucket/sub/bert.tar.gz')
  steps = [l for l in out if not l.startswith('#')]
  assert steps[-2] == (
      'python -m tools.package training gs://bucket/bert/run_0 '
      'gs://bucket/bert/run_1 --output=gs://bucket/sub/bert.tar.gz '
      '--system=tpu-v3-32')
  assert steps[-1].startswith('gcloud compute tpus tpu-vm delete my-slice')
  # Refused before any plan: a remote package that is no one object, a
  # system description that is not there.
  assert dry_run('v3-32', '--package=gs://bucket/sub', code=2) == (
      'error: --output=gs://bucket/sub: a remote package is one .tar.gz '
      'object (GCS has no atomic folder): end it in .tar.gz.')
  assert dry_run('v3-32', f'--package={tmp_path}/pkg',
                 f'--system_desc={tmp_path}/none.json', code=2) == (
      f'error: --system_desc={tmp_path}/none.json: no such file.')


def test_a_gs_package_is_one_object_written_whole_and_never_over_another(
    gcs, tmp_path):
  import tarfile as tar
  from tools.launcher import object_store
  from tools.submission import writer
  object_store._CLIENT.clear()  # pylint: disable=protected-access
  dest = 'gs://test/sub/resnet.tar.gz'
  with pytest.raises(RuntimeError):  # A failure inside: nothing uploaded.
    with writer.staged(dest) as stage:
      writer.write_files(stage, {'results/a.txt': 'x'})
      raise RuntimeError('checker refused')
  assert gcs.bucket('test').get_blob('sub/resnet.tar.gz') is None
  with writer.staged(dest) as stage:
    writer.write_files(stage, {'results/a.txt': 'first'})
  local = tmp_path / 'p.tar.gz'
  gcs.bucket('test').get_blob('sub/resnet.tar.gz').download_to_filename(
      str(local))
  with tar.open(local) as t:
    assert t.extractfile('resnet/results/a.txt').read() == b'first'
  with pytest.raises(ValueError, match='exists: give a new name'):
    with writer.staged(dest) as stage:
      writer.write_files(stage, {'results/a.txt': 'second'})
  object_store._CLIENT.clear()  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='a local folder or a gs:// object'):
    writer.check_destination('s3://b/p.tar.gz')
