"""A local GCE metadata server and Cloud TPU API (v1, and v2's node lookup),
speaking their protocols.

TensorFlow's TPUClusterResolver resolves a TPU name through its bundled Cloud
TPU client: project and zone from the metadata server (GCE_METADATA_HOST),
an OAuth token from it through oauth2client (GCE_METADATA_IP,
GCE_METADATA_ROOT), the API's discovery document (TPU_API_DISCOVERY_URL,
here google-api-python-client's own copy of tpu.v1 pointed at this server)
and `GET v1/projects/P/locations/Z/nodes/N`. This server answers all of
them for the nodes it is given, and the TPU VM API (v2) that google-cloud-tpu's
REST transport and tests/fake_gcloud.py call: nodes (get, create, delete)
and queued resources (get, create, delete), a queued resource walking
through the states it is scripted with, one state per GET (by default
ACCEPTED, WAITING_FOR_RESOURCES, PROVISIONING, ACTIVE; its node is made
READY when it turns ACTIVE). `preempt(name)` and `vanish(name)` do to a
node what Cloud TPU does to a spot node (also as POST test/preempt/N and
test/vanish/N, for the fake workload on the "VM").

  server = FakeCloudTpu(nodes={'my-pod': node(workers=4)})
  env = server.environment()   # for a child process: oauth2client reads
                               # its variables when imported
"""

import http.server
import json
import os
import threading

PROJECT, ZONE = 'test-project', 'us-central1-a'
QUEUED_WALK = ('ACCEPTED', 'WAITING_FOR_RESOURCES', 'PROVISIONING', 'ACTIVE')


def node(*, workers: int = 1, state: str = 'READY', health: str = 'HEALTHY',
         accelerator: str = 'v3-8') -> dict:
  """A Cloud TPU API v1 Node with `workers` network endpoints."""
  return {
      'state': state, 'health': health, 'acceleratorType': accelerator,
      'tensorflowVersion': 'tpu-vm-tf-2.20.0',
      'networkEndpoints': [{'ipAddress': f'10.0.0.{i + 2}', 'port': 8470}
                           for i in range(workers)],
  }


def hosts(accelerator: str) -> int:
  from distribution import tpu_slices
  return tpu_slices.parse(accelerator).hosts


def _discovery_document(base_url: str) -> bytes:
  from googleapiclient import discovery_cache  # The client's own copy.
  path = os.path.join(os.path.dirname(discovery_cache.__file__), 'documents',
                      'tpu.v1.json')
  with open(path) as f:
    document = json.load(f)
  document.update(rootUrl=base_url, baseUrl=base_url,
                  mtlsRootUrl=base_url, servicePath='')
  return json.dumps(document).encode()


