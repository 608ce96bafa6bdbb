"""A DTensor mesh over a TPU slice (MESH_SHAPE with a TPU hardware file).

DTensor drives a TPU slice with one client per host: every host of the
slice runs train.py with `--tpu=local` (tools.launch starts them all for a
mesh experiment), and the clients find each other from the TPU VM's
metadata: `instance/attributes/worker-network-endpoints` lists the hosts
(entries `ID:NAME:IP`, the form JAX's Cloud TPU cluster reads) and
`instance/attributes/agent-worker-number` is this host's index. On a
single-host slice there is one client and no environment to set.

The mesh itself is DTensor's `create_tpu_mesh`, which orders the cores so
that the trailing (model) axis forms all-reduce rings of neighbouring cores
in the physical torus: a model group of 4 on a v3 slice is the 2 cores of 2
adjacent chips, as Google's 4-way model-parallel Transformer placed its
partitions. `core_order` runs the same enumeration on a topology shape, so
the order can be checked without a TPU.

Never run on a TPU (this project has none): the metadata-derived
environment and the core order are tested on CPU; initialising the TPU and
`create_tpu_mesh` are not.
"""

import os

import numpy as np

from distribution.gce_metadata import metadata
from distribution import tpu as tpu_lib

DTENSOR_PORT = 9991  # Each host's DTensor client port.


def dtensor_environment(*, timeout: float = 2.0) -> dict[str, str]:
  """The DTENSOR_* variables that join this slice's hosts into one DTensor
  job, from the TPU VM metadata ({} on a single-host slice).

  Raises:
    TpuUnavailable: the metadata server does not say which hosts the slice
      has (not a TPU VM).
  """
  endpoints = metadata(
      'instance/attributes/worker-network-endpoints', timeout)
  number = metadata('instance/attributes/agent-worker-number',
                            timeout)
  if not endpoints or number is None:
    raise tpu_lib.TpuUnavailable(
        'MESH_SHAPE on a TPU: the metadata server does not list this '
        "slice's hosts (instance/attributes/worker-network-endpoints): run "
        'on the TPU VMs of the slice.')
  hosts = [entry.split(':')[2] for entry in endpoints.split(',')]
  if len(hosts) == 1:
    return {}
  return {'DTENSOR_JOBS': ','.join(f'{ip}:{DTENSOR_PORT}' for ip in hosts),
          'DTENSOR_CLIENT_ID': str(int(number)),
          'DTENSOR_NUM_CLIENTS': str(len(hosts)),
          'DTENSOR_JOB_NAME': 'worker'}


def core_order(topology_shape, mesh_shape) -> list[list[int]]:
  """The [x, y, z, core] of each mesh device, in the order create_tpu_mesh
  gives them (row-major over mesh_shape), for a slice whose topology is
  `topology_shape` ([x, y, z, cores per chip])."""
  # tensorflow.dtensor.python.tpu_util keeps these steps private; they are
  # the exact enumeration create_tpu_mesh runs with its default arguments
  # (rings over all but the first mesh axis, axes in core, x, y, z order).
  from tensorflow.dtensor.python import tpu_util  # pylint: disable=g-direct-tensorflow-import
  ring_size = int(np.prod(mesh_shape[1:]))
  cores = tpu_util._enumerate_core_locations(  # pylint: disable=protected-access
      list(topology_shape), list(topology_shape), ['core', 'x', 'y', 'z'],
      True, ring_size)
  if len(cores) != int(np.prod(mesh_shape)):
    raise ValueError(f'MESH_SHAPE {tuple(mesh_shape)} has '
                     f'{int(np.prod(mesh_shape))} devices; the TPU has '
                     f'{len(cores)} cores.')
  permutation = tpu_util._build_all_reduce_ring(cores[:ring_size])  # pylint: disable=protected-access
  for r in range(0, len(cores), ring_size):
    cores[r:r + ring_size] = [cores[r + permutation[i]]
                              for i in range(ring_size)]
  return [c.to_list() for c in cores]


def make_mesh(shape: tuple[int, ...], names: tuple[str, ...], tpu: str):
  """Initialises the TPU for DTensor and returns the mesh over all of its
  cores.

  Raises:
    ValueError: --tpu other than 'local', or a mesh that does not use every
      core.
    TpuUnavailable: no TPU here, or it did not initialise.
  """
  from tensorflow.experimental import dtensor
  if tpu != 'local':
    raise ValueError(
        f'MESH_SHAPE on a TPU runs one DTensor client on each host of the '
        f'slice, each with --tpu=local (tools.launch starts them on every '
        f'worker), not --tpu={tpu}.')
  problem = tpu_lib.local_tpu_problem()
  if problem:
    raise tpu_lib.TpuUnavailable(problem)
  if 'DTENSOR_JOBS' not in os.environ:  # Set already on GKE (tools/launcher/gke.py).
    os.environ.update(dtensor_environment())
  try:
    dtensor.initialize_accelerator_system('TPU')
  except (ValueError, RuntimeError) as e:
    raise tpu_lib.TpuUnavailable(
        f'MESH_SHAPE {shape}: DTensor could not initialise the TPU '
        f'({(str(e).strip().splitlines() or [type(e).__name__])[0]}).'
    ) from e
  try:
    return dtensor.create_tpu_mesh(list(names), list(shape), 'mesh')
  except ValueError as e:
    raise ValueError(f'MESH_SHAPE {shape}: {str(e).splitlines()[0]}') from e
