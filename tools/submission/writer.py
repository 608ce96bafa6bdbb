"""A package appears whole or not at all.

The tree is written into a staging folder beside the destination, checked
there, and renamed into place (one rename on a local disk). A gs://
destination must end in .tar.gz: the checked tree is uploaded as one
object, which GCS writes whole or not at all, and only if no object of
that name exists.
"""

import contextlib
import os
import shutil
import tarfile
import tempfile
from typing import Iterator


def check_destination(dest: str) -> None:
  """Raises ValueError before any work if `dest` cannot take a package."""
  if '://' in dest:
    if not dest.startswith('gs://'):
      raise ValueError(f'--output={dest}: a package goes to a local folder '
                       'or a gs:// object.')
    if not dest.endswith('.tar.gz'):
      raise ValueError(f'--output={dest}: a remote package is one .tar.gz '
                       'object (GCS has no atomic folder): end it in .tar.gz.')
    return
  if os.path.exists(dest):
    raise ValueError(f'--output={dest} exists: give a new folder (a package '
                     'is written whole, never into an old one).')
  parent = os.path.dirname(os.path.abspath(dest))
  if not os.path.isdir(parent):
    raise ValueError(f'--output={dest}: its folder {parent} does not exist.')


def write_files(root: str, files: dict) -> None:
  """Relative path -> bytes or str, under `root`."""
  for rel, content in files.items():
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
      f.write(content.encode() if isinstance(content, str) else content)


@contextlib.contextmanager
def staged(dest: str) -> Iterator[str]:
  """Yields a staging folder; when the block ends without an exception
  the folder becomes `dest` (or `dest`'s .tar.gz object); otherwise it is
  removed and `dest` is untouched."""
  remote = '://' in dest
  parent = (tempfile.gettempdir() if remote else
            os.path.dirname(os.path.abspath(dest)))
  stage = tempfile.mkdtemp(prefix='.package-', dir=parent)
  try:
    yield stage
    if remote:
      _upload_tarball(stage, dest)
    else:
      os.rename(stage, dest)
      stage = None
  finally:
    if stage:
      shutil.rmtree(stage, ignore_errors=True)


def _upload_tarball(stage: str, dest: str) -> None:
  """One object, created only if absent (an existing package is never
  replaced)."""
  from google.api_core import exceptions
  from tools.launcher import object_store
  local = stage + '.tar.gz'
  try:
    with tarfile.open(local, 'w:gz') as t:
      t.add(stage, arcname=os.path.basename(dest)[:-len('.tar.gz')])
    try:
      object_store.blob(dest).upload_from_filename(local,
                                                   if_generation_match=0)
    except exceptions.PreconditionFailed:
      raise ValueError(f'--output={dest} exists: give a new name (a package '
                       'is written whole, never over an old one).') from None
  finally:
    if os.path.exists(local):
      os.remove(local)
