"""The GKE route (`tools.launch --backend=gke`): a JobSet per run that runs
the experiment on every host of a TPU slice node pool.

Google now points new TPU generations at GKE. A TPU slice there is a node
pool whose nodes carry `cloud.google.com/gke-tpu-accelerator` and
`cloud.google.com/gke-tpu-topology` labels; a JobSet
(jobset.x-k8s.io/v1alpha2) of one Indexed Job with a pod per host, each
pod asking for its host's chips (`google.com/tpu`), fills it. Sources, read
2026-12-01: https://cloud.google.com/kubernetes-engine/docs/concepts/tpus
(accelerator labels and topologies), https://cloud.google.com/
kubernetes-engine/docs/how-to/tpus (a JobSet per slice, the
`alpha.jobset.sigs.k8s.io/exclusive-topology` annotation), and JobSet
v1alpha2 (kubernetes-sigs/jobset `hack/python-sdk/swagger.json`).

TensorFlow on GKE: a single-host slice trains under TPUStrategy with
`--tpu=local`; a multi-host slice has no Cloud TPU API node for TPUStrategy
to resolve, so only a mesh experiment (MESH_SHAPE: DTensor, one client a
host) runs there, its clients named by the JobSet's pod hostnames. A node is a
TPU VM of the slice (distribution/tpu_slices.py `hosts`): 4 chips on v4 and
v5p and on multi-host v5e and v6e pools (ct5lp-hightpu-4t, ct6e-standard-4t),
the whole slice on a single-host one. Never applied to a cluster (no GKE
here); the manifests are checked against the JobSet and Kubernetes schemas
in the tests.
"""

import math

from distribution import tpu_mesh
from distribution import tpu_slices

GKE_ACCELERATORS = {'v4': 'tpu-v4-podslice', 'v5e': 'tpu-v5-lite-podslice',
                    'v5p': 'tpu-v5p-slice', 'v6e': 'tpu-v6e-slice'}
EXCLUSIVE = 'alpha.jobset.sigs.k8s.io/exclusive-topology'
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def topology(tpu_slice: tpu_slices.Slice) -> str:
  """The node pool's chip topology GKE names for a slice (v4/v5p: AxBxC,
  v5e/v6e: AxB): the smallest axis doubled until the chips fit."""
  dims = [1, 1] if tpu_slice.generation.name in ('v5e', 'v6e') else [2, 2, 1]
  while math.prod(dims) < tpu_slice.chips:
    smallest = min(dims)
    i = len(dims) - 1 - dims[::-1].index(smallest)
    dims[i] *= 2
  if math.prod(dims) != tpu_slice.chips:
    raise ValueError(f'--accelerator={tpu_slice.accelerator}: GKE topologies '
                     'here are powers of two chips.')
  return 'x'.join(map(str, dims))


def check(tpu_slice: tpu_slices.Slice, mesh: bool) -> None:
  """Raises ValueError (one line) for a slice this route cannot run."""
  generation = tpu_slice.generation.name
  if generation not in GKE_ACCELERATORS:
    raise ValueError(f'--backend=gke: GKE runs TPU v4 and later '
                     f'({", ".join(GKE_ACCELERATORS)}), not '
                     f'{tpu_slice.accelerator}; use the TPU VM backend.')
  if tpu_slice.hosts > 1 and not mesh:
    raise ValueError(
        f'--backend=gke on {tpu_slice.accelerator} ({tpu_slice.hosts} hosts): '
        'TensorFlow drives a multi-host GKE slice only as a DTensor mesh '
        '(MESH_SHAPE); train data parallel on a single-host slice, or use '
        'the TPU VM backend.')


WORKDIR = '/suite'  # Where the image holds this checkout.


def jobset(*, name: str, tpu_slice: tpu_slices.Slice, image: str,
           command: list[str], mesh: bool) -> dict:
  """The JobSet that runs `command` (in WORKDIR of `image`, which holds
  this checkout with its TPU environment: tools/tpu_venv.py --python) once
  on every host of the slice."""
  check(tpu_slice, mesh)
  hosts = tpu_slice.hosts
  chips = tpu_slice.chips // hosts
  env = []
  if hosts > 1:  # DTensor clients: pod i of the Indexed Job is client i.
    jobs = ','.join(f'{name}-slice-0-{i}.{name}:{tpu_mesh.DTENSOR_PORT}'
                    for i in range(hosts))
    env = [{'name': 'DTENSOR_JOBS', 'value': jobs},
           {'name': 'DTENSOR_NUM_CLIENTS', 'value': str(hosts)},
           {'name': 'DTENSOR_JOB_NAME', 'value': 'worker'},
           {'name': 'DTENSOR_CLIENT_ID', 'valueFrom': {
               'fieldRef': {'fieldPath': COMPLETION_INDEX}}}]
  container = {
      'name': 'train', 'image': image, 'command': command,
      'workingDir': WORKDIR,
      'resources': {'limits': {'google.com/tpu': chips},
                    'requests': {'google.com/tpu': chips}},
      'ports': [{'containerPort': tpu_mesh.DTENSOR_PORT}],
  }
  if env:
    container['env'] = env
  return {
      'apiVersion': 'jobset.x-k8s.io/v1alpha2',
      'kind': 'JobSet',
      'metadata': {'name': name, 'annotations': {
          EXCLUSIVE: 'cloud.google.com/gke-nodepool'}},
      'spec': {
          'failurePolicy': {'maxRestarts': 0},
          'network': {'enableDNSHostnames': True},
          'replicatedJobs': [{
              'name': 'slice', 'replicas': 1,
              'template': {'spec': {
                  'parallelism': hosts, 'completions': hosts,
                  'completionMode': 'Indexed', 'backoffLimit': 0,
                  'template': {'spec': {
                      'restartPolicy': 'Never',
                      'nodeSelector': {
                          'cloud.google.com/gke-tpu-accelerator':
                              GKE_ACCELERATORS[tpu_slice.generation.name],
                          'cloud.google.com/gke-tpu-topology':
                              topology(tpu_slice)},
                      'containers': [container]}}}},
          }]},
  }
