"""A TPU job as the launcher plans it: what to launch (Job) and the commands
each step runs (gcloud, the job runner on worker 0, scoring), the package it
copies, and a GKE run's JobSet manifests. tools/launch.py builds a Job from
its flags and prints these commands; tools/launcher/execute.py runs them.
"""

import dataclasses
import io
import json
import os
import shlex
import subprocess
import tarfile

from core import source as source_lib
from core import startup
from distribution import tpu_slices
from tools.launcher import gke

LAUNCH_GIN = 'launch.gin'  # The job's --gin_param bindings, in the package.


@dataclasses.dataclass(frozen=True)
class Job:
  """What to launch (the command line's flags)."""
  tpu: str
  zone: str
  project: str
  slice: tpu_slices.Slice
  runtime: str
  gin_files: tuple
  gin_params: tuple
  model_dir: str
  runs: int
  benchmark: str
  system: str
  results_dir: str = 'results'
  queued: bool = False
  tier: str = 'on-demand'
  valid_until: str = ''
  timed: bool = True
  keep: bool = False
  max_hours: float = 0.0
  python: str = '.venv/bin/python'
  install: bool = True
  mesh: bool = False
  suite_dir: str = 'suite'
  package: str = ''  # tools.package --output: a folder or gs://...tar.gz.
  system_desc: str = ''  # tools.package --system_desc.

  @property
  def accelerator(self) -> str:
    return self.slice.accelerator

  @property
  def multi_host(self) -> bool:
    return self.slice.hosts > 1

  @property
  def every_host(self) -> bool:
    """A mesh on a multi-host slice: one DTensor client on every host."""
    return self.mesh and self.multi_host

  def gcloud(self, *args: str, alpha: bool = False) -> list[str]:
    return ['gcloud', *(['alpha'] if alpha else []), 'compute', 'tpus',
            *args, f'--zone={self.zone}', f'--project={self.project}']

  def run_dir(self, index: int, retry: int = 0) -> str:
    suffix = f'_retry{retry}' if retry else ''
    return f'{self.model_dir.rstrip("/")}/run_{index}{suffix}'

  def job_dir(self, index: int, retry: int = 0) -> str:
    return f'{self.run_dir(index, retry)}/job'

  def result_dir(self) -> str:
    return f'{self.results_dir}/{self.system}/{self.benchmark}'


# -- The commands -------------------------------------------------------------


def describe(job: Job) -> list[str]:
  if job.queued:
    return job.gcloud('queued-resources', 'describe', job.tpu,
                      '--format=value(state.state)')
  return job.gcloud('tpu-vm', 'describe', job.tpu, '--format=value(state)')


def create(job: Job) -> list[str]:
  tier = {'spot': ['--spot'], 'reserved': ['--reserved'],
          'guaranteed': ['--guaranteed'],
          'best-effort': ['--best-effort']}.get(job.tier, [])
  if job.queued:
    until = ([f'--valid-until-duration={job.valid_until}']
             if job.valid_until else [])
    return job.gcloud('queued-resources', 'create', job.tpu,
                      f'--node-id={job.tpu}',
                      f'--accelerator-type={job.accelerator}',
                      f'--runtime-version={job.runtime}', *tier, *until,
                      alpha=job.tier == 'best-effort')
  return job.gcloud('tpu-vm', 'create', job.tpu,
                    f'--accelerator-type={job.accelerator}',
                    f'--version={job.runtime}', *tier)


def delete(job: Job) -> list[str]:
  if job.queued:  # --force deletes its node too.
    return job.gcloud('queued-resources', 'delete', job.tpu, '--force',
                      '--quiet')
  return job.gcloud('tpu-vm', 'delete', job.tpu, '--quiet')


def on_workers(job: Job, command: str, worker: str) -> list[str]:
  return job.gcloud('tpu-vm', 'ssh', job.tpu, f'--worker={worker}',
                    f'--command={command}')


# The TPU runtime service of a multi-host slice's workers runs Google's gRPC
# TPU worker in a container; it must be the TensorFlow the client runs.
# Google's TF tests set it so on every worker of a PJRT pod (set_up_pjrt in
# tpu_slices.GOOGLE_TF_TESTS: this file, this sed, this restart); the image
# tag follows their `tf-X.Y.Z-pjrt` naming.
RUNTIME_SERVICE = '/etc/systemd/system/tpu-runtime.service'
GRPC_TPU_WORKER = 'gcr.io/cloud-tpu-v2-images/grpc_tpu_worker'


