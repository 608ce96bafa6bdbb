"""The TPU launcher: exact dry-run command lines (v3-8, v3-32, v3-4096), the
rerun decisions, the package, the node state through google-cloud-tpu's REST
transport against a local Cloud TPU API, and the GCS preflight and data
staging against the GCS emulator (google-cloud-storage, no root)."""

import io
import os
import subprocess
import tarfile

import pytest

from distribution import tpu
from tests import fake_cloud_tpu
from tests import helpers
from tools import gcs_emulator
from tools import launch
from tools import preflight
from tools import stage_data


def dry_run(accelerator, *extra):
  done = subprocess.run(
      [helpers.PYTHON, '-m', 'tools.launch', '--gin_file=gin/bert_v3_32.gin',
       '--tpu=my-slice', '--zone=us-central1-a', '--project=my-proj',
       f'--accelerator={accelerator}', '--model_dir=gs://bucket/bert',
       '--runs=2', "--gin_param=DATA_DIR='gs://bucket/bert_data'", *extra],
      capture_output=True, text=True, cwd=helpers.ROOT, timeout=300,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT, TF_CPP_MIN_LOG_LEVEL='2'))
  assert done.returncode == 0, done.stderr[-2000:]
  return [l for l in done.stdout.splitlines() if not l.startswith('#')]


def expected(accelerator, queued=False):
  at = '--zone=us-central1-a --project=my-proj'
  tpu = ('TPU_NAME=my-slice TPU_LOAD_LIBRARY=0 ', '--tpu=my-slice')
  if accelerator == 'v3-8':
    tpu = ('', '--tpu=local')
  create = (
      f'gcloud compute tpus queued-resources create my-slice '
      f'--node-id=my-slice --accelerator-type={accelerator} '
      f'--runtime-version=tpu-vm-tf-2.20.0 {at}' if queued else
      f'gcloud compute tpus tpu-vm create my-slice '
      f'--accelerator-type={accelerator} --version=tpu-vm-tf-2.20.0 {at}')
  lines = [
      f"gcloud compute tpus tpu-vm describe my-slice '--format=value(state)' "
      f'{at}',
      create,
      'gcloud compute tpus tpu-vm scp /tmp/suite-my-slice.tar.gz '
      f'my-slice:suite.tar.gz --worker=all {at}',
      "gcloud compute tpus tpu-vm ssh my-slice --worker=all '--command=rm -rf "
      'suite && mkdir suite && tar xzf suite.tar.gz -C suite && python3 -m '
      'venv suite/.venv && suite/.venv/bin/pip install -q -r '
      f"suite/requirements-tpu.txt' {at}",
  ]
  system = f'tpu-{accelerator}'
  for i in range(2):
    lines += [
        "gcloud compute tpus tpu-vm ssh my-slice --worker=0 '--command=cd "
        f'suite && {tpu[0]}.venv/bin/python train.py '
        f'--gin_file=gin/bert_v3_32.gin --gin_file=launch.gin --gin.SEED={i} '
        f"{tpu[1]} --model_dir=gs://bucket/bert/run_{i}' {at}",
        f'gcloud storage cp gs://bucket/bert/run_{i}/mlperf.log '
        f'results/{system}/bert/result_{i}.txt']
  return lines + [f'python -m tools.score results/{system}/bert']


@pytest.mark.slow
@pytest.mark.parametrize('accelerator,queued', [
    ('v3-32', False), ('v3-4096', True), ('v3-8', False)])
def test_dry_run_prints_the_exact_commands(accelerator, queued):
  lines = dry_run(accelerator, *(['--queued'] if queued else []))
  assert lines == expected(accelerator, queued)


def test_slices_and_their_hosts():
  assert [tpu.slice_hosts(a) for a in ('v3-8', 'v3-32', 'v3-4096',
                                       'v4-128')] == [1, 4, 512, 16]
  with pytest.raises(ValueError, match="--accelerator='v3-6'"):
    tpu.slice_hosts('v3-6')


@pytest.mark.parametrize('code,state,timed,decision', [
    (0, 'READY', True, ('done', 0)),
    (1, 'READY', True, ('done', 0)),         # Budget out: still a run.
    (75, 'READY', True, ('rerun', 1)),       # SIGTERM: a timed run restarts.
    (75, 'READY', False, ('rerun', 0)),      # An untimed one resumes.
    (255, 'PREEMPTED', True, ('recreate', 1)),
    (255, 'TERMINATED', False, ('recreate', 0)),
    (2, 'READY', True, ('give_up', 0)),      # A user error is not retried.
])
def test_what_happens_after_a_run(code, state, timed, decision):
  assert launch.next_step(exit_code=code, node_state=state, timed=timed,
                          retry=0, max_retries=3) == decision
  assert launch.next_step(exit_code=75, node_state='READY', timed=True,
                          retry=3, max_retries=3)[0] == 'give_up'


def job(**kw):
  args = dict(tpu='my-slice', zone='us-central1-a', project='test-project',
              accelerator='v3-32', runtime='tpu-vm-tf-2.20.0',
              gin_files=('gin/resnet_quickstart.gin',),
              gin_params=("DATA_DIR = 'gs://test/data'",),
              model_dir='gs://test/runs', runs=5, benchmark='resnet',
              system='tpu-v3-32')
  args.update(kw)
  return launch.Job(**args)


def test_the_package_is_head_plus_the_bindings(tmp_path):
  tarball = str(tmp_path / 'suite.tar.gz')
  launch.package(job(), tarball)
  with tarfile.open(tarball) as t:
    names = t.getnames()
    assert 'train.py' in names and 'requirements-tpu.txt' in names
    assert t.extractfile('launch.gin').read() == (
        b"DATA_DIR = 'gs://test/data'\n")


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
    assert launch.node_state(job(zone=fake_cloud_tpu.ZONE), client) == (
        'PREEMPTED')
    assert launch.node_state(job(tpu='nothing', zone=fake_cloud_tpu.ZONE),
                             client) is None
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
