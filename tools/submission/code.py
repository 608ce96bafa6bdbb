"""The code a package holds: `git archive` of the commit the runs
recorded (core/source.py), from this checkout."""

import io
import subprocess
import tarfile

from core import source as source_lib


def archive(commit: str, root: str = source_lib.ROOT) -> bytes:
  """`git archive` of the commit, as a tar.

  Raises:
    ValueError: the commit is not in the checkout.
  """
  done = subprocess.run(['git', '-C', root, 'archive', '--format=tar',
                         commit], capture_output=True, check=False)
  if done.returncode != 0:
    raise ValueError(
        f'commit {commit[:12]} (which the runs used) is not in the checkout '
        f'at {root}: fetch it (git fetch origin {commit}) and package again.')
  return done.stdout


def files(tree: bytes, folder: str) -> dict:
  """`folder/<path>` -> bytes of every file in the tar."""
  out = {}
  with tarfile.open(fileobj=io.BytesIO(tree)) as t:
    for member in t.getmembers():
      if member.isfile():
        out[f'{folder}/{member.name}'] = t.extractfile(member).read()
  return out
