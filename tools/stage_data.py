"""Uploads converted TFRecords to GCS: in parallel, resumable, checksummed.

  python -m tools.stage_data data/imagenet gs://bucket/imagenet \\
      [--pattern='train-*' --pattern='validation-*'] [--workers=16]

Files go up through google-cloud-storage's transfer manager, several at
once. A file already in the bucket with the same CRC32C is skipped, so an
interrupted upload is resumed by running the command again; every file is
then checked (the bucket's CRC32C against the local file's) and a mismatch
is uploaded again or named. Nothing is deleted in the bucket.
"""

import base64
import fnmatch
import os
import sys

from absl import app
from absl import flags

from core import entry_point

FLAGS = flags.FLAGS


def crc32c(path: str) -> str:
  """Base64 CRC32C of a file, as GCS reports it."""
  import google_crc32c
  checksum = google_crc32c.Checksum()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 22), b''):
      checksum.update(chunk)
  return base64.b64encode(checksum.digest()).decode()


def local_files(folder: str, patterns: list[str]) -> list[str]:
  names = sorted(n for n in os.listdir(folder)
                 if os.path.isfile(os.path.join(folder, n)) and
                 any(fnmatch.fnmatchcase(n, p) for p in patterns))
  if not names:
    raise ValueError(f'No files in {folder} match {patterns}.')
  return names


def stage(folder: str, destination: str, *, patterns=('*',), workers=8,
          client=None) -> dict:
  """Uploads `folder`'s matching files to `destination` (gs://bucket/prefix).

  Returns:
    {'uploaded': [...], 'skipped': [...]} (file names).

  Raises:
    ValueError: a bucket that does not exist, no matching files, or a file
      whose checksum still differs after uploading it again.
  """
  from google.api_core import exceptions
  from google.cloud import storage
  from google.cloud.storage import transfer_manager
  from tools.launcher import preflight
  client = client or storage.Client()
  bucket_name, prefix = preflight.split(destination)
  prefix = prefix.rstrip('/') + '/' if prefix else ''
  try:
    bucket = client.get_bucket(bucket_name)
  except exceptions.NotFound:
    raise ValueError(f'Bucket gs://{bucket_name} does not exist.') from None
  names = local_files(folder, list(patterns))
  remote = {b.name: b.crc32c for b in client.list_blobs(bucket_name,
                                                         prefix=prefix)}
  sums = {n: crc32c(os.path.join(folder, n)) for n in names}
  todo = [n for n in names if remote.get(prefix + n) != sums[n]]
  skipped = [n for n in names if n not in todo]
  for _ in range(2):  # A file whose checksum differs goes up once more.
    if not todo:
      break
    results = transfer_manager.upload_many_from_filenames(
        bucket, todo, source_directory=folder, blob_name_prefix=prefix,
        max_workers=workers, worker_type=transfer_manager.THREAD)
    for name, result in zip(todo, results):
      if isinstance(result, Exception):
        raise ValueError(f'Uploading {name} failed: {result}')
    remote = {b.name: b.crc32c for b in client.list_blobs(bucket_name,
                                                           prefix=prefix)}
    todo = [n for n in todo if remote.get(prefix + n) != sums[n]]
  if todo:
    raise ValueError(f'Checksums still differ after a second upload: '
                     f'{", ".join(todo)} (gs://{bucket_name}/{prefix}).')
  return {'uploaded': [n for n in names if n not in skipped],
          'skipped': skipped}


def main(argv):
  if len(argv) != 3:
    raise app.UsageError('Give a local folder and a gs:// destination.')
  try:
    done = stage(argv[1], argv[2], patterns=FLAGS.pattern or ['*'],
                 workers=FLAGS.workers)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(f'uploaded {len(done["uploaded"])} files, skipped '
        f'{len(done["skipped"])} already there with the same CRC32C; all '
        f'verified in {argv[2]}')
  return 0


if __name__ == '__main__':
  flags.DEFINE_multi_string('pattern', [], 'File name globs (default: all).')
  flags.DEFINE_integer('workers', 8, 'Parallel uploads.')
  entry_point.parse_flags_early(lambda: None)
  app.run(entry_point.tool_main(main))
