"""Finding a TPU: names resolved through the Cloud TPU API, one-line errors,
and TPU compiler flags that never reach a CPU process.

`--tpu` takes:
- `local`: the TPU attached to this VM (a single-host TPU VM: v2-8, v3-8,
  v4-8);
- a TPU name: resolved through the Cloud TPU API to the slice's worker
  endpoints (a multi-host slice, v3-32 and up: run on worker 0). The
  project and zone come from this VM's metadata server; the lookup needs
  `google-api-python-client` and `oauth2client` (requirements-tpu.txt), which
  TensorFlow's bundled Cloud TPU client imports;
- `grpc://HOST:PORT`: a TPU worker address, used as is.
"""

import glob
import importlib.util
import os


from core import startup
from distribution.gce_metadata import metadata
from distribution import tpu_slices

HINT = ('On a single-host TPU VM (v2-8, v3-8, v4-8, v5litepod-8) use '
        '--tpu=local; for a '
        'multi-host slice (v3-32 and larger) run on its worker 0 with '
        '--tpu=NAME.')
# How a TPU VM gets the suite's environment (the launcher runs the same).
BUILD_ENVIRONMENT = 'python3 tools/tpu_venv.py --venv=.venv'
# libtpu reads its compiler flags from here when the TPU is initialised in
# this process (TPU VMs).
TPU_FLAGS_VARIABLE = 'LIBTPU_INIT_ARGS'
# A TPU VM's TPU device files: /dev/accel* (v2-v4), /dev/vfio/N (v5e and
# later).
DEVICE_FILES = startup.TPU_DEVICE_FILES


class TpuUnavailable(ValueError):
  """No TPU could be found, reached or initialised. One line naming what
  was found; train.py exits with core.exit_codes.NO_TPU."""


def _api_client(resolver):
  # TPUClusterResolver keeps its Cloud TPU client (project, zone, state,
  # health) private; no public accessor exists.
  return resolver._cloud_tpu_client  # pylint: disable=protected-access


def _first_line(error: Exception) -> str:
  return (str(error).strip().splitlines() or [type(error).__name__])[0]


def default_target(environ=os.environ) -> str:
  """The TPU a TPU experiment without --tpu uses: $TPU_NAME (as Google's
  TPU VM recipes export it on multi-host slices), else this VM's own."""
  return environ.get('TPU_NAME') or 'local'


def has_tpu_devices(devices=DEVICE_FILES) -> bool:
  return any(glob.glob(pattern) for pattern in devices)


def local_tpu_problem(*, devices=DEVICE_FILES, timeout: float = 1.0,
                      asked: str = '--tpu=local') -> str | None:
  """Why `--tpu=local` cannot work here, or None when TPU devices exist.

  Says what was found: the TPU device files, whether TensorFlow's TPU
  support (libtpu) is installed, and what the metadata server says; `asked`
  says what asked for this VM's TPU.
  """
  if has_tpu_devices(devices):
    return None
  libtpu = importlib.util.find_spec('libtpu') is not None
  build = ('libtpu is installed' if libtpu else
           'TensorFlow here has no TPU support (no libtpu: the CPU build)')
  accelerator = metadata('instance/attributes/accelerator-type', timeout)
  if accelerator:
    where = (f'the metadata server says this VM is a {accelerator} host, '
             'yet it has no TPU devices')
    todo = ('Recreate the TPU VM if it was preempted, or run on the VM the '
            'TPU belongs to.')
  else:
    where = 'no GCE metadata server answered (not a Google Cloud VM)'
    todo = ('Train here without --tpu (CPU/GPU hardware files), or run on '
            f'a TPU VM with its environment built: {BUILD_ENVIRONMENT}.')
  return (f'{asked}: no TPU on this machine: no TPU device files '
          f'({", ".join(devices)}); {build}; {where}. {todo}')


