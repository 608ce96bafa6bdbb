"""Runs a command against a local GCS emulator that TF's gs:// filesystem reaches.

  unshare -mn python -m tools.gcs_emulator --bucket=test -- python train.py \
      --model_dir=gs://test/run ...

TensorFlow's built-in gs:// filesystem has its endpoints hard-coded
(https://www.googleapis.com, https://storage.googleapis.com) and honours no
emulator variable. So, inside a private network and mount namespace (run this
under `unshare -mn` as root), this tool:
  1. brings up the loopback device and bind-mounts a hosts file that sends both
     Google hostnames to 127.0.0.1;
  2. makes a throw-away CA and server certificate with openssl;
  3. starts `gcp-storage-emulator` (in memory) and a TLS reverse proxy on
     127.0.0.1:443 in front of it (de-chunking request bodies and rewriting
     http:// Location headers to https://);
  4. runs the command with CURL_CA_BUNDLE pointing at the CA,
     GOOGLE_AUTH_TOKEN_FOR_TESTING set, STORAGE_EMULATOR_HOST naming the
     emulator (so the google-cloud-storage client sees the same bucket) and
     GCS_FAULTS_FILE naming where the command may write faults for the proxy
     to inject (`Faults`: held requests, error answers), and exits with its
     exit code.
Nothing outside the namespace is touched.

The emulator enforces `ifGenerationMatch` on uploads and deletes, and keeps
a new bucket's location, as GCS does (gcp-storage-emulator ignores both); the
gs:// run lock and the launcher's preflight rely on them.
The Python client alone needs no root: `start_emulator` and
STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT.
"""

import collections
import http
import http.client
import http.server
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

from absl import app
from absl import flags

GOOGLE_HOSTS = ('www.googleapis.com', 'storage.googleapis.com')
HOP_BY_HOP = {'connection', 'keep-alive', 'transfer-encoding', 'expect',
              'content-length', 'proxy-connection', 'upgrade', 'te'}


def _object_name(request, handler_name: str) -> str:
  if handler_name == 'delete':
    return request.params['object_id']
  if 'name' in request.query:
    return request.query['name'][0]
  return request.data['meta'].get('name')  # A multipart upload.


def _enforce_generation_preconditions() -> None:
  """Makes uploads and deletes honour ifGenerationMatch (412 otherwise)."""
  from gcp_storage_emulator import server
  from gcp_storage_emulator.exceptions import NotFound
  from gcp_storage_emulator.handlers import objects

  def checked(handler):
    if getattr(handler, 'checks_generation', False):
      return handler

    def wrapped(request, response, storage, *args, **kwargs):
      wanted = request.query.get('ifGenerationMatch')
      if wanted:
        try:
          current = storage.get_file_obj(request.params['bucket_name'],
                                         _object_name(request,
                                                      handler.__name__))
          generation = str(current['generation'])
        except NotFound:
          generation = '0'
        if generation != wanted[0]:
          response.status = http.HTTPStatus.PRECONDITION_FAILED
          response.json({'error': {'code': 412,
                                   'message': 'Precondition Failed'}})
          return None
      return handler(request, response, storage, *args, **kwargs)

    wrapped.checks_generation = True
    return wrapped

  for _, handlers in server.HANDLERS:
    for method, handler in handlers.items():
      if handler in (objects.insert, objects.delete):
        handlers[method] = checked(handler)
  objects.insert = checked(objects.insert)


def _keep_bucket_locations() -> None:
  """Makes a created bucket keep the location it was asked for, as GCS does
  (gcp-storage-emulator makes every bucket multi-region US)."""
  from gcp_storage_emulator import server
  from gcp_storage_emulator.handlers import buckets

  make = buckets._make_bucket_resource  # pylint: disable=protected-access
  if getattr(make, 'keeps_location', False):
    return
  asked = threading.local()

  def make_with_location(*args, **kwargs):
    resource = make(*args, **kwargs)
    location = getattr(asked, 'location', None)
    if location:
      resource['location'] = location.upper()
      resource['locationType'] = 'region' if '-' in location else (
          'multi-region')
    return resource

  def insert(request, response, storage, *args, **kwargs):
    asked.location = (request.data or {}).get('location')
    try:
      return buckets.insert(request, response, storage, *args, **kwargs)
    finally:
      asked.location = None

  make_with_location.keeps_location = True
  buckets._make_bucket_resource = make_with_location  # pylint: disable=protected-access
  for _, handlers in server.HANDLERS:
    for method, handler in handlers.items():
      if handler is buckets.insert:
        handlers[method] = insert


