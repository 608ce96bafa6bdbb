"""Batch jobs on Cloud TPU VMs: print (default) or run the gcloud commands.

  python -m tools.launch --gin_file=gin/bert_v3_32.gin --tpu=my-slice \\
      --zone=us-central1-a --project=my-proj --accelerator=v3-32 \\
      --model_dir=gs://bucket/bert --runs=10 \\
      --gin_param="DATA_DIR='gs://bucket/bert_data'" [--execute]

The plan, in order:
1. preflight (execute mode, or --preflight): tools/preflight.py checks the
   bucket, its region against the TPU's, that model_dir can be written, the
   data shards and INIT_CHECKPOINT, before any TPU time is spent;
2. create the TPU VM slice (or a queued resource, --queued) unless it exists;
3. copy this checkout (`git archive HEAD`, plus the --gin_param bindings as
   launch.gin) to every worker and install requirements-tpu.txt in a venv
   there (`--worker=all`);
4. run the experiment N times with seeds 0..N-1 into `<model_dir>/run_<i>`
   on worker 0: single-host slices with `--tpu=local`; multi-host slices
   with `--tpu=NAME` and TPU_NAME / TPU_LOAD_LIBRARY=0, TensorFlow's
   setting for driving a pod slice from worker 0;
5. collect each run's mlperf.log as `results/<system>/<benchmark>/
   result_<i>.txt`, and 6. check and score them (tools/score.py).

While running, it polls the node's state (google-cloud-tpu). A run that was
preempted (exit 75, or the node PREEMPTED/TERMINATED, then recreated) is run
again: a timed run from scratch into `run_<i>_retry<k>` (MLPerf does not allow
resuming a timed run), an untimed one (--notimed) resumed in place.
"""

import dataclasses
import shlex
import subprocess
import sys

from absl import app
from absl import flags

from distribution import tpu

FLAGS = flags.FLAGS
EXIT_PREEMPTED = 75  # training.preemption.EXIT_PREEMPTED
LOST_STATES = ('PREEMPTED', 'TERMINATED')


@dataclasses.dataclass(frozen=True)
class Job:
  """What to launch (the command line's flags)."""
  tpu: str
  zone: str
  project: str
  accelerator: str
  runtime: str
  gin_files: tuple
  gin_params: tuple
  model_dir: str
  runs: int
  benchmark: str
  system: str
  results_dir: str = 'results'
  queued: bool = False
  timed: bool = True
  suite_dir: str = 'suite'

  @property
  def multi_host(self) -> bool:
    return tpu.slice_hosts(self.accelerator) > 1

  def gcloud(self, *args: str) -> list[str]:
    return ['gcloud', 'compute', 'tpus', *args, f'--zone={self.zone}',
            f'--project={self.project}']

  def run_dir(self, index: int, retry: int = 0) -> str:
    suffix = f'_retry{retry}' if retry else ''
    return f'{self.model_dir.rstrip("/")}/run_{index}{suffix}'

  def result_dir(self) -> str:
    return f'{self.results_dir}/{self.system}/{self.benchmark}'


def describe_node(job: Job) -> list[str]:
  return job.gcloud('tpu-vm', 'describe', job.tpu, '--format=value(state)')


def create_node(job: Job) -> list[str]:
  if job.queued:
    return job.gcloud('queued-resources', 'create', job.tpu,
                      f'--node-id={job.tpu}',
                      f'--accelerator-type={job.accelerator}',
                      f'--runtime-version={job.runtime}')
  return job.gcloud('tpu-vm', 'create', job.tpu,
                    f'--accelerator-type={job.accelerator}',
                    f'--version={job.runtime}')


def delete_node(job: Job) -> list[str]:
  if job.queued:
    return job.gcloud('queued-resources', 'delete', job.tpu, '--force',
                      '--quiet')
  return job.gcloud('tpu-vm', 'delete', job.tpu, '--quiet')


def on_workers(job: Job, command: str, worker: str) -> list[str]:
  return job.gcloud('tpu-vm', 'ssh', job.tpu, f'--worker={worker}',
                    f'--command={command}')


def install(job: Job, tarball: str) -> list[list[str]]:
  """Copy the checkout to every worker and install it there."""
  d = job.suite_dir
  return [
      job.gcloud('tpu-vm', 'scp', tarball, f'{job.tpu}:{d}.tar.gz',
                 '--worker=all'),
      on_workers(job, f'rm -rf {d} && mkdir {d} && tar xzf {d}.tar.gz -C {d} '
                 f'&& python3 -m venv {d}/.venv && {d}/.venv/bin/pip install '
                 f'-q -r {d}/requirements-tpu.txt', 'all'),
  ]


