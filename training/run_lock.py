"""One live run per model_dir: a lock file that names its owner.

`<model_dir>/RUN_LOCK` holds the owner (host, pid, start time, command).
- Local folders: the file is flock()ed, and removed when the run ends. The
  kernel releases the lock when the process ends however it ends, so a dead
  run (whose file stays) never blocks the next one.
- gs:// folders have no flock: the lock is an object created only if absent
  (generation precondition 0). The owner rewrites it every
  `heartbeat_seconds`, each write conditional on the generation it wrote
  last; a lock not rewritten for `stale_after_seconds` belongs to a dead run
  and is taken over (a delete conditional on the generation read, then a new
  create), with a warning. An owner whose rewrite fails its precondition has
  lost the lock (`lost` says to whom). A lock whose owner ran on this host
  and has ended (killed, say) is taken over at once.

Multi-worker jobs take one lock, on the chief (train.py).
"""

import datetime
import fcntl
import json
import os
import socket
import sys
import threading
import time

LOCK_NAME = 'RUN_LOCK'


class ModelDirInUse(Exception):
  """Another live run holds model_dir's lock."""


def _owner() -> dict:
  return {'host': socket.gethostname(), 'pid': os.getpid(),
          'started': datetime.datetime.now().astimezone().isoformat(
              timespec='seconds'),
          'command': ' '.join(sys.argv)[:300]}


def ended_here(owner: dict) -> bool:
  """Whether the owner ran on this host and its process is gone."""
  if owner.get('host') != socket.gethostname() or not owner.get('pid'):
    return False
  try:
    os.kill(int(owner['pid']), 0)
  except ProcessLookupError:
    return True
  except (PermissionError, ValueError):  # Alive (another user's) or garbled.
    return False
  return False


def describe(owner: dict) -> str:
  return (f"host {owner.get('host', '?')}, pid {owner.get('pid', '?')}, "
          f"started {owner.get('started', '?')}")


def _in_use(model_dir: str, owner: dict, detail: str = '') -> ModelDirInUse:
  return ModelDirInUse(
      f'--model_dir={model_dir} is in use by another run ({describe(owner)}'
      f'{detail}). Wait for it to end, stop it, or choose another '
      '--model_dir.')


class LocalLock:
  """flock() on <model_dir>/RUN_LOCK."""

  def __init__(self, model_dir: str):
    self.model_dir = model_dir
    self.path = os.path.join(model_dir, LOCK_NAME)
    self.lost = None  # The kernel lock cannot be taken away.
    self._fd = None

  def acquire(self) -> None:
    while True:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        with os.fdopen(fd) as f:
          text = f.read()
        try:
          owner = json.loads(text)
        except ValueError:  # The owner is between lock and write.
          owner = {}
        raise _in_use(self.model_dir, owner) from None
      except OSError as e:  # A filesystem without locks (some FUSE mounts).
        os.close(fd)
        print(f'warning: cannot lock {self.path} ({e}); nothing stops a '
              'second run from using this model_dir.', flush=True)
        return
      # The owner unlinks the file on release: a lock taken on a file
      # unlinked meanwhile is no lock; take the new file's instead.
      try:
        same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
      except FileNotFoundError:
        same = False
      if same:
        break
      os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(_owner()).encode(), 0)
    self._fd = fd

  def release(self) -> None:
    if self._fd is not None:
      os.unlink(self.path)  # Still locked: no one holds this file.
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None


