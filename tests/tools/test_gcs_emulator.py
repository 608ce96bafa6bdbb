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
