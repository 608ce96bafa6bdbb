"""A local GCE metadata server and Cloud TPU API (v1, and v2's node lookup),
speaking their protocols.

TensorFlow's TPUClusterResolver resolves a TPU name through its bundled Cloud
TPU client: project and zone from the metadata server (GCE_METADATA_HOST),
an OAuth token from it through oauth2client (GCE_METADATA_IP,
GCE_METADATA_ROOT), the API's discovery document (TPU_API_DISCOVERY_URL,
here google-api-python-client's own copy of tpu.v1 pointed at this server)
and `GET v1/projects/P/locations/Z/nodes/N`. This server answers all of
them for the nodes it is given, and `GET v2/projects/P/locations/Z/nodes/N`
(the TPU VM API google-cloud-tpu's REST transport calls) as well.

  server = FakeCloudTpu(nodes={'my-pod': node(workers=4)})
  env = server.environment()   # for a child process: oauth2client reads
                               # its variables when imported
"""

import http.server
import json
import os
import threading

PROJECT, ZONE = 'test-project', 'us-central1-a'


def node(*, workers: int = 1, state: str = 'READY', health: str = 'HEALTHY',
         accelerator: str = 'v3-8') -> dict:
  """A Cloud TPU API v1 Node with `workers` network endpoints."""
  return {
      'state': state, 'health': health, 'acceleratorType': accelerator,
      'tensorflowVersion': 'tpu-vm-tf-2.20.0',
      'networkEndpoints': [{'ipAddress': f'10.0.0.{i + 2}', 'port': 8470}
                           for i in range(workers)],
  }


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

  def __init__(self, nodes: dict, accelerator_type: str = ''):
    """Args:
      nodes: TPU name -> node() dict.
      accelerator_type: this "VM"'s instance/attributes/accelerator-type
        ('' : not a TPU VM, 404).
    """
    self.nodes, self.requests = dict(nodes), []
    self.accelerator_type = accelerator_type
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
        v2 = f'/v2/projects/{PROJECT}/locations/{ZONE}/nodes/'
        if path.startswith(v2):  # TPU VMs' API, as google-cloud-tpu asks it.
          name = path[len(v2):]
          if name not in outer.nodes:
            return self._send(404, {'error': {
                'code': 404, 'status': 'NOT_FOUND',
                'message': f'node {name} not found'}})
          found = outer.nodes[name]
          return self._send(200, {
              'name': v2[1:] + name, 'state': found['state'],
              'acceleratorType': found['acceleratorType'],
              'health': found['health'],
              'networkEndpoints': found['networkEndpoints']})
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

    self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    self.host = f'127.0.0.1:{self.server.server_address[1]}'
    self.base_url = f'http://{self.host}/'
    threading.Thread(target=self.server.serve_forever, daemon=True).start()

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