def runtime_service_command(tf_version: str) -> str:
  image = f'{GRPC_TPU_WORKER}:tf-{tf_version}-pjrt'
  return (f"sudo sed -i 's#TF_DOCKER_URL=.*#TF_DOCKER_URL={image}\"#' "
          f'{RUNTIME_SERVICE} && sudo systemctl daemon-reload && '
          'sudo systemctl restart tpu-runtime')


def install(job: Job, tarball: str) -> list[list[str]]:
  """Copy the checkout to every worker, unpack it and build its TPU
  environment there (tools/tpu_venv.py, as `make tpu_venv` builds it here);
  on a multi-host slice driven by name, set the workers' TPU runtime to
  that TensorFlow."""
  d = job.suite_dir
  unpack = f'rm -rf {d} && mkdir {d} && tar xzf {d}.tar.gz -C {d}'
  if job.install:
    unpack += f' && python3 {d}/tools/tpu_venv.py --venv={d}/.venv'
    if job.multi_host and not job.mesh:
      unpack += ' && ' + runtime_service_command(tpu_slices.TENSORFLOW_TPU)
  return [job.gcloud('tpu-vm', 'scp', tarball, f'{job.tpu}:{d}.tar.gz',
                     '--worker=all'),
          on_workers(job, unpack, 'all')]


def environment_line(job: Job) -> str:
  """What the workers' environment is, as the dry run prints it."""
  tf = (f'tensorflow-tpu {tpu_slices.TENSORFLOW_TPU} with its libtpu '
        '(tools/tpu_venv.py, requirements-tpu.txt)' if job.install else
        'the image\'s own TensorFlow (--noinstall)')
  if job.multi_host and not job.mesh:
    run = (f'worker 0 drives the slice by name: TPU_NAME={job.tpu} '
           'TPU_LOAD_LIBRARY=0' + (
               f'; every worker\'s tpu-runtime runs {GRPC_TPU_WORKER}:tf-'
               f'{tpu_slices.TENSORFLOW_TPU}-pjrt' if job.install else ''))
  else:
    values = dict(zip(startup.PJRT_VARIABLES,
                      ('true', '<the venv\'s libtpu/libtpu.so>')))
    run = ('each host drives its own TPU through PJRT: ' +
           ' '.join(f'{k}={v}' for k, v in values.items()) +
           ' (train.py sets them on a TPU VM: core/startup.py)')
  return (f'# image {job.runtime}, {tf}; {run} (as Google\'s TF tests: '
          f'{tpu_slices.GOOGLE_TF_TESTS}).')


def train_command(job: Job, index: int, retry: int = 0) -> list[str]:
  """train.py for run `index` (seed = index), as worker 0 runs it."""
  # Bindings travel in launch.gin: no quotes inside the ssh command.
  return [job.python, 'train.py',
          *(f'--gin_file={f}' for f in job.gin_files),
          *([f'--gin_file={LAUNCH_GIN}'] if job.gin_params else []),
          f'--gin.SEED={index}',
          f'--tpu={job.tpu if job.multi_host and not job.mesh else "local"}',
          f'--model_dir={job.run_dir(index, retry)}']


def start(job: Job, index: int, retry: int = 0,
          attempt: str = 'ATTEMPT') -> list[str]:
  """Starts run `index` on worker 0 (a mesh on a multi-host slice: on
  every worker, worker k's status in job/worker_k), detached from the ssh
  session; `attempt` tells its status from an earlier attempt's in the same
  folder."""
  env = (f'TPU_NAME={job.tpu} TPU_LOAD_LIBRARY=0 '
         if job.multi_host and not job.mesh else '')
  runner = [job.python, '-m', 'tools.launcher.job_runner',
            f'--job_dir={job.job_dir(index, retry)}', f'--attempt={attempt}',
            *(['--per_worker'] if job.every_host else []), '--']
  command = (f'cd {job.suite_dir} && {env}nohup setsid '
             f'{shlex.join(runner + train_command(job, index, retry))} '
             '</dev/null >/dev/null 2>&1 &')
  return on_workers(job, command, 'all' if job.every_host else '0')


def collect(job: Job, index: int, retry: int = 0) -> list[str]:
  return ['gcloud', 'storage', 'cp', f'{job.run_dir(index, retry)}/mlperf.log',
          f'{job.result_dir()}/result_{index}.txt']


def score(job: Job) -> list[str]:
  return ['python', '-m', 'tools.score', job.result_dir()]


