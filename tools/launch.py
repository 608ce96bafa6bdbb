"""Batch jobs on Cloud TPU VMs: print (default) or run the gcloud commands.

  python -m tools.launch --gin_file=gin/bert_v3_32.gin --tpu=my-slice \\
      --zone=europe-west4-a --project=my-proj --accelerator=v3-32 \\
      --model_dir=gs://bucket/bert --runs=10 \\
      --gin_param="DATA_DIR='gs://bucket/bert_data'" [--execute]

Before anything is created: the slice type is checked against its
generation's public types, the zones that offer it and the experiment's
hardware file (its ACCELERATOR), the TPU VM image against Google's naming and
the TensorFlow the run uses (distribution/tpu_slices.py holds the tables,
with their sources), and, with --execute or --preflight, the bucket, data and
checkpoint (tools/preflight.py). The plan
then, in order:
1. the TPU: reused if READY (or its queued resource ACTIVE); a stale queued
   resource (FAILED, SUSPENDED, or ACTIVE with its node gone) or a lost node
   (PREEMPTED, TERMINATED) deleted first; created (`tpu-vm create`, or with
   --queued a queued resource, waited for through ACCEPTED,
   WAITING_FOR_RESOURCES, PROVISIONING to ACTIVE with a progress line;
   FAILED or SUSPENDED stop the launch with the reason `describe` gives);
2. this checkout (`git archive HEAD` plus the --gin_param bindings as
   launch.gin) copied to every worker and its TPU environment built there
   (tools/tpu_venv.py; on a multi-host slice driven by name, each worker's
   TPU runtime set to that TensorFlow, as Google's TF tests do);
3. each run started on worker 0 detached from the ssh session
   (tools/job_runner.py under nohup/setsid), writing its output and status
   to `<model_dir>/run_<i>/job/`; the launcher polls them and the node's
   state and prints the log's new lines. A restarted --execute picks up
   where the job is: finished runs are kept, a running one is waited for;
4. after each run its exit code (core/exit_codes.py) decides: 0 or 1
   is a result (collected as results/<system>/<benchmark>/result_<i>.txt);
   75 or a lost node (PREEMPTED, TERMINATED, vanished: recreated first)
   reruns it, a timed run from scratch into `run_<i>_retry<k>` (MLPerf does
   not allow resuming a timed run), an untimed one (--notimed) in place; 2
   (bad input), 3 (crash) and 4 (no TPU, node healthy) stop the launch;
5. the results checked and scored (tools/score.py);
6. the TPU (and its queued resource) deleted, after success, failure or
   Ctrl-C, unless --keep (then a restarted --execute reattaches).
--max_hours stops everything (and deletes the TPU) after that much time.
"""

import dataclasses
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile

from absl import app
from absl import flags

from core import config as gin_config
from core import entry_point
from core import exit_codes
from core import startup
from distribution import tpu_slices
from tools import gcloud as gcloud_lib
from tools import gke

FLAGS = flags.FLAGS
TIERS = ('on-demand', 'spot', 'reserved', 'guaranteed', 'best-effort')
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
  runner = [job.python, '-m', 'tools.job_runner',
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
  """This checkout's HEAD (git archive) plus launch.gin, as a .tar.gz."""
  tree = subprocess.run(['git', 'archive', '--format=tar', 'HEAD'],
                        check=True, capture_output=True).stdout
  with tarfile.open(fileobj=io.BytesIO(tree)) as source, \
      tarfile.open(tarball, 'w:gz') as out:
    for member in source.getmembers():
      out.addfile(member, source.extractfile(member) if member.isfile()
                  else None)
    data = launch_gin(job).encode()
    info = tarfile.TarInfo(LAUNCH_GIN)
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))


def launch_gin(job: Job) -> str:
  return ''.join(f'{p}\n' for p in job.gin_params)


# -- Command line -------------------------------------------------------------


def check_experiment_slice(gin_files, accelerator: str, tpu_slice) -> None:
  """The experiment's hardware file must be for the slice being launched."""
  if not accelerator:
    return
  want = tpu_slices.parse(accelerator, public=False)
  try:
    tpu_slices.parse(accelerator)
    where = f'launch it on {accelerator}, or '
  except ValueError:
    where = f'{accelerator} is not a public slice: '
  if want.replicas != tpu_slice.replicas:
    raise ValueError(
        f'{" ".join(gin_files)} is for a {accelerator} slice ({want.replicas} '
        f'replicas, platform tpu-{accelerator}), not {tpu_slice.accelerator} '
        f'({tpu_slice.replicas} replicas): {where}'
        'pick the experiment for this slice (or pass '
        f"--gin_param=\"ACCELERATOR='{tpu_slice.accelerator}'\" with batch "
        'sizes for it).')


