"""Reads this VM's Compute Engine metadata (a TPU VM's slice type, hosts and
worker number). No TensorFlow: the launcher's job runner reads it too.
GCE_METADATA_HOST points it elsewhere (the tests' local server)."""

import os
import urllib.request


def metadata(path: str, timeout: float = 2.0) -> str | None:
  """computeMetadata/v1/<path>, or None when there is no metadata server or
  no such key."""
  host = os.environ.get('GCE_METADATA_HOST', 'metadata.google.internal')
  request = urllib.request.Request(f'http://{host}/computeMetadata/v1/{path}',
                                   headers={'Metadata-Flavor': 'Google'})
  try:
    with urllib.request.urlopen(request, timeout=timeout) as response:
      return response.read().decode().strip()
  except OSError:
    return None