LAUNCH_GIN = 'launch.gin'  # The job's --gin_param bindings, in the package.


def launch_gin(job: Job) -> str:
  return ''.join(f'{p}\n' for p in job.gin_params)


def package(job: Job, tarball: str) -> None:
  """This checkout's HEAD (git archive) plus launch.gin, as a .tar.gz."""
  import io
  import tarfile
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


def train(job: Job, index: int, retry: int = 0) -> list[str]:
  """Run `index` (seed = index) on worker 0."""
  # Bindings travel in launch.gin: no quotes inside the ssh command.
  args = ['.venv/bin/python', 'train.py',
          *(f'--gin_file={f}' for f in job.gin_files),
          *([f'--gin_file={LAUNCH_GIN}'] if job.gin_params else []),
          f'--gin.SEED={index}',
          f'--tpu={job.tpu if job.multi_host else "local"}',
          f'--model_dir={job.run_dir(index, retry)}']
  env = f'TPU_NAME={job.tpu} TPU_LOAD_LIBRARY=0 ' if job.multi_host else ''
  command = f'cd {job.suite_dir} && {env}{shlex.join(args)}'
  return on_workers(job, command, '0')


def collect(job: Job, index: int, retry: int = 0) -> list[str]:
  return ['gcloud', 'storage', 'cp', f'{job.run_dir(index, retry)}/mlperf.log',
          f'{job.result_dir()}/result_{index}.txt']


def score(job: Job) -> list[str]:
  return ['python', '-m', 'tools.score', job.result_dir()]


def plan(job: Job, tarball: str) -> list[tuple[str, list[str]]]:
  """The commands of a job whose runs all succeed: (what, argv) pairs."""
  steps = [('reuse the TPU if it exists', describe_node(job)),
           ('else create it', create_node(job))]
  steps += list(zip(('copy the package to every worker',
                     'install it on every worker'), install(job, tarball)))
  for i in range(job.runs):
    steps.append((f'run {i} (seed {i})', train(job, i)))
    steps.append((f'collect run {i}', collect(job, i)))
  steps.append(('check and score', score(job)))
  return steps


def next_step(*, exit_code: int, node_state: str | None, timed: bool,
              retry: int, max_retries: int) -> tuple[str, int]:
  """After a run ends: ('done' | 'recreate' | 'rerun' | 'give_up', retry).

  A run is preempted when it exits 75 (it saved and stopped on SIGTERM) or
  its node is PREEMPTED/TERMINATED. A timed run then starts over in a new
  folder (retry + 1); an untimed one resumes in place (same retry).
  """
  lost = node_state in LOST_STATES
  if exit_code in (0, 1) and not lost:
    return 'done', retry  # 1: the budget ran out; its log is still a run.
  if not (lost or exit_code == EXIT_PREEMPTED):
    return 'give_up', retry
  if retry >= max_retries:
    return 'give_up', retry
  return ('recreate' if lost else 'rerun'), retry + 1 if timed else retry


def node_state(job: Job, client=None) -> str | None:
  """The node's state from the Cloud TPU API (None if it does not exist)."""
  from google.api_core import exceptions
  from google.cloud import tpu_v2
  client = client or tpu_v2.TpuClient()
  name = f'projects/{job.project}/locations/{job.zone}/nodes/{job.tpu}'
  try:
    return client.get_node(name=name).state.name
  except exceptions.NotFound:
    return None


def execute(job: Job, tarball: str, *, max_retries: int = 3,
            run=subprocess.run) -> int:
  """Runs the plan, rerunning preempted runs; returns the score's exit."""
  def call(argv, **kwargs):
    print('+ ' + shlex.join(argv), flush=True)
    return run(argv, **kwargs)

  def bring_up():
    """Reuses a live node, replaces a lost one, creates a missing one; then
    installs this package on every worker."""
    state = node_state(job)
    if state in LOST_STATES:
      call(delete_node(job), check=True)
    if state is None or state in LOST_STATES:
      call(create_node(job), check=True)
    for command in install(job, tarball):
      call(command, check=True)

  package(job, tarball)
  bring_up()
  for i in range(job.runs):
    retry = 0
    while True:
      code = call(train(job, i, retry)).returncode
      action, next_retry = next_step(
          exit_code=code, node_state=node_state(job), timed=job.timed,
          retry=retry, max_retries=max_retries)
      if action == 'done':
        break
      if action == 'give_up':
        print(f'run {i} failed (exit {code}); not retried.', flush=True)
        return 1
      if action == 'recreate':
        bring_up()
      retry = next_retry
    call(['mkdir', '-p', job.result_dir()], check=True)
    call(collect(job, i, retry), check=True)
  return call([sys.executable, *score(job)[1:]]).returncode