def job_from_flags(f=FLAGS) -> Job:
  tpu_slice = tpu_slices.parse(f.accelerator)
  if f.backend not in ('tpu-vm', 'gke'):
    raise ValueError(f'--backend={f.backend}: choose tpu-vm or gke.')
  if f.backend == 'tpu-vm' and not (f.zone and f.project):
    raise ValueError('--backend=tpu-vm needs --zone and --project.')
  if f.backend == 'gke' and not f.image:
    raise ValueError('--backend=gke needs --image: a container image with '
                     f'this checkout in {gke.WORKDIR} and its TPU environment '
                     '(python3 tools/tpu_venv.py --python=python3).')
  if f.backend == 'tpu-vm':
    tpu_slice.check_zone(f.zone)
  runtime = f.runtime or (tpu_slice.base_image if f.install else
                          tpu_slice.image())
  tpu_slices.check_image(runtime, tpu_slice, install=f.install)
  if not f.model_dir.startswith('gs://'):
    raise ValueError(f'--model_dir={f.model_dir}: TPU VMs write to GCS; give '
                     'a gs:// folder.')
  if not f.gin_file:
    raise ValueError('Pass the experiment with --gin_file.')
  gin_files = gin_config.resolve_gin_files(f.gin_file, f.gin_search_paths)
  outside = [g for g in gin_files if os.path.isabs(g)]
  if outside:
    raise ValueError(f'--gin_file={outside[0]} is outside this checkout: '
                     'the workers get the checkout (git archive HEAD) only; '
                     'commit it under gin/.')
  if f.tier not in TIERS:
    raise ValueError(f'--tier={f.tier}: choose one of {", ".join(TIERS)}.')
  if not f.queued and f.valid_until:
    raise ValueError(f'--valid_until={f.valid_until} needs --queued: only a '
                     'queued resource waits for capacity, so only it can give '
                     'up after a while (gcloud compute tpus queued-resources '
                     'create --valid-until-duration).')
  if not f.queued and f.tier in ('guaranteed', 'best-effort'):
    raise ValueError(f'--tier={f.tier} needs --queued: only queued resources '
                     'take it (gcloud compute tpus queued-resources create).')
  from tools import preflight
  experiment = preflight.experiment_inputs(gin_files, f.gin_param)
  if experiment.kind != 'tpu':
    raise ValueError(f'{" ".join(gin_files)} trains on hardware '
                     f'{experiment.kind!r}, not a TPU: launch a TPU '
                     'experiment (gin/*_pod.gin, gin/*_v3_32.gin) or add '
                     '--gin_file=gin/hardware/tpu.gin.')
  check_experiment_slice(gin_files, experiment.accelerator, tpu_slice)
  params = tuple(f.gin_param)
  if not experiment.accelerator:  # Any slice: the run checks and logs this.
    params += (f"ACCELERATOR = '{tpu_slice.accelerator}'",)
  return Job(tpu=f.tpu, zone=f.zone, project=f.project, slice=tpu_slice,
             runtime=runtime, gin_files=tuple(gin_files),
             gin_params=params, model_dir=f.model_dir,
             runs=f.runs, benchmark=experiment.benchmark,
             mesh=bool(experiment.mesh_shape),
             system=f.system or tpu_slice.platform,
             results_dir=f.results_dir, queued=f.queued, tier=f.tier,
             valid_until=f.valid_until, timed=f.timed, keep=f.keep,
             max_hours=f.max_hours, python=f.worker_python,
             install=f.install)


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


def main(argv, f=FLAGS):
  del argv
  try:
    job = job_from_flags(f)
    if f.backend == 'gke':
      gke.check(job.slice, job.mesh)
      if f.execute:
        raise ValueError('--backend=gke writes JobSet manifests for kubectl; '
                         '--execute drives TPU VMs only.')
    if f.execute or f.preflight:
      from tools import preflight
      shards = [int(n) for n in f.data_shards]
      for line in preflight.check(job, shards=shards):
        print(f'preflight: {line}', flush=True)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return exit_codes.USER_ERROR
  if f.backend == 'gke':
    print(f'# {cost_line(job)}')
    accelerator = gke.GKE_ACCELERATORS[job.slice.generation.name]
    print(f'# GKE: a node pool of {job.slice.hosts} {accelerator} '
          f'node{"s" if job.slice.hosts > 1 else ""}, topology '
          f'{gke.topology(job.slice)}; one JobSet a run, applied one after '
          'another (the exclusive-topology annotation holds the node pool).')
    for i, path in enumerate(write_gke_manifests(job, f.image,
                                                 f.manifest_dir)):
      print(f'# run {i} (seed {i})\nkubectl apply -f {path}\n'
            f'kubectl wait --for=condition=Completed --timeout=24h '
            f'jobset/{job.tpu}-run-{i}')
    return 0
  tarball = f'/tmp/{job.suite_dir}-{job.tpu}.tar.gz'
  print(f'# {cost_line(job)}')
  print(f'# zone {job.zone}: offers {job.accelerator} '
        f'({tpu_slices.ZONES_PAGE}, read {tpu_slices.ZONES_DATE}).')
  print(environment_line(job))
  if job.slice.generation.tensorflow_note:
    print(f'# note: {job.slice.generation.tensorflow_note}')
  if f.execute:
    from tools import launch_execute
    return launch_execute.execute(job, tarball,
                                  launch_execute.GoogleCloud(job))
  print(f'# Dry run ({job.runs} run{"s" if job.runs != 1 else ""} on '
        f'{job.accelerator}, {"multi" if job.multi_host else "single"}-host)'
        '. Pass --execute to run; preempted runs are rerun '
        f'{"from scratch into run_<i>_retry<k>" if job.timed else "in place"}'
        '.')
  print(f'# package this checkout (git archive HEAD) as {tarball}, with '
        f'{LAUNCH_GIN}:')
  for line in launch_gin(job).splitlines():
    print(f'#   {line}')
  for what, argv in plan(job, tarball):
    if argv[0] == 'gcloud':  # Every line as its reference page allows.
      gcloud_lib.check(argv)
    print(f'# {what}\n{shlex.join(argv)}')
  return 0


