"""Output files that appear whole or not at all.

A converter writes its shards under temporary names and renames them to the
final names only when every one is complete; if it fails, nothing appears
under the final names (and files already there are left as they were).
Temporaries live in a hidden sibling folder, `.staging-<random>/`, so that
no data glob (`train-*`) can pick up a partial file.
"""

import contextlib
import os
import uuid
from typing import Iterator

import tensorflow as tf


@contextlib.contextmanager
def staged(paths: list[str]) -> Iterator[list[str]]:
  """Yields temporary paths to write instead of `paths` (local or gs://).

  When the block ends normally they are renamed to `paths`; when it raises
  they are deleted. Close the files before the block ends.
  """
  folders, temporaries = [], []
  staging_name = f'.staging-{uuid.uuid4().hex[:12]}'
  for path in paths:
    folder = os.path.join(os.path.dirname(path) or '.', staging_name)
    if folder not in folders:
      tf.io.gfile.makedirs(folder)
      folders.append(folder)
    temporaries.append(os.path.join(folder, os.path.basename(path)))
  try:
    yield temporaries
    for temporary, path in zip(temporaries, paths):
      tf.io.gfile.rename(temporary, path, overwrite=True)
  finally:
    for folder in folders:
      if tf.io.gfile.exists(folder):
        tf.io.gfile.rmtree(folder)


def write_text(path: str, text: str) -> None:
  """Writes a text file whole or not at all."""
  with staged([path]) as [temporary]:
    with tf.io.gfile.GFile(temporary, 'w') as f:
      f.write(text)


def write_bytes(path: str, content: bytes) -> None:
  """Writes a binary file whole or not at all."""
  with staged([path]) as [temporary]:
    with tf.io.gfile.GFile(temporary, 'wb') as f:
      f.write(content)