def resolve(tpu: str):
  """A TPUClusterResolver for `tpu`, with a named TPU checked READY and
  HEALTHY through the Cloud TPU API.

  Raises:
    ValueError: one line naming the TPU and what is wrong (the API client
      missing, no metadata server, no such TPU in the project and zone, a
      state other than READY, a health other than HEALTHY).
  """
  if tpu == 'local':
    problem = local_tpu_problem()
    if problem:
      raise TpuUnavailable(problem)
  tf = startup.import_tensorflow()  # Here, so the launcher's --help is quick.
  if tpu == 'local' or tpu.startswith('grpc://'):
    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
  except OSError as e:  # urllib: no metadata server (not on Google Cloud).
    raise TpuUnavailable(
        f'--tpu={tpu}: cannot reach the GCE metadata server for this VM\'s '
        f'project and zone ({_first_line(e)}). Run on a Google Cloud VM, or '
        f'pass --tpu=grpc://ADDRESS:8470. {HINT}') from e
  client = _api_client(resolver)
  where = (f'project {getattr(client, "_project", "?")}, zone '
           f'{getattr(client, "_zone", "?")}')
  try:
    workers = resolver.cluster_spec().as_dict().get('worker', [])
    health = client.health()
  except RuntimeError as e:
    text = str(e)
    if 'Missing runtime dependency' in text:
      raise ValueError(
          f'--tpu={tpu}: resolving a TPU name needs google-api-python-client '
          f'and oauth2client: build the TPU environment ({BUILD_ENVIRONMENT}). '
          f'{HINT}') from e
    if 'not yet ready' in text:
      state = text.rsplit('state:', 1)[-1].strip(' "')
      raise TpuUnavailable(
          f'--tpu={tpu} ({where}) is {state}, not READY: wait for it, or '
          'delete and recreate it (a preempted TPU does not come back).'
      ) from e
    raise TpuUnavailable(f'--tpu={tpu} ({where}): {_first_line(e)}') from e
  except ValueError as e:  # The client's lookup failure wraps the HTTP error.
    text = str(e)
    if '404' in text or 'not found' in text.lower():
      raise TpuUnavailable(
          f'--tpu={tpu}: no TPU of that name in {where} (the Cloud TPU API '
          'answered 404). Check the name and zone: gcloud compute tpus '
          f'tpu-vm list --zone={getattr(client, "_zone", "ZONE")}. '
          f'{HINT}') from e
    raise TpuUnavailable(f'--tpu={tpu} ({where}): the Cloud TPU API lookup '
                     f'failed: {_first_line(e).split("Exception: ")[-1]}'
                     ) from e
  if health and health != 'HEALTHY':
    raise TpuUnavailable(f'--tpu={tpu} ({where}) is READY but its health is '
                     f'{health}: wait for it to become HEALTHY, or recreate '
                     'it.')
  print(f'TPU {tpu} ({where}): {len(workers)} worker'
        f'{"s" if len(workers) != 1 else ""}: {", ".join(workers)}',
        flush=True)
  return resolver


def apply_flags(flags: tuple[str, ...], environ=os.environ) -> str:
  """Adds TPU compiler flags to LIBTPU_INIT_ARGS (a TPU run only: an unknown
  flag in XLA_FLAGS aborts a CPU process); returns the variable's value."""
  for flag in flags:
    if not flag.startswith('--') or ' ' in flag:
      raise ValueError(f'TPU flag {flag!r} must read --name=value (gin: '
                       'distribution.strategy.StrategyConfig.tpu_flags).')
  present = environ.get(TPU_FLAGS_VARIABLE, '').split()
  value = ' '.join(present + [f for f in flags if f not in present])
  if value:
    environ[TPU_FLAGS_VARIABLE] = value
  return value


def detect_runtime(*, devices=DEVICE_FILES,
                   timeout: float = 2.0) -> tuple[str, str]:
  """What this machine can train on: ('local' or '', a sentence saying why).

  A TPU VM has TPU device files (DEVICE_FILES); its slice type comes from the
  metadata server (`instance/attributes/accelerator-type`). A host of a
  multi-host slice cannot drive the slice alone: that gets '' and a note.
  """
  if isinstance(devices, str):
    devices = (devices,)
  if not has_tpu_devices(devices):
    return '', 'CPU: no TPU on this machine (the quickstart runs on the CPU).'
  accelerator = metadata('instance/attributes/accelerator-type', timeout)
  try:
    count = tpu_slices.parse(accelerator).hosts if accelerator else 1
  except ValueError:
    count = 1  # A newer slice type: treat as one host.
  if count > 1:
    return '', (f'a host of a {accelerator} slice ({count} hosts): a notebook '
                'drives one host only. Train on the slice from its worker 0 '
                'with --tpu=NAME (python -m tools.launch); here the '
                'quickstart runs on the CPU.')
  return 'local', (f'a single-host TPU VM ({accelerator or "TPU"}): training '
                   'with --tpu=local.')
