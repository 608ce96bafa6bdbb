"""The GCS emulator answers as GCS documents where the suite's faults lead
TensorFlow (https://cloud.google.com/storage/docs/performing-resumable-uploads,
read 2026-12-04): a resumable upload's status query is 308 with a Range
header only when bytes were persisted, and an upload resumes from it."""

import http.client
import json

import pytest

from tools import gcs_emulator


@pytest.fixture
def emulator():
  server, port = gcs_emulator.start_emulator('test')
  yield port
  server.stop()


def start_upload(port, name):
  c = http.client.HTTPConnection('127.0.0.1', port, timeout=30)
  c.request('POST', f'/upload/storage/v1/b/test/o?uploadType=resumable&'
            f'name={name}', body=json.dumps({}),
            headers={'Content-Type': 'application/json'})
  r = c.getresponse()
  r.read()
  assert r.status == 200
  return c, r.getheader('Location').split(f':{port}', 1)[1]


def put(c, path, body, content_range):
  c.request('PUT', path, body=body, headers={'Content-Range': content_range})
  r = c.getresponse()
  return r.status, r.getheader('Range'), r.read()


def test_a_status_query_before_any_byte_has_no_range_and_resumes_at_0(
    emulator):
  c, path = start_upload(emulator, 'fresh')
  # A chunk lost before it arrived (a 503 from a proxy, a reset): TensorFlow
  # asks where to resume. No Range header: nothing persisted.
  assert put(c, path, b'', 'bytes */10')[:2] == (308, None)
  status, _, body = put(c, path, b'abcdefghij', 'bytes 0-9/10')
  assert status == 200 and json.loads(body)['size'] == '10'


def test_an_interrupted_upload_resumes_from_the_persisted_range(emulator):
  c, path = start_upload(emulator, 'half')
  assert put(c, path, b'abcd', 'bytes 0-3/10')[:2] == (308, 'bytes=0-3')
  assert put(c, path, b'', 'bytes */10')[:2] == (308, 'bytes=0-3')
  status, _, body = put(c, path, b'efghij', 'bytes 4-9/10')
  assert status == 200 and json.loads(body)['size'] == '10'
  c.request('GET', '/storage/v1/b/test/o/half?alt=media')
  assert c.getresponse().read() == b'abcdefghij'


def _faults(tmp_path, rules):
  path = tmp_path / 'faults.json'
  path.write_text(json.dumps(rules))
  return gcs_emulator.Faults(str(path)), path


def test_an_outage_rule_fails_every_request_for_its_window(tmp_path):
  faults, path = _faults(tmp_path, [
      {'path': 'ckpt-6', 'status': 503, 'outage_seconds': 3600, 'times': 1}])
  assert faults.match('GET', '/b/test/o/data') is None
  assert faults.match('POST', '/upload/b/test/o?name=run/ckpt-6.index')
  # Every later request, of any path, until the window ends.
  assert faults.match('GET', '/b/test/o/data') == {'status': 503}
  assert faults.match('DELETE', '/b/test/o/x') == {'status': 503}
  faults._outage = (0, 503, '*')  # The window has passed.
  assert faults.match('GET', '/b/test/o/data') is None
  log = [json.loads(l) for l in open(str(path) + '.log')]
  assert [entry['action'] for entry in log][1:] == ['outage 503'] * 2
  # An outage of writes only: reads go through.
  path.write_text(json.dumps([{'method': ['POST', 'PUT'], 'status': 503,
                               'outage_seconds': 3600}]))
  assert faults.match('PUT', '/upload/x')['outage_seconds'] == 3600
  assert faults.match('GET', '/b/test/o/data') is None
  assert faults.match('POST', '/upload/y') == {'status': 503}


def test_a_rate_rule_takes_its_share_of_requests_repeatably(tmp_path):
  rules = [{'method': 'PUT', 'status': 503, 'rate': 0.2}]
  taken = []
  for _ in range(2):
    faults, _ = _faults(tmp_path, rules)
    taken.append([bool(faults.match('PUT', f'/o/{i}')) for i in range(500)])
  assert taken[0] == taken[1]  # Seeded per rule: a run repeats.
  assert 70 <= sum(taken[0]) <= 130
  assert faults.match('GET', '/o/1') is None  # Another method.