def _answer_resumable_status_as_gcs() -> None:
  """A resumable upload's status (308 Resume Incomplete) carries a Range
  header only when bytes were persisted, as GCS documents
  (https://cloud.google.com/storage/docs/performing-resumable-uploads,
  "Check the status of a resumable upload", read 2026-12-04: no Range
  header means no bytes). gcp-storage-emulator answers `bytes=0-0` for
  none, claiming one byte: TensorFlow, recovering from a failed chunk,
  then resumes at byte 1 and the emulator refuses it (400 "Invalid
  Content-Range start"), so a write fault tested the emulator, not the
  suite."""
  from gcp_storage_emulator.handlers import objects

  incomplete = objects._resumable_incomplete  # pylint: disable=protected-access
  if getattr(incomplete, 'as_gcs', False):
    return

  def resumable_incomplete(response, storage, upload_id, fallback_end=0):
    incomplete(response, storage, upload_id, fallback_end)
    if not storage.get_resumable_byte_count(upload_id):
      response._headers.pop('Range', None)  # pylint: disable=protected-access

  resumable_incomplete.as_gcs = True
  objects._resumable_incomplete = resumable_incomplete  # pylint: disable=protected-access


def start_emulator(bucket: str):
  """Starts gcp-storage-emulator in memory with `bucket`; returns (server, port)."""
  from gcp_storage_emulator.handlers import objects
  from gcp_storage_emulator.server import create_server

  media_upload = objects._media_upload  # pylint: disable=protected-access

  def media_upload_allowing_empty_body(request, response, storage):
    # TF uploads directory markers with an empty body, which the emulator
    # reads as None and then fails on len(None).
    if request.data is None:
      request._data = b''  # pylint: disable=protected-access
    return media_upload(request, response, storage)

  objects._media_upload = media_upload_allowing_empty_body  # pylint: disable=protected-access
  _enforce_generation_preconditions()
  _keep_bucket_locations()
  _answer_resumable_status_as_gcs()
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  server = create_server('127.0.0.1', port, in_memory=True,
                         default_bucket=bucket)
  server.start()
  return server, port


def make_certificates(folder: str) -> tuple[str, str, str]:
  """A CA and a server certificate for the Google hosts; returns paths."""
  ca_key, ca = os.path.join(folder, 'ca.key'), os.path.join(folder, 'ca.pem')
  key, csr = os.path.join(folder, 'srv.key'), os.path.join(folder, 'srv.csr')
  cert, ext = os.path.join(folder, 'srv.pem'), os.path.join(folder, 'ext.cnf')
  with open(ext, 'w') as f:
    f.write('subjectAltName=' + ','.join(f'DNS:{h}' for h in GOOGLE_HOSTS) +
            '\nbasicConstraints=CA:FALSE\n')

  def openssl(*args):
    subprocess.run(['openssl', *args], check=True, capture_output=True)

  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
          '-subj', '/CN=gcs-emulator-ca', '-keyout', ca_key, '-out', ca)
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj',
          f'/CN={GOOGLE_HOSTS[0]}', '-keyout', key, '-out', csr)
  openssl('x509', '-req', '-in', csr, '-CA', ca, '-CAkey', ca_key,
          '-CAcreateserial', '-days', '2', '-extfile', ext, '-out', cert)
  return ca, cert, key


def _takes(methods, method: str) -> bool:
  """Whether a rule's "method" ("*", one, or a list) covers `method`."""
  return methods == '*' or method == methods or (
      isinstance(methods, list) and method in methods)


class Faults:
  """Storage faults the proxy injects, as TensorFlow meets them on GCS: rules
  in a JSON file (`GCS_FAULTS_FILE` in the command's environment), read at
  every request, so a test changes them between phases. A rule:
  {"method": "PUT", ["POST", "PUT"] or "*", "path": a substring of the
   request's path,
   "times": the matching requests it takes (0: all),
   "rate": the share of matching requests it takes (1: all; drawn from a
     generator seeded per rule, so a run repeats),
   and its action:
   "status": an HTTP error answered without forwarding (503),
   "hang_seconds": held that long, then forwarded,
   "reset": the connection closed without an answer,
   "bytes_per_second": the answer's body sent that slowly,
   "outage_seconds" with "status": an outage: from this request on, every
     request of the rule's methods (any path) answers the status for that
     long}.
  The first rule that matches and has times left acts. Every request that
  arrives during an outage and every action taken is appended to
  `<rules file>.log` as one JSON line (time, method, path, action)."""

  def __init__(self, path: str):
    self.path = path
    self._used = collections.Counter()
    self._draws = {}
    self._lock = threading.Lock()
    self._outage = None  # (end time, status, methods) of the outage.

  def _log(self, method: str, path: str, action: str) -> None:
    with open(self.path + '.log', 'a') as f:
      f.write(json.dumps({'time': time.time(), 'method': method,
                          'path': path, 'action': action}) + '\n')

  def match(self, method: str, path: str) -> dict | None:
    with self._lock:
      if self._outage and time.monotonic() < self._outage[0]:
        if _takes(self._outage[2], method):
          self._log(method, path, f'outage {self._outage[1]}')
          return {'status': self._outage[1]}
      else:
        self._outage = None
    try:
      with open(self.path) as f:
        rules = json.load(f)
    except (OSError, ValueError):
      return None
    with self._lock:
      for rule in rules:
        # Counted by content: a test that rewrites the file starts afresh.
        i = json.dumps(rule, sort_keys=True)
        if not _takes(rule.get('method', '*'), method):
          continue
        if rule.get('path', '') not in path:
          continue
        if rule.get('times') and self._used[i] >= rule['times']:
          continue
        draws = self._draws.setdefault(i, random.Random(i))  # Repeatable.
        if draws.random() >= rule.get('rate', 1.0):
          continue
        self._used[i] += 1
        if rule.get('outage_seconds'):
          self._outage = (time.monotonic() + rule['outage_seconds'],
                          rule['status'], rule.get('method', '*'))
        self._log(method, path, json.dumps(
            {k: v for k, v in rule.items() if k not in ('path', 'method')}))
        return rule
    return None


