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
checkpoint (tools/launcher/preflight.py). The plan
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
   (tools/launcher/job_runner.py under nohup/setsid), writing its output and status
   to `<model_dir>/run_<i>/job/`; the launcher polls them and the node's
   state and prints the log's new lines. A restarted --execute picks up
   where the job is: finished runs are kept, a running one is waited for;
4. after each run its exit code (core/exit_codes.py) decides: 0 or 1
   is a result (collected as results/<system>/<benchmark>/result_<i>.txt);
   75 or a lost node (PREEMPTED, TERMINATED, vanished: recreated first)
   reruns it, a timed run from scratch into `run_<i>_retry<k>` (MLPerf does
   not allow resuming a timed run), an untimed one (--notimed) in place; 2
   (bad input), 3 (crash) and 4 (no TPU, node healthy) stop the launch;
5. the results checked and scored (tools/score.py); with --package, the
   runs written as an MLPerf submission package (tools/package.py);
6. the TPU (and its queued resource) deleted, after success, failure or
   Ctrl-C, unless --keep (then a restarted --execute reattaches).
--max_hours stops everything (and deletes the TPU) after that much time.
"""

import os
import shlex
import sys

from absl import app
from absl import flags

from core import config as gin_config
from core import entry_point
from core import exit_codes
from distribution import tpu_slices
from tools.launcher import gcloud as gcloud_lib
from tools.launcher import gke
from tools.launcher import job as job_lib
from tools.launcher.job import Job

FLAGS = flags.FLAGS
TIERS = ('on-demand', 'spot', 'reserved', 'guaranteed', 'best-effort')


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
  from tools.launcher import preflight
  experiment = preflight.experiment_inputs(gin_files, f.gin_param)
  if experiment.kind != 'tpu':
    raise ValueError(f'{" ".join(gin_files)} trains on hardware '
                     f'{experiment.kind!r}, not a TPU: launch a TPU '
                     'experiment (gin/*_pod.gin, gin/*_v3_32.gin) or add '
                     '--gin_file=gin/hardware/tpu.gin.')
  check_experiment_slice(gin_files, experiment.accelerator, tpu_slice)
  if f.package:  # Before any TPU is created.
    from tools.submission import system as system_lib
    from tools.submission import writer
    writer.check_destination(f.package)
    if f.system_desc:
      system_lib.read_file(f.system_desc)
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
             install=f.install, package=f.package,
             system_desc=f.system_desc)


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
      from tools.launcher import preflight
      shards = [int(n) for n in f.data_shards]
      for line in preflight.check(job, shards=shards):
        print(f'preflight: {line}', flush=True)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return exit_codes.USER_ERROR
  if f.backend == 'gke':
    print(f'# {job_lib.cost_line(job)}')
    accelerator = gke.GKE_ACCELERATORS[job.slice.generation.name]
    print(f'# GKE: a node pool of {job.slice.hosts} {accelerator} '
          f'node{"s" if job.slice.hosts > 1 else ""}, topology '
          f'{gke.topology(job.slice)}; one JobSet a run, applied one after '
          'another (the exclusive-topology annotation holds the node pool).')
    for i, path in enumerate(job_lib.write_gke_manifests(job, f.image,
                                                         f.manifest_dir)):
      print(f'# run {i} (seed {i})\nkubectl apply -f {path}\n'
            f'kubectl wait --for=condition=Completed --timeout=24h '
            f'jobset/{job.tpu}-run-{i}')
    if job.package:
      print('# the submission package, checked by MLCommons\' package '
            'checker\n' + shlex.join(job_lib.package_command(
                job, [job.run_dir(i) for i in range(job.runs)])))
    return 0
  tarball = f'/tmp/{job.suite_dir}-{job.tpu}.tar.gz'
  print(f'# {job_lib.cost_line(job)}')
  print(f'# zone {job.zone}: offers {job.accelerator} '
        f'({tpu_slices.ZONES_PAGE}, read {tpu_slices.ZONES_DATE}).')
  print(job_lib.environment_line(job))
  if job.slice.generation.tensorflow_note:
    print(f'# note: {job.slice.generation.tensorflow_note}')
  if f.execute:
    from tools.launcher import execute as launch_execute
    return launch_execute.execute(job, tarball,
                                  launch_execute.GoogleCloud(job))
  print(f'# Dry run ({job.runs} run{"s" if job.runs != 1 else ""} on '
        f'{job.accelerator}, {"multi" if job.multi_host else "single"}-host)'
        '. Pass --execute to run; preempted runs are rerun '
        f'{"from scratch into run_<i>_retry<k>" if job.timed else "in place"}'
        '.')
  print(f'# package this checkout (git archive HEAD) as {tarball}, with '
        f'{job_lib.LAUNCH_GIN}:')
  for line in job_lib.launch_gin(job).splitlines():
    print(f'#   {line}')
  for what, argv in job_lib.plan(job, tarball):
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
      ('string', 'package', '', 'After the runs, write their MLPerf '
       'submission package here (tools.package: a new folder, or '
       'gs://.../NAME.tar.gz; docs/submitting.md).'),
      ('string', 'system_desc', '', 'The package\'s system fields, a JSON '
       'file (tools.package --system_desc).'),
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
       '(JobSet manifests for a TPU slice node pool, tools/launcher/gke.py).'),
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