class GcsLock:
  """A gs:// object created and rewritten under generation preconditions."""

  def __init__(self, model_dir: str, *, stale_after_seconds: float = 600.0,
               heartbeat_seconds: float = 60.0):
    from google.cloud import storage  # Only gs:// model_dirs need it.
    bucket, _, prefix = model_dir[len('gs://'):].partition('/')
    self.model_dir = model_dir
    self.stale_after_seconds = stale_after_seconds
    self.heartbeat_seconds = heartbeat_seconds
    self.blob = storage.Client().bucket(bucket).blob(
        f'{prefix.rstrip("/")}/{LOCK_NAME}' if prefix else LOCK_NAME)
    self.owner = _owner()
    self.generation = None
    self.lost = None
    self._stop = threading.Event()
    self._thread = None

  def _write(self, generation: int) -> None:
    self.blob.upload_from_string(
        json.dumps({**self.owner, 'heartbeat': time.time()}),
        content_type='application/json', if_generation_match=generation)
    self.generation = self.blob.generation

  def acquire(self) -> None:
    from google.api_core import exceptions
    for _ in range(3):
      try:
        self._write(0)
        break
      except exceptions.PreconditionFailed:
        pass
      held = self.blob.bucket.get_blob(self.blob.name)
      if held is None:  # Released in between: try again.
        continue
      try:
        owner = json.loads(held.download_as_text())
      except (ValueError, exceptions.NotFound):
        owner = {}
      age = time.time() - held.updated.timestamp()
      if ended_here(owner):
        why = 'whose process on this host has ended'
      elif age >= self.stale_after_seconds:
        why = f'that stopped writing its heartbeat {age / 60:.1f} min ago'
      else:
        raise _in_use(self.model_dir, owner,
                      f', last heartbeat {age:.0f} s ago')
      print(f'warning: taking over the lock of --model_dir={self.model_dir} '
            f'from a run {why} ({describe(owner)}).', flush=True)
      try:
        held.delete(if_generation_match=held.generation)
      except (exceptions.PreconditionFailed, exceptions.NotFound):
        pass  # Another run took it first: the next round sees its lock.
    else:
      raise _in_use(self.model_dir, {}, ', the lock changed hands while '
                    'this run tried to take it')
    self._thread = threading.Thread(target=self._beat, daemon=True)
    self._thread.start()

  def heartbeat(self) -> None:
    """Rewrites the lock; on a precondition failure the lock is lost."""
    from google.api_core import exceptions
    if self.lost:
      return
    try:
      self._write(self.generation)
    except (exceptions.PreconditionFailed, exceptions.NotFound):
      held = self.blob.bucket.get_blob(self.blob.name)
      try:
        owner = json.loads(held.download_as_text()) if held else {}
      except ValueError:
        owner = {}
      self.lost = (f'another run took over the lock of --model_dir='
                   f'{self.model_dir} ({describe(owner)})')
    except exceptions.GoogleAPIError as e:  # Transient: try next beat.
      print(f'warning: could not renew the lock of {self.model_dir}: {e}',
            flush=True)

  def _beat(self) -> None:
    while not self._stop.wait(self.heartbeat_seconds):
      self.heartbeat()

  def release(self) -> None:
    from google.api_core import exceptions
    self._stop.set()
    if self._thread:
      self._thread.join()
    if self.generation is not None and not self.lost:
      try:
        self.blob.delete(if_generation_match=self.generation)
      except (exceptions.PreconditionFailed, exceptions.NotFound):
        pass
      except exceptions.GoogleAPIError as e:  # Storage unreachable.
        print(f'warning: could not remove the lock of {self.model_dir} '
              f'({e}); a later run takes it over once its heartbeat is '
              f'{self.stale_after_seconds / 60:.0f} min old.', flush=True)
    self.generation = None


class NoLock:
  """Storage without a lock primitive we know (hdfs://, s3://, ...)."""

  def __init__(self, model_dir: str):
    self.model_dir, self.lost = model_dir, None

  def acquire(self) -> None:
    print(f'warning: no run lock for --model_dir={self.model_dir}: nothing '
          'stops a second run from using it.', flush=True)

  def release(self) -> None:
    pass


def for_model_dir(model_dir: str, **gcs_options):
  """The lock that suits model_dir's storage (not yet acquired)."""
  if model_dir.startswith('gs://'):
    return GcsLock(model_dir, **gcs_options)
  if '://' in model_dir:
    return NoLock(model_dir)
  return LocalLock(model_dir)
