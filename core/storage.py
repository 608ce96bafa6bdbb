"""How a run treats its storage (gin: `core.storage.StorageOptions`).

A pod run writes everything to gs:// and reads its data from there. Storage
outages of minutes happen; a run should ride them out rather than lose the
work since its last checkpoint. Two mechanisms, one budget:

- TensorFlow's own GCS client retries every request with exponential
  backoff. Its defaults (10 retries, 1 s doubling to 32 s: about 200 s) end
  a run in a 4-minute outage with "All 10 retry attempts failed". The run
  sets TensorFlow's retry and timeout settings (environment variables its
  GCS file system reads when it first touches gs://) so that its retries
  span `outage_budget_seconds`: data reads, restores and every other
  storage call wait out an outage shorter than the budget.
- Writes of the run's own files (checkpoints, mlperf.log, summaries,
  config) go to a local copy first and are uploaded by a background thread
  (training/uploads.py) that retries them while training goes on; the run
  stops only when a write has stayed undone for the budget.

TensorFlow's names and defaults (tensorflow/core/platform/cloud/
gcs_file_system.{h,cc}, TF 2.20, read 2026-12-04): GCS_REQUEST_CONNECTION_
TIMEOUT_SECS, GCS_REQUEST_IDLE_TIMEOUT_SECS (60: a request with no bytes
moving for this long is abandoned and retried), GCS_METADATA/READ/WRITE_
REQUEST_TIMEOUT_SECS (3600 each), GCS_RETRY_CONFIG_INIT_DELAY_TIME_US
(1 s), GCS_RETRY_CONFIG_MAX_DELAY_TIME_US (32 s), GCS_RETRY_CONFIG_MAX_
RETRIES (10). TensorFlow reads them once, as it loads (measured: set after
`import tensorflow` they change nothing), so every entry point sets this
module's defaults before it imports TensorFlow (core/startup.py), and
train.py, when gin binds other values, restarts itself once with them
(`restart_environment`). A variable already set in the environment wins:
the run leaves it as it is.

Kept free of TensorFlow imports: train.py applies it before TensorFlow's
GCS file system starts.
"""

import dataclasses
import math
import os
import tempfile


# Names the settings a process took from the defaults (not its user's).
DEFAULTED = 'SUITE_GCS_DEFAULTED'


@dataclasses.dataclass(frozen=True)
class StorageOptions:
  """Attributes:
    outage_budget_seconds: how long storage may stay unreachable before the
      run stops (exit 74, core/exit_codes.py): a read waits this long;
      a write of the run's files may stay undone this long while training
      goes on. 1800 s: GCS incidents of a few minutes are common; a run
      that waits half an hour and then stops has lost at most the
      training since its last durable checkpoint.
    request_idle_timeout_seconds: a storage request with no bytes moving
      for this long is abandoned and retried (a held connection is not a
      stall of the whole run). TensorFlow's default, 60 s.
    connection_timeout_seconds: to open a connection to storage.
    first_retry_delay_seconds, max_retry_delay_seconds: TensorFlow's
      backoff between retries, doubling from the first to the maximum
      (TensorFlow's defaults, 1 s and 32 s).
    staging_dir: the local folder where a remote model_dir's files are
      written before their upload ('': the system's temporary folder).

  Raises:
    ValueError: a budget or delay that is not positive.
  """
  outage_budget_seconds: float = 1800.0
  request_idle_timeout_seconds: float = 60.0
  connection_timeout_seconds: float = 120.0
  first_retry_delay_seconds: float = 1.0
  max_retry_delay_seconds: float = 32.0
  staging_dir: str = ''

  def __post_init__(self):
    for name in ('outage_budget_seconds', 'request_idle_timeout_seconds',
                 'connection_timeout_seconds', 'first_retry_delay_seconds',
                 'max_retry_delay_seconds'):
      if getattr(self, name) <= 0:
        raise ValueError(f'`StorageOptions.{name}` ({getattr(self, name)}) '
                         'must be positive.')
    if self.max_retry_delay_seconds < self.first_retry_delay_seconds:
      raise ValueError(
          f'`StorageOptions.max_retry_delay_seconds` '
          f'({self.max_retry_delay_seconds}) must be at least '
          f'`first_retry_delay_seconds` ({self.first_retry_delay_seconds}).')

  def retries(self) -> int:
    """TensorFlow retries whose backoff alone spans the budget."""
    waited, delay, count = 0.0, self.first_retry_delay_seconds, 0
    while waited < self.outage_budget_seconds:
      waited += delay
      delay = min(2 * delay, self.max_retry_delay_seconds)
      count += 1
    return max(count, 1)

  def tf_environment(self) -> dict[str, str]:
    """TensorFlow's GCS settings for these options."""
    return {
        'GCS_RETRY_CONFIG_MAX_RETRIES': str(self.retries()),
        'GCS_RETRY_CONFIG_INIT_DELAY_TIME_US': str(
            int(self.first_retry_delay_seconds * 1e6)),
        'GCS_RETRY_CONFIG_MAX_DELAY_TIME_US': str(
            int(self.max_retry_delay_seconds * 1e6)),
        'GCS_REQUEST_IDLE_TIMEOUT_SECS': str(
            math.ceil(self.request_idle_timeout_seconds)),
        'GCS_REQUEST_CONNECTION_TIMEOUT_SECS': str(
            math.ceil(self.connection_timeout_seconds)),
    }

  def apply(self, environ=os.environ) -> dict[str, str]:
    """Sets the settings the environment does not set already, and notes
    them as defaults; returns those it set. Call before TensorFlow loads."""
    chosen = {k: v for k, v in self.tf_environment().items()
              if k not in environ}
    environ.update(chosen)
    if chosen:
      environ[DEFAULTED] = ','.join(sorted(chosen))
    return chosen

  def restart_environment(self, environ=os.environ) -> dict[str, str]:
    """The settings these options change among those the process took as
    defaults ({}: TensorFlow already runs with these options)."""
    defaulted = _defaulted(environ)
    return {k: v for k, v in self.tf_environment().items()
            if k in defaulted and environ.get(k) != v}

  def set_for_restart(self, environ=os.environ) -> dict[str, str]:
    """Sets `restart_environment()`'s changes, noted as chosen (not
    defaults), for a process that restarts itself; returns them."""
    changes = self.restart_environment(environ)
    environ.update(changes)
    environ[DEFAULTED] = ','.join(sorted(_defaulted(environ) - set(changes)))
    return changes

  def staging_root(self) -> str:
    return self.staging_dir or tempfile.gettempdir()


def _defaulted(environ) -> set[str]:
  return set(filter(None, environ.get(DEFAULTED, '').split(',')))


def is_remote(path: str) -> bool:
  """A path on an object store (gs://, s3://, ...), not the local disk."""
  return '://' in path