class FakeCloudTpu:
  """Serves metadata and the TPU API on 127.0.0.1 in a daemon thread."""

  def __init__(self, nodes: dict, accelerator_type: str = '',
               queued_walk=QUEUED_WALK, failure: str = '',
               attributes: dict | None = None):
    """Args:
      nodes: TPU name -> node() dict.
      accelerator_type: this "VM"'s instance/attributes/accelerator-type
        ('' : not a TPU VM, 404).
      queued_walk: the states a new queued resource passes, one per GET.
      failure: the error message of a FAILED queued resource.
      attributes: more of this "VM"'s instance/attributes/ (a TPU VM's
        worker-network-endpoints, agent-worker-number).
    """
    self.nodes, self.requests = dict(nodes), []
    self.accelerator_type = accelerator_type
    self.attributes = dict(attributes or {})
    self.queued, self.queued_walk, self.failure = {}, list(queued_walk), failure
    self.calls = []  # (method, name) of every change, in order.
    self.lock = threading.Lock()
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):

      def log_message(self, *args):
        pass

      def _send(self, status, body, content_type='application/json'):
        data = body if isinstance(body, bytes) else (
            json.dumps(body) if content_type == 'application/json' else
            body).encode()
        self.send_response(status)
        self.send_header('Content-Type', content_type)
        self.send_header('Metadata-Flavor', 'Google')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def do_GET(self):  # pylint: disable=invalid-name
        path = self.path.split('?')[0]
        outer.requests.append(path)
        metadata = '/computeMetadata/v1/'
        if path == '/':
          return self._send(200, b'', 'text/plain')
        if path.startswith(metadata):
          if self.headers.get('Metadata-Flavor') != 'Google':
            return self._send(403, b'Missing Metadata-Flavor', 'text/plain')
          key = path[len(metadata):].rstrip('/')
          text = {
              'project/project-id': PROJECT,
              'instance/zone': f'projects/123456789/zones/{ZONE}',
              'instance/network-interfaces/0/ip': '10.0.0.100',
              'instance/attributes/accelerator-type': (
                  outer.accelerator_type or None),
              **{f'instance/attributes/{k}': v
                 for k, v in outer.attributes.items()},
          }.get(key)
          if text is not None:
            return self._send(200, text, 'text/plain')
          account = key.split('/')[2] if key.startswith(
              'instance/service-accounts/') else None
          if account and key.endswith('/token'):
            return self._send(200, {'access_token': 'fake-token',
                                    'expires_in': 3600,
                                    'token_type': 'Bearer'})
          if account:
            return self._send(200, {
                'email': 'sa@test-project.iam.gserviceaccount.com',
                'scopes': ['https://www.googleapis.com/auth/cloud-platform'],
                'aliases': ['default']})
          return self._send(404, b'not found', 'text/plain')
        if path == '/discovery/tpu/v1':
          return self._send(200, _discovery_document(outer.base_url))
        v2 = f'/v2/projects/{PROJECT}/locations/{ZONE}/'
        if path.startswith(v2 + 'nodes/'):  # As google-cloud-tpu asks.
          name = path[len(v2 + 'nodes/'):]
          with outer.lock:
            found = outer.nodes.get(name)
          if found is None:
            return self._not_found('node', name)
          return self._send(200, {
              'name': v2[1:] + 'nodes/' + name, 'state': found['state'],
              'acceleratorType': found['acceleratorType'],
              'health': found['health'],
              'networkEndpoints': found['networkEndpoints']})
        if path.startswith(v2 + 'queuedResources/'):
          name = path[len(v2 + 'queuedResources/'):]
          with outer.lock:
            found = outer.queued.get(name)
            if found is None:
              return self._not_found('queued resource', name)
            state = found['walk'].pop(0) if len(found['walk']) > 1 else (
                found['walk'][0])
            if state == 'ACTIVE' and not found.get('activated'):
              found['activated'] = True
              outer.nodes[name] = node(
                  workers=found['workers'], accelerator=found['accelerator'])
          body = {'state': state}
          if state == 'FAILED':
            body['failedData'] = {'error': {'code': 8,
                                            'message': outer.failure}}
          if state == 'SUSPENDED':
            body['stateInitiator'] = 'SERVICE'
            body['suspendedData'] = {}
          return self._send(200, {'name': v2[1:] + 'queuedResources/' + name,
                                  'state': body})
        prefix = f'/v1/projects/{PROJECT}/locations/{ZONE}/nodes/'
        if path.startswith(prefix):
          if self.headers.get('Authorization') != 'Bearer fake-token':
            return self._send(401, {'error': {'code': 401,
                                              'message': 'no credentials'}})
          name = path[len(prefix):]
          if name in outer.nodes:
            return self._send(200, {'name': prefix[1:] + name,
                                    **outer.nodes[name]})
          return self._send(404, {'error': {
              'code': 404, 'status': 'NOT_FOUND',
              'message': f'Resource \'{prefix[1:]}{name}\' was not found'}})
        return self._send(404, {'error': {'code': 404, 'message': path}})

      def _not_found(self, what, name):
        return self._send(404, {'error': {
            'code': 404, 'status': 'NOT_FOUND',
            'message': f'{what} {name} not found'}})

      def _conflict(self, what, name):
        return self._send(409, {'error': {
            'code': 409, 'status': 'ALREADY_EXISTS',
            'message': f'{what} {name} already exists'}})

      def _body(self):
        length = int(self.headers.get('Content-Length') or 0)
        return json.loads(self.rfile.read(length) or b'{}')

      def do_POST(self):  # pylint: disable=invalid-name
        path, _, query = self.path.partition('?')
        params = dict(p.split('=', 1) for p in query.split('&') if '=' in p)
        body = self._body()
        v2 = f'/v2/projects/{PROJECT}/locations/{ZONE}/'
        if path.startswith('/test/'):
          _, _, action, name = path.split('/')
          getattr(outer, action)(name)
          return self._send(200, {})
        if path == v2 + 'nodes':
          name = params['nodeId']
          with outer.lock:
            if name in outer.nodes:
              return self._conflict('node', name)
            outer.calls.append(('create node', name))
            outer.nodes[name] = node(
                workers=hosts(body['acceleratorType']),
                accelerator=body['acceleratorType'])
          return self._send(200, {'name': 'operations/create-' + name,
                                  'done': True})
        if path == v2 + 'queuedResources':
          name = params['queuedResourceId']
          spec = body['tpu']['nodeSpec'][0]
          with outer.lock:
            if name in outer.queued:
              return self._conflict('queued resource', name)
            outer.calls.append(('create queued resource', name))
            outer.queued[name] = {
                'walk': list(outer.queued_walk), 'body': body,
                'workers': hosts(spec['node']['acceleratorType']),
                'accelerator': spec['node']['acceleratorType']}
          return self._send(200, {'name': 'operations/queue-' + name,
                                  'done': True})
        return self._send(404, {'error': {'code': 404, 'message': path}})

      def do_DELETE(self):  # pylint: disable=invalid-name
        path = self.path.split('?')[0]
        v2 = f'/v2/projects/{PROJECT}/locations/{ZONE}/'
        kind, _, name = path[len(v2):].partition('/')
        with outer.lock:
          table = {'nodes': outer.nodes, 'queuedResources': outer.queued}.get(
              kind, {})
          if name not in table:
            return self._not_found(kind, name)
          outer.calls.append((f'delete {kind}', name))
          del table[name]
          if kind == 'queuedResources':  # --force: its node goes too.
            outer.nodes.pop(name, None)
        return self._send(200, {'name': 'operations/delete-' + name,
                                'done': True})

    self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    self.host = f'127.0.0.1:{self.server.server_address[1]}'
    self.base_url = f'http://{self.host}/'
    threading.Thread(target=self.server.serve_forever, daemon=True).start()

  def preempt(self, name: str) -> None:
    """What Cloud TPU does to a spot node it takes back."""
    with self.lock:
      self.nodes[name] = dict(self.nodes[name], state='PREEMPTED')

  def vanish(self, name: str) -> None:
    """A node that is simply gone (a spot node deleted by Cloud TPU)."""
    with self.lock:
      self.nodes.pop(name, None)

  def environment(self) -> dict:
    """The variables that point TensorFlow's TPU client and oauth2client
    here (and nowhere else)."""
    return {
        'GCE_METADATA_HOST': self.host, 'GCE_METADATA_IP': self.host,
        'GCE_METADATA_ROOT': self.host,
        'TPU_API_DISCOVERY_URL': f'{self.base_url}discovery/tpu/v1',
        'GOOGLE_APPLICATION_CREDENTIALS': '',
    }

  def close(self):
    self.server.shutdown()
    self.server.server_close()
