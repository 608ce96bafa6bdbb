"""The GKE route: JobSet manifests checked against JobSet v1alpha2's own
schema (kubernetes-sigs/jobset hack/python-sdk/swagger.json, vendored in
tests/data with its commit) and, for the Job, pod and object metadata they
hold, the Kubernetes 1.37 schemas of kubernetes-validate (strict: an
unknown field is an error); the node pool labels and topologies GKE names;
the slices this route refuses."""

import contextlib
import copy
import io
import json
import os

import jsonschema
import kubernetes_validate
import pytest

from distribution import tpu_slices
from tests import helpers
from tools import launch
from tools.launcher import gke

K8S = '1.37.0'
SWAGGER = os.path.join(helpers.ROOT, 'tests', 'data',
                       'jobset_v1alpha2_swagger.json')


def jobset_schema() -> dict:
  """JobSet v1alpha2 as a strict JSON schema: objects admit only their
  properties; the Kubernetes types it refers to are checked separately."""
  definitions = json.load(open(SWAGGER))['definitions']

  def strict(node):
    if isinstance(node, dict):
      if str(node.get('$ref', '')).startswith('http'):
        return {}  # A Kubernetes type: kubernetes-validate checks it.
      out = {k: strict(v) for k, v in node.items()
             if not k.startswith('x-kubernetes')}
      if 'properties' in out:
        out.setdefault('additionalProperties', False)
      return out
    if isinstance(node, list):
      return [strict(v) for v in node]
    return node

  return {'definitions': strict(definitions),
          '$ref': '#/definitions/jobset.v1alpha2.JobSet'}


def validate(manifest: dict) -> None:
  jsonschema.Draft4Validator(jobset_schema()).validate(manifest)
  kubernetes_validate.validate(
      {'apiVersion': 'v1', 'kind': 'ConfigMap',
       'metadata': manifest['metadata']}, K8S, strict=True)
  for replicated in manifest['spec']['replicatedJobs']:
    kubernetes_validate.validate(
        {'apiVersion': 'batch/v1', 'kind': 'Job',
         'metadata': {'name': replicated['name']},
         'spec': replicated['template']['spec']}, K8S, strict=True)


def manifest(accelerator, mesh=False):
  return gke.jobset(name='bert-run-0',
                    tpu_slice=tpu_slices.parse(accelerator),
                    image='us-docker.pkg.dev/p/r/suite:1',
                    command=['python', 'train.py', '--tpu=local'], mesh=mesh)


@pytest.mark.parametrize('accelerator,label,topology,hosts,chips', [
    ('v4-8', 'tpu-v4-podslice', '2x2x1', 1, 4),
    ('v5litepod-8', 'tpu-v5-lite-podslice', '2x4', 1, 8),
    ('v5litepod-4', 'tpu-v5-lite-podslice', '2x2', 1, 4),
    ('v5p-8', 'tpu-v5p-slice', '2x2x1', 1, 4),
    ('v6e-8', 'tpu-v6e-slice', '2x4', 1, 8),
])
def test_single_host_jobsets_fit_the_schemas(accelerator, label, topology,
                                             hosts, chips):
  m = manifest(accelerator)
  validate(m)
  job = m['spec']['replicatedJobs'][0]['template']['spec']
  pod = job['template']['spec']
  assert pod['nodeSelector'] == {
      'cloud.google.com/gke-tpu-accelerator': label,
      'cloud.google.com/gke-tpu-topology': topology}
  assert (job['parallelism'], job['completions']) == (hosts, hosts)
  assert pod['containers'][0]['resources']['limits'] == {
      'google.com/tpu': chips}
  assert 'env' not in pod['containers'][0]


def test_a_mesh_on_a_multi_host_slice_names_its_dtensor_clients():
  m = manifest('v4-32', mesh=True)
  validate(m)
  pod = m['spec']['replicatedJobs'][0]['template']['spec']['template']
  env = {e['name']: e for e in pod['spec']['containers'][0]['env']}
  assert env['DTENSOR_JOBS']['value'] == ','.join(
      f'bert-run-0-slice-0-{i}.bert-run-0:9991' for i in range(4))
  assert env['DTENSOR_NUM_CLIENTS']['value'] == '4'
  assert 'job-completion-index' in (
      env['DTENSOR_CLIENT_ID']['valueFrom']['fieldRef']['fieldPath'])
  assert m['spec']['network'] == {'enableDNSHostnames': True}