def define_flags(flag_values=FLAGS):
  """The command line's flags, on `flag_values` (tests use their own)."""
  for kind, name, default, text in (
      ('string', 'tpu', None,
       'TPU VM (node) name; also the queued resource name with --queued.'),
      ('string', 'zone', None, 'One that offers the slice (distribution/'
       'tpu_slices.py), e.g. europe-west4-a for v3-32.'),
      ('string', 'project', None, 'Google Cloud project.'),
      ('string', 'accelerator', 'v3-32', 'Slice type as gcloud names it: '
       'v3-8, v3-32, v4-32, v5litepod-8, v5p-16, v6e-8...'),
      ('string', 'runtime', '', 'TPU VM image; default: the generation\'s '
       'base image, TensorFlow installed by tools/tpu_venv.py (with '
       '--noinstall: the documented TensorFlow image; '
       'distribution/tpu_slices.py).'),
      ('multi_string', 'gin_file', [], 'Experiment gin files (a path, or a '
       'name on the search path: bert_v3_32.gin).'),
      ('list', 'gin_search_paths', [], gin_config.SEARCH_PATHS_HELP),
      ('multi_string', 'gin_param', [], 'Gin bindings.'),
      ('string', 'model_dir', None, 'gs:// folder; run i goes to run_<i>.'),
      ('integer', 'runs', 5, 'Runs (MLPerf: 5 ResNet, 10 BERT).'),
      ('list', 'data_shards', [], 'Files the train and eval patterns must '
       'match, e.g. 1024,128 (preflight).'),
      ('string', 'system', '', 'Results system name (tpu-<accelerator>).'),
      ('string', 'results_dir', 'results', 'Local results tree.'),
      ('bool', 'queued', False, 'Create through a queued resource.'),
      ('string', 'tier', 'on-demand', 'on-demand, spot, reserved; with '
       '--queued also guaranteed, best-effort (alpha).'),
      ('string', 'valid_until', '', 'Queued resources: give up the request '
       'after this long, e.g. 6h (gcloud --valid-until-duration).'),
      ('bool', 'timed', True, 'Timed (MLPerf) runs restart from scratch '
       'when preempted; --notimed resumes them.'),
      ('bool', 'keep', False, 'Keep the TPU after the last run (and on '
       'Ctrl-C, so a restarted --execute reattaches).'),
      ('float', 'max_hours', 0.0, 'Stop and delete the TPU after this many '
       'hours (0: no limit).'),
      ('string', 'worker_python', '.venv/bin/python', 'The Python that runs '
       'the suite on the workers (relative to it).'),
      ('bool', 'install', True, 'Build the TPU environment on the workers '
       '(tools/tpu_venv.py); --noinstall uses --worker_python as is.'),
      ('string', 'backend', 'tpu-vm', 'tpu-vm (Cloud TPU VMs, gcloud) or gke '
       '(JobSet manifests for a TPU slice node pool, tools/gke.py).'),
      ('string', 'image', '', 'gke: the container image (this checkout in '
       '/suite, its TPU environment built by tools/tpu_venv.py).'),
      ('string', 'manifest_dir', 'jobsets', 'gke: where the manifests go.'),
      ('bool', 'execute', False, 'Run the commands (default: print).'),
      ('bool', 'preflight', False, 'Run the GCS preflight in a dry run.')):
    getattr(flags, f'DEFINE_{kind}')(name, default, text,
                                     flag_values=flag_values)
  flags.mark_flags_as_required(['tpu', 'model_dir'],
                               flag_values=flag_values)


if __name__ == '__main__':
  define_flags()
  entry_point.parse_flags_early(lambda: None)
  app.run(entry_point.tool_main(main))