def package_command(job: Job, run_dirs: list[str]) -> list[str]:
  """tools.package over the runs that were scored (docs/submitting.md)."""
  return ['python', '-m', 'tools.package', 'training', *run_dirs,
          f'--output={job.package}', f'--system={job.system}',
          *([f'--system_desc={job.system_desc}'] if job.system_desc else [])]


def plan(job: Job, tarball: str) -> list[tuple[str, list[str]]]:
  """The commands of a job whose runs all succeed: (what, argv) pairs."""
  steps = [('reuse the TPU if it is there', describe(job)),
           ('else create it' + (' (then wait for ACTIVE)' if job.queued
                                else ''), create(job))]
  steps += list(zip(('copy the package to every worker',
                     'unpack (and install) it on every worker'),
                    install(job, tarball)))
  for i in range(job.runs):
    steps.append((f'start run {i} (seed {i}), detached; its log and status: '
                  f'{job.job_dir(i)}/', start(job, i)))
    steps.append((f'collect run {i}', collect(job, i)))
  steps.append(('check and score', score(job)))
  if job.package:
    steps.append(('write the submission package, checked by MLCommons\' '
                  'package checker', package_command(
                      job, [job.run_dir(i) for i in range(job.runs)])))
  steps.append(('delete the TPU' + (' (skipped: --keep)' if job.keep else ''),
                delete(job)))
  return steps


def cost_line(job: Job) -> str:
  s = job.slice
  rate = s.usd_per_hour()
  cap = (f'; --max_hours={job.max_hours:g} caps it at '
         f'{s.chips * job.max_hours:,.0f} chip-hours, about '
         f'${rate * job.max_hours:,.0f}' if job.max_hours else
         '; no --max_hours cap')
  return (f'{s.accelerator}: {s.chips} chips on {s.hosts} host'
          f'{"s" if s.hosts > 1 else ""}, {s.replicas} replicas, tier '
          f'{job.tier}; {s.chips} chip-hours an hour, about ${rate:,.2f} an '
          f'hour at the on-demand list price (spot and reserved cost less; '
          f'{tpu_slices.PRICES_PAGE}, read {tpu_slices.SOURCE_DATE}){cap}.')


def package(job: Job, tarball: str) -> None:
  """This checkout's HEAD (git archive) plus launch.gin and COMMIT (HEAD's
  hash: the copy has no .git, and its runs record which code they ran,
  core/source.py), as a .tar.gz."""
  tree = subprocess.run(['git', 'archive', '--format=tar', 'HEAD'],
                        check=True, capture_output=True).stdout
  head = subprocess.run(['git', 'rev-parse', 'HEAD'], check=True,
                        capture_output=True, text=True).stdout
  with tarfile.open(fileobj=io.BytesIO(tree)) as source, \
      tarfile.open(tarball, 'w:gz') as out:
    for member in source.getmembers():
      out.addfile(member, source.extractfile(member) if member.isfile()
                  else None)
    for name, text in ((LAUNCH_GIN, launch_gin(job)),
                       (source_lib.COMMIT_FILE, head)):
      data = text.encode()
      info = tarfile.TarInfo(name)
      info.size = len(data)
      out.addfile(info, io.BytesIO(data))


def launch_gin(job: Job) -> str:
  return ''.join(f'{p}\n' for p in job.gin_params)


def gke_train_command(job: Job, index: int) -> list[str]:
  """train.py for run `index` in a GKE pod: bindings as arguments (no
  shell in between), --tpu=local on every host."""
  return ['python', 'train.py', *(f'--gin_file={g}' for g in job.gin_files),
          *(f'--gin_param={p}' for p in job.gin_params),
          f'--gin.SEED={index}', '--tpu=local',
          f'--model_dir={job.run_dir(index)}']


def write_gke_manifests(job: Job, image: str, folder: str) -> list[str]:
  """One JobSet a run, as JSON (kubectl takes it as YAML); their paths."""
  os.makedirs(folder, exist_ok=True)
  paths = []
  for i in range(job.runs):
    name = f'{job.tpu}-run-{i}'
    manifest = gke.jobset(name=name, tpu_slice=job.slice, image=image,
                          command=gke_train_command(job, i), mesh=job.mesh)
    path = os.path.join(folder, f'{name}.json')
    with open(path, 'w') as out:
      json.dump(manifest, out, indent=2)
      out.write('\n')
    paths.append(path)
  return paths