@pytest.mark.parametrize('accelerator,label,topology', [
    ('v5litepod-16', 'tpu-v5-lite-podslice', '4x4'),
    ('v6e-16', 'tpu-v6e-slice', '4x4'),
])
def test_a_multi_host_v5e_or_v6e_mesh_has_a_pod_per_4_chip_vm(
    accelerator, label, topology):
  """Multi-host v5e and v6e node pools are 4-chip VMs (ct5lp-hightpu-4t,
  ct6e-standard-4t): v5litepod-16 is 4 pods of 4 chips."""
  m = manifest(accelerator, mesh=True)
  validate(m)
  job = m['spec']['replicatedJobs'][0]['template']['spec']
  pod = job['template']['spec']
  assert pod['nodeSelector']['cloud.google.com/gke-tpu-accelerator'] == label
  assert pod['nodeSelector']['cloud.google.com/gke-tpu-topology'] == topology
  assert (job['parallelism'], job['completions']) == (4, 4)
  assert pod['containers'][0]['resources']['limits'] == {'google.com/tpu': 4}


def test_the_schemas_catch_a_wrong_manifest():
  """The check can fail: a misspelt JobSet field, a Job field Kubernetes
  does not have."""
  bad = copy.deepcopy(manifest('v4-8'))
  bad['spec']['replicatedJob'] = bad['spec'].pop('replicatedJobs')
  with pytest.raises(jsonschema.ValidationError, match='replicatedJob'):
    jsonschema.Draft4Validator(jobset_schema()).validate(bad)
  bad = copy.deepcopy(manifest('v4-8'))
  bad['spec']['replicatedJobs'][0]['template']['spec']['paralelism'] = 1
  with pytest.raises(kubernetes_validate.ValidationError):
    validate(bad)


@pytest.mark.parametrize('accelerator,mesh,message', [
    ('v3-8', False, 'GKE runs TPU v4 and later'),
    ('v4-32', False, 'only as a DTensor mesh'),
    ('v5litepod-16', False, 'only as a DTensor mesh'),
])
def test_slices_this_route_cannot_run_are_refused(accelerator, mesh,
                                                  message):
  with pytest.raises(ValueError, match=message):
    gke.check(tpu_slices.parse(accelerator), mesh)


def test_launch_writes_one_jobset_a_run(tmp_path):
  from absl import flags
  values = flags.FlagValues()
  launch.define_flags(values)
  values(['launch', '--backend=gke', '--gin_file=gin/bert_v3_32.gin',
          "--gin_param=ACCELERATOR='v5litepod-8'", '--tpu=bert',
          '--accelerator=v5litepod-8', '--model_dir=gs://b/bert', '--runs=2',
          "--gin_param=DATA_DIR='gs://b/data'",
          "--gin_param=INIT_CHECKPOINT='gs://b/ckpt'",
          '--image=us-docker.pkg.dev/p/r/suite:1',
          f'--manifest_dir={tmp_path}', f'--package={tmp_path}/package'])
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    assert launch.main([], values) == 0
  assert sorted(os.listdir(tmp_path)) == ['bert-run-0.json',
                                          'bert-run-1.json']
  m = json.load(open(tmp_path / 'bert-run-1.json'))
  validate(m)
  command = m['spec']['replicatedJobs'][0]['template']['spec']['template'][
      'spec']['containers'][0]['command']
  assert command == [
      'python', 'train.py', '--gin_file=gin/bert_v3_32.gin',
      "--gin_param=ACCELERATOR='v5litepod-8'",
      "--gin_param=DATA_DIR='gs://b/data'",
      "--gin_param=INIT_CHECKPOINT='gs://b/ckpt'", '--gin.SEED=1',
      '--tpu=local', '--model_dir=gs://b/bert/run_1']
  assert (f'kubectl apply -f {tmp_path}/bert-run-1.json' in
          out.getvalue())
  # After the JobSets, the package of their runs (tools.package).
  assert out.getvalue().splitlines()[-1] == (
      'python -m tools.package training gs://b/bert/run_0 gs://b/bert/run_1 '
      f'--output={tmp_path}/package --system=tpu-v5litepod-8')
