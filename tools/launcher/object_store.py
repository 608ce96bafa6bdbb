"""Small text objects on gs:// (google-cloud-storage) or a local disk: the
job status and log tails the launcher and the job runner share.

No TensorFlow: both ends start fast (the launcher on the user's machine, the
runner on a TPU VM before train.py imports TensorFlow).
"""

import os

from tools.launcher import preflight

_CLIENT = []


def blob(path: str):
  """The google-cloud-storage Blob of a gs:// path."""
  return _blob(path)


def _blob(path: str):
  from google.cloud import storage
  if not _CLIENT:
    _CLIENT.append(storage.Client())
  bucket, name = preflight.split(path)
  return _CLIENT[0].bucket(bucket).blob(name)


def read_text(path: str) -> str | None:
  """The object's text, or None if it does not exist."""
  if path.startswith('gs://'):
    from google.api_core import exceptions
    try:
      return _blob(path).download_as_text()
    except exceptions.NotFound:
      return None
  try:
    with open(path) as f:
      return f.read()
  except FileNotFoundError:
    return None


def write_text(path: str, text: str) -> None:
  """Writes the whole object (atomically on a local disk; a GCS upload is
  atomic by itself)."""
  if path.startswith('gs://'):
    _blob(path).upload_from_string(text)
    return
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  staging = f'{path}.tmp-{os.getpid()}'
  with open(staging, 'w') as f:
    f.write(text)
  os.replace(staging, path)


def join(folder: str, name: str) -> str:
  return f'{folder.rstrip("/")}/{name}'
