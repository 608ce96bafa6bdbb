"""A `gcloud` for tests: checks every command line against its reference
page (tools/launcher/gcloud.py SYNTAX), then does what gcloud would against the local
Cloud TPU API (tests/fake_cloud_tpu.py), the GCS emulator and "VMs" that
are local folders.

  FAKE_CLOUD_URL=http://127.0.0.1:P/ FAKE_VM_ROOT=/tmp/vms \\
  STORAGE_EMULATOR_HOST=... python -m tests.fake_gcloud compute tpus ...

A TPU VM's worker k is the folder FAKE_VM_ROOT/<node>/worker<k> (its home):
`ssh --command=C` runs C there with bash (each worker named by --worker),
`scp SRC NODE:DEST` copies into it. Every call is appended to
FAKE_VM_ROOT/gcloud.log, one JSON argv a line. A command a node cannot
take (no such node, not READY) fails as gcloud does: a message on stderr
and exit 1.
"""

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

from tools.launcher import gcloud as gcloud_lib

PROJECT_PATH = 'v2/projects/{project}/locations/{zone}/'


def api(method: str, path: str, body=None):
  request = urllib.request.Request(
      os.environ['FAKE_CLOUD_URL'] + path, method=method,
      data=json.dumps(body).encode() if body is not None else None,
      headers={'Content-Type': 'application/json'})
  try:
    with urllib.request.urlopen(request, timeout=30) as response:
      return json.loads(response.read() or b'{}')
  except urllib.error.HTTPError as e:
    message = json.loads(e.read()).get('error', {}).get('message', '')
    print(f'ERROR: (gcloud) {e.code}: {message}', file=sys.stderr)
    sys.exit(1)


def flag(argv, name, default=None):
  for a in argv:
    if a.startswith(name + '='):
      return a.split('=', 1)[1]
    if a == name:
      return True
  return default


def workers(node: dict, which: str) -> list[int]:
  count = len(node['networkEndpoints'])
  return list(range(count)) if which == 'all' else [int(which)]


def home(node_name: str, worker: int) -> str:
  path = os.path.join(os.environ['FAKE_VM_ROOT'], node_name, f'worker{worker}')
  os.makedirs(path, exist_ok=True)
  return path


def main(argv: list[str]) -> int:
  with open(os.path.join(os.environ['FAKE_VM_ROOT'], 'gcloud.log'), 'a') as f:
    f.write(json.dumps(argv) + '\n')
  full = ['gcloud', *argv]
  try:
    gcloud_lib.check(full)
  except ValueError as e:
    print(f'ERROR: (gcloud) {e}', file=sys.stderr)
    return 2
  name, positionals, _ = gcloud_lib.command_of(full)
  if name == 'storage cp':
    from google.cloud import storage
    source, target = positionals
    bucket, _, blob = source[len('gs://'):].partition('/')
    data = storage.Client().bucket(bucket).get_blob(blob)
    if data is None:
      print(f'ERROR: (gcloud) {source} not found', file=sys.stderr)
      return 1
    data.download_to_filename(target)
    return 0
  where = PROJECT_PATH.format(project=flag(argv, '--project'),
                              zone=flag(argv, '--zone'))
  target = positionals[0]
  if name == 'compute tpus tpu-vm create':
    api('POST', f'{where}nodes?nodeId={target}', {
        'acceleratorType': flag(argv, '--accelerator-type'),
        'runtimeVersion': flag(argv, '--version'),
        'schedulingConfig': {'spot': bool(flag(argv, '--spot'))}})
  elif name.endswith('queued-resources create'):
    api('POST', f'{where}queuedResources?queuedResourceId={target}', {
        'tpu': {'nodeSpec': [{'nodeId': flag(argv, '--node-id'), 'node': {
            'acceleratorType': flag(argv, '--accelerator-type'),
            'runtimeVersion': flag(argv, '--runtime-version')}}]},
        'spot': {} if flag(argv, '--spot') else None})
  elif name == 'compute tpus tpu-vm delete':
    api('DELETE', f'{where}nodes/{target}')
  elif name == 'compute tpus queued-resources delete':
    api('DELETE', f'{where}queuedResources/{target}')
  elif name == 'compute tpus tpu-vm describe':
    print(api('GET', f'{where}nodes/{target}')['state'])
  elif name == 'compute tpus queued-resources describe':
    print(api('GET', f'{where}queuedResources/{target}')['state']['state'])
  elif name == 'compute tpus tpu-vm scp':
    source, destination = positionals
    node_name, _, path = destination.partition(':')
    node = api('GET', f'{where}nodes/{node_name}')
    for k in workers(node, flag(argv, '--worker', '0')):
      shutil.copy(source, os.path.join(home(node_name, k), path))
  elif name == 'compute tpus tpu-vm ssh':
    node = api('GET', f'{where}nodes/{target}')
    if node['state'] != 'READY':
      print(f'ERROR: (gcloud) node {target} is {node["state"]}',
            file=sys.stderr)
      return 1
    code = 0
    for k in workers(node, flag(argv, '--worker', '0')):
      code = code or subprocess.run(['bash', '-c', flag(argv, '--command')],
                                    cwd=home(target, k)).returncode
    return code
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
