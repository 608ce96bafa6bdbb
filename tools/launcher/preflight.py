"""Checks a TPU job's storage before any TPU time is spent (google-cloud-storage).

- the model_dir bucket exists, and sits in the TPU's region (a zone
  `us-central1-a` is region `us-central1`; a multi-region such as `US` is
  reported, not refused);
- model_dir can be written (an object written and deleted);
- each input file pattern of the experiment matches files (`--data_shards`
  says how many it must match, e.g. ImageNet's 1024 and 128);
- INIT_CHECKPOINT, when the experiment has one, exists (`<path>.index`).

Each problem is one line naming it (ValueError). Run by tools/launch.py.
"""

import fnmatch
import uuid
from typing import NamedTuple


def split(path: str) -> tuple[str, str]:
  """gs://bucket/a/b -> ('bucket', 'a/b')."""
  if not path.startswith('gs://'):
    raise ValueError(f'{path} is not a gs:// path.')
  bucket, _, name = path[len('gs://'):].partition('/')
  return bucket, name


def region_of(zone: str) -> str:
  return zone.rsplit('-', 1)[0]


def check_bucket(client, model_dir: str, zone: str) -> str:
  from google.api_core import exceptions
  name, _ = split(model_dir)
  try:
    bucket = client.get_bucket(name)
  except exceptions.NotFound:
    raise ValueError(f'Bucket gs://{name} (of --model_dir) does not exist: '
                     f'create it in {region_of(zone)} (gcloud storage '
                     f'buckets create gs://{name} --location='
                     f'{region_of(zone)}).') from None
  location, region = (bucket.location or '').lower(), region_of(zone)
  if location == region:
    return f'bucket gs://{name} is in {region}, the TPU\'s region'
  if '-' not in location:  # A multi-region (US, EU, ASIA).
    return (f'bucket gs://{name} is in the multi-region '
            f'{location.upper()}; the TPU is in {region}')
  raise ValueError(f'Bucket gs://{name} is in {location}, the TPU --zone='
                   f'{zone} in {region}: reading and writing across regions '
                   f'is slow and billed. Use a bucket in {region}.')


def check_writable(client, model_dir: str) -> str:
  from google.api_core import exceptions
  bucket, prefix = split(model_dir)
  blob = client.bucket(bucket).blob(
      f'{prefix.rstrip("/")}/.preflight-{uuid.uuid4().hex}'.lstrip('/'))
  try:
    blob.upload_from_string(b'ok')
    blob.delete()
  except exceptions.GoogleAPIError as e:
    raise ValueError(f'Cannot write to --model_dir={model_dir} '
                     f'({type(e).__name__}: {e}).') from e
  return f'{model_dir} is writable'


def matching(client, pattern: str) -> list[str]:
  """Objects matching a gs:// glob (`*`, `?`, `[...]` in the last part)."""
  bucket, name = split(pattern)
  prefix = name.split('*', 1)[0].split('?', 1)[0].split('[', 1)[0]
  return sorted(f'gs://{bucket}/{b.name}' for b in client.list_blobs(
      bucket, prefix=prefix) if fnmatch.fnmatchcase(b.name, name))


def check_data(client, patterns: list[str], shards: list[int]) -> list[str]:
  lines = []
  for i, pattern in enumerate(patterns):
    found = len(matching(client, pattern))
    want = shards[i] if i < len(shards) else 0
    if not found or (want and found != want):
      raise ValueError(f'{pattern} matches {found} files; expected '
                       f'{want or "some"}. Stage the data first '
                       '(python -m tools.stage_data).')
    lines.append(f'{pattern}: {found} files')
  return lines


def check_checkpoint(client, path: str) -> str:
  if not matching(client, path + '.index'):
    raise ValueError(f'INIT_CHECKPOINT {path} does not exist (no '
                     f'{path}.index).')
  return f'INIT_CHECKPOINT {path} exists'


class Experiment(NamedTuple):
  """What the launcher needs to know of an experiment (its gin files)."""
  patterns: list  # Input file patterns: train, eval.
  init_checkpoint: str  # INIT_CHECKPOINT or ''.
  benchmark: str  # MLPerf benchmark name.
  kind: str  # Hardware kind ('tpu', ...).
  accelerator: str  # The hardware file's ACCELERATOR ('' for any slice).
  mesh_shape: tuple  # MESH_SHAPE (() without a mesh).


def experiment_inputs(gin_files, gin_params) -> Experiment:
  """The Experiment its gin files describe."""
  import gin
  from core import config as gin_config
  from core import startup
  startup.import_tensorflow()  # The task imports it: quiet, without Keras.
  gin.clear_config()
  try:
    # Finalized: an unset %gin.REQUIRED macro (DATA_DIR, ...) is one line
    # now, as train.py says it, not a crash inside the task.
    gin_config.parse(list(gin_files), list(gin_params), finalize=True)
    task = gin_config.configured_task()
    try:
      init = gin.query_parameter('%INIT_CHECKPOINT') or ''
    except ValueError:
      init = ''
    from distribution import mesh
    from distribution import strategy
    hardware = gin.get_configurable(strategy.StrategyConfig)()
    return Experiment(
        [task.data.train_files, task.data.eval_files], str(init),
        task.mlperf_benchmark, hardware.kind, hardware.accelerator,
        tuple(gin.get_configurable(mesh.MeshConfig)().shape))
  finally:
    gin.clear_config()


def check(job, *, shards=(), client=None) -> list[str]:
  """All checks for a tools.launch Job; returns what each found."""
  from google.cloud import storage
  client = client or storage.Client(project=job.project)
  patterns, init, *_ = experiment_inputs(job.gin_files, job.gin_params)
  lines = [check_bucket(client, job.model_dir, job.zone),
           check_writable(client, job.model_dir)]
  on_gcs = [p for p in patterns if p.startswith('gs://')]
  if not on_gcs:
    raise ValueError(f'The data ({patterns[0]}) is not on gs://: TPU VMs read '
                     "it from GCS. Stage it and pass --gin_param=\"DATA_DIR="
                     "'gs://...'\".")
  lines += check_data(client, on_gcs, list(shards))
  if init:
    lines.append(check_checkpoint(client, init))
  return lines
