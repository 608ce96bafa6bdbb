"""A mesh over a TPU slice, as far as it runs without a TPU: the DTensor
clients from the TPU VM metadata (a local metadata server), the order of
the cores on the slice's torus (DTensor's own enumeration on v3, v4 and
v5e topologies), and a mesh run that finds no TPU stopping in one line."""

import numpy as np
import pytest

from distribution import tpu as tpu_lib
from distribution import tpu_mesh
from tests import fake_cloud_tpu
from tests import helpers


def environment_of(attributes, monkeypatch):
  server = fake_cloud_tpu.FakeCloudTpu(nodes={}, accelerator_type='v3-32',
                                       attributes=attributes)
  try:
    monkeypatch.setenv('GCE_METADATA_HOST', server.host)
    return tpu_mesh.dtensor_environment(timeout=5)
  finally:
    server.close()


def test_the_hosts_of_a_slice_become_dtensor_clients(monkeypatch):
  endpoints = ','.join(f'{i}:t1v-n-abc-w-{i}:10.0.0.{i + 2}' for i in range(4))
  env = environment_of({'worker-network-endpoints': endpoints,
                        'agent-worker-number': '2'}, monkeypatch)
  assert env == {
      'DTENSOR_JOBS': '10.0.0.2:9991,10.0.0.3:9991,10.0.0.4:9991,'
                      '10.0.0.5:9991',
      'DTENSOR_CLIENT_ID': '2', 'DTENSOR_NUM_CLIENTS': '4',
      'DTENSOR_JOB_NAME': 'worker'}
  assert environment_of({'worker-network-endpoints': '0:w-0:10.0.0.2',
                         'agent-worker-number': '0'}, monkeypatch) == {}
  with pytest.raises(tpu_lib.TpuUnavailable, match="does not list this "
                     "slice's hosts"):
    environment_of({}, monkeypatch)


def torus_distance(a, b, shape):
  return sum(min(abs(x - y), n - abs(x - y)) for x, y, n in zip(a, b, shape))


@pytest.mark.parametrize('accelerator,topology,mesh', [
    ('v3-32', (4, 4, 1, 2), (8, 4)),    # Google's 4-way model split.
    ('v3-32', (4, 4, 1, 2), (16, 2)),
    ('v4-32', (2, 2, 4, 1), (4, 4)),
    ('v5litepod-8', (2, 4, 1, 1), (2, 4)),
])
def test_model_groups_are_rings_of_neighbouring_cores(accelerator, topology,
                                                      mesh):
  from distribution import tpu_slices
  assert np.prod(mesh) == tpu_slices.parse(accelerator).replicas
  order = tpu_mesh.core_order(topology, mesh)
  assert sorted(map(tuple, order)) == sorted(
      (x, y, z, c) for x in range(topology[0]) for y in range(topology[1])
      for z in range(topology[2]) for c in range(topology[3]))
  size = mesh[-1]
  for g in range(0, len(order), size):
    ring = order[g:g + size]
    for a, b in zip(ring, ring[1:] + ring[:1]):
      # Consecutive members: two cores of one chip, or neighbouring chips.
      assert torus_distance(a[:3], b[:3], topology[:3]) <= 1, ring
  with pytest.raises(ValueError, match='has 16 devices; the TPU has 32'):
    tpu_mesh.core_order((4, 4, 1, 2), (4, 4))


def test_a_mesh_on_a_tpu_that_is_not_there_stops_in_one_line(monkeypatch):
  """Before DTensor touches the TPU system: what train.py turns into one
  `error:` line and exit 4 (tests/distribution/test_tpu.py runs that)."""
  from distribution import mesh
  monkeypatch.setenv('GCE_METADATA_HOST', f'127.0.0.1:{helpers.free_port()}')
  with pytest.raises(tpu_lib.TpuUnavailable,
                     match='--tpu=local: no TPU on this machine'):
    mesh.MeshConfig(shape=(2, 2)).make(tpu='local')
  with pytest.raises(ValueError, match='not --tpu=my-pod'):
    mesh.MeshConfig(shape=(2, 2)).make(tpu='my-pod')