def job_from_flags() -> Job:
  f = FLAGS
  tpu.slice_hosts(f.accelerator)  # Fails early on an unknown slice.
  if not f.model_dir.startswith('gs://'):
    raise ValueError(f'--model_dir={f.model_dir}: TPU VMs write to GCS; give '
                     'a gs:// folder.')
  if not f.gin_file:
    raise ValueError('Pass the experiment with --gin_file.')
  from tools import preflight
  _, _, benchmark = preflight.experiment_inputs(f.gin_file, f.gin_param)
  return Job(tpu=f.tpu, zone=f.zone, project=f.project,
             accelerator=f.accelerator, runtime=f.runtime,
             gin_files=tuple(f.gin_file), gin_params=tuple(f.gin_param),
             model_dir=f.model_dir, runs=f.runs, benchmark=benchmark,
             system=f.system or f'tpu-{f.accelerator}',
             results_dir=f.results_dir, queued=f.queued, timed=f.timed)


def main(argv):
  del argv
  try:
    job = job_from_flags()
    if FLAGS.execute or FLAGS.preflight:
      from tools import preflight
      shards = [int(n) for n in FLAGS.data_shards]
      for line in preflight.check(job, shards=shards):
        print(f'preflight: {line}', flush=True)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  tarball = f'/tmp/{job.suite_dir}-{job.tpu}.tar.gz'
  if FLAGS.execute:
    return execute(job, tarball)
  print(f'# Dry run ({job.runs} run{"s" if job.runs != 1 else ""} on '
        f'{job.accelerator}, '
        f'{"multi" if job.multi_host else "single"}-host). Pass --execute to '
        'run; preempted runs are rerun '
        f'{"from scratch into run_<i>_retry<k>" if job.timed else "in place"}.')
  print(f'# package this checkout (git archive HEAD) as {tarball}, with '
        f'{LAUNCH_GIN}:')
  for line in launch_gin(job).splitlines():
    print(f'#   {line}')
  for what, argv in plan(job, tarball):
    print(f'# {what}\n{shlex.join(argv)}')
  return 0


def define_flags():
  flags.DEFINE_string('tpu', None, 'TPU VM (node) name.')
  flags.DEFINE_string('zone', None, 'e.g. us-central1-a.')
  flags.DEFINE_string('project', None, 'Google Cloud project.')
  flags.DEFINE_string('accelerator', 'v3-32', 'Slice type: v3-8, v3-32, ...')
  flags.DEFINE_string('runtime', 'tpu-vm-tf-2.20.0', 'TPU VM software version.')
  flags.DEFINE_multi_string('gin_file', [], 'Experiment gin files.')
  flags.DEFINE_multi_string('gin_param', [], 'Gin bindings.')
  flags.DEFINE_string('model_dir', None, 'gs:// folder; run i goes to run_<i>.')
  flags.DEFINE_integer('runs', 5, 'Runs (MLPerf: 5 ResNet, 10 BERT).')
  flags.DEFINE_list('data_shards', [], 'Files the train and eval patterns '
                    'must match, e.g. 1024,128 (preflight).')
  flags.DEFINE_string('system', '', 'Results system name (tpu-<accelerator>).')
  flags.DEFINE_string('results_dir', 'results', 'Local results tree.')
  flags.DEFINE_bool('queued', False, 'Create through a queued resource.')
  flags.DEFINE_bool('timed', True, 'Timed (MLPerf) runs restart from scratch '
                    'when preempted; --notimed resumes them.')
  flags.DEFINE_bool('execute', False, 'Run the commands (default: print).')
  flags.DEFINE_bool('preflight', False, 'Run the GCS preflight in a dry run.')
  flags.mark_flags_as_required(['tpu', 'zone', 'project', 'model_dir'])


if __name__ == '__main__':
  define_flags()
  app.run(lambda argv: sys.exit(main(argv)))