def make_proxy_handler(upstream_port: int, faults: Faults | None = None):
  """A TLS-terminating handler forwarding every request to the emulator,
  with `faults` injected."""

  class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *args):
      del args

    def _body(self) -> bytes:
      if 'chunked' in self.headers.get('Transfer-Encoding', '').lower():
        chunks = []
        while True:
          size = int(self.rfile.readline().split(b';')[0].strip(), 16)
          if size == 0:
            while self.rfile.readline() not in (b'\r\n', b'\n', b''):
              pass  # Trailers.
            return b''.join(chunks)
          chunks.append(self.rfile.read(size))
          self.rfile.readline()
      length = int(self.headers.get('Content-Length') or 0)
      return self.rfile.read(length) if length else b''

    def _forward(self):
      body = self._body()
      rule = faults.match(self.command, self.path) if faults else None
      if rule and rule.get('hang_seconds'):
        time.sleep(rule['hang_seconds'])
      if rule and rule.get('reset'):
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)
        return
      if rule and rule.get('status'):
        data = json.dumps({'error': {'code': rule['status'],
                                     'message': 'injected fault'}}).encode()
        self.send_response(rule['status'])
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return
      headers = {k: v for k, v in self.headers.items()
                 if k.lower() not in HOP_BY_HOP}
      if body or self.command in ('POST', 'PUT', 'PATCH'):
        headers['Content-Length'] = str(len(body))
      upstream = http.client.HTTPConnection('127.0.0.1', upstream_port,
                                            timeout=120)
      upstream.request(self.command, self.path, body=body, headers=headers)
      reply = upstream.getresponse()
      data = reply.read()
      upstream.close()
      self.send_response(reply.status, reply.reason)
      for k, v in reply.getheaders():
        if k.lower() in HOP_BY_HOP:
          continue
        if k.lower() == 'location':
          v = v.replace('http://', 'https://', 1)
        self.send_header(k, v)
      self.send_header('Content-Length', str(len(data)))
      self.end_headers()
      if self.command == 'HEAD':
        return
      rate = rule.get('bytes_per_second') if rule else None
      if not rate:
        self.wfile.write(data)
        return
      for start in range(0, len(data), max(int(rate), 1)):
        self.wfile.write(data[start:start + max(int(rate), 1)])
        self.wfile.flush()
        time.sleep(1.0)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

  return Handler


def start_proxy(upstream_port: int, cert: str, key: str,
                faults: Faults | None = None) -> None:
  server = http.server.ThreadingHTTPServer(
      ('127.0.0.1', 443), make_proxy_handler(upstream_port, faults))
  context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
  context.load_cert_chain(cert, key)
  server.socket = context.wrap_socket(server.socket, server_side=True)
  threading.Thread(target=server.serve_forever, daemon=True).start()


def isolate_network(folder: str) -> None:
  """Loopback up; Google hosts resolve to it (needs `unshare -mn`, root)."""
  subprocess.run(['ip', 'link', 'set', 'lo', 'up'], check=True)
  hosts = os.path.join(folder, 'hosts')
  with open(hosts, 'w') as f:
    f.write('127.0.0.1 localhost ' + ' '.join(GOOGLE_HOSTS) + '\n')
  subprocess.run(['mount', '--bind', hosts, '/etc/hosts'], check=True)


def run(command: list[str], *, bucket: str) -> int:
  """Sets everything up, runs `command`, returns its exit code."""
  with tempfile.TemporaryDirectory() as folder:
    isolate_network(folder)
    ca, cert, key = make_certificates(folder)
    emulator, port = start_emulator(bucket)
    try:
      faults = os.path.join(folder, 'faults.json')
      start_proxy(port, cert, key, Faults(faults))
      env = dict(os.environ, CURL_CA_BUNDLE=ca,
                 GOOGLE_AUTH_TOKEN_FOR_TESTING='dummy',
                 STORAGE_EMULATOR_HOST=f'http://127.0.0.1:{port}',
                 GCS_FAULTS_FILE=faults)
      return subprocess.run(command, env=env, check=False).returncode
    finally:
      emulator.stop()  # Its API thread is not a daemon.


def main(argv):
  command = argv[1:]
  if command and command[0] == '--':
    command = command[1:]
  if not command:
    raise app.UsageError('Give the command to run after --.')
  sys.exit(run(command, bucket=flags.FLAGS.bucket))


if __name__ == '__main__':
  flags.DEFINE_string('bucket', 'test', 'Bucket the emulator starts with.')
  app.run(main)
