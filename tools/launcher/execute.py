"""Runs a launch plan (tools/launch.py --execute): brings the TPU up,
starts each run detached on worker 0, follows it through its status in
model_dir, reruns what was preempted, collects, scores and deletes the TPU.

The cloud is reached through one object (GoogleCloud): gcloud for what
changes (create, delete, ssh, scp, storage cp), google-cloud-tpu for
node and queued-resource states, GCS for the runs' status and logs. The
tests drive it against a local Cloud TPU API, the GCS emulator and a gcloud
that checks every command line against its reference page
(tests/fake_cloud_tpu.py, tests/fake_gcloud.py).
"""

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
import uuid

from core import exit_codes
from tools.launcher.job import collect
from tools.launcher.job import create
from tools.launcher.job import delete
from tools.launcher.job import install
from tools.launcher.job import Job
from tools.launcher.job import package
from tools.launcher.job import package_command
from tools.launcher.job import score
from tools.launcher.job import start
from tools.launcher import job_runner
from tools.launcher import object_store

LOST_STATES = ('PREEMPTED', 'TERMINATED')
QUEUED_ENDS = ('FAILED', 'SUSPENDED')


class LaunchError(RuntimeError):
  """The launch cannot go on (one line saying why); the TPU is deleted
  unless --keep."""


def next_step(*, exit_code: int | None, node_state: str | None, timed: bool,
              retry: int, max_retries: int) -> tuple[str, int]:
  """After a run ends: ('done' | 'recreate' | 'rerun' | 'give_up', retry).

  exit_code is train.py's (core/exit_codes.py), None when the run's
  job vanished (its heartbeat stopped). A scored run (0, 1) is done. A
  run is preempted when it exits 75 (it saved and stopped on SIGTERM), 69
  (a peer lost) or 74 (storage unreachable), or its node is lost (PREEMPTED, TERMINATED, or gone: node_state None); a
  timed run then starts over in a new folder (retry + 1), an untimed one
  resumes in place (same retry). Bad input (2), a crash (3), no TPU on a
  healthy node (4) and a vanished job on a healthy node are not retried.
  """
  if exit_code in exit_codes.SCORED:
    return 'done', retry
  lost = node_state is None or node_state in LOST_STATES
  if not (lost or exit_code in exit_codes.RERUN):
    return 'give_up', retry
  if retry >= max_retries:
    return 'give_up', retry
  return ('recreate' if lost else 'rerun'), retry + 1 if timed else retry


class GoogleCloud:
  """The real cloud: gcloud for changes and ssh, google-cloud-tpu for
  state, GCS (tools/launcher/object_store.py) for the runs' status."""

  def __init__(self, job: Job, *, run=subprocess.run, client=None):
    self.job, self._run, self._client = job, run, client

  def call(self, argv: list[str], check: bool = True) -> int:
    print('+ ' + shlex.join(argv), flush=True)
    done = self._run(argv)
    if check and done.returncode:
      raise LaunchError(f'{shlex.join(argv[:5])} ... failed (exit '
                        f'{done.returncode}); see its output above.')
    return done.returncode

  def _tpu(self):
    from google.cloud import tpu_v2
    if self._client is None:
      self._client = tpu_v2.TpuClient()
    return self._client

  def _where(self):
    return f'projects/{self.job.project}/locations/{self.job.zone}'

  def node_state(self) -> str | None:
    """The node's state (None if it does not exist)."""
    from google.api_core import exceptions
    try:
      return self._tpu().get_node(
          name=f'{self._where()}/nodes/{self.job.tpu}').state.name
    except exceptions.NotFound:
      return None

  def queued_state(self) -> tuple[str | None, str]:
    """(state, reason) of the queued resource (None if there is none)."""
    from google.api_core import exceptions
    try:
      resource = self._tpu().get_queued_resource(
          name=f'{self._where()}/queuedResources/{self.job.tpu}')
    except exceptions.NotFound:
      return None, ''
    state = resource.state
    reason = ''
    if state.state.name == 'FAILED':
      reason = state.failed_data.error.message
    elif state.state.name == 'SUSPENDED':  # The API gives no message.
      reason = (f'suspended, initiated by {state.state_initiator.name} (a '
                'spot request is suspended when its TPU is preempted)')
    return state.state.name, reason

  def job_status(self, index: int, retry: int) -> dict | None:
    text = object_store.read_text(object_store.join(
        self.job.job_dir(index, retry), job_runner.STATUS))
    return json.loads(text) if text else None

  def job_log(self, index: int, retry: int) -> str:
    return object_store.read_text(object_store.join(
        self.job.job_dir(index, retry), job_runner.LOG)) or ''


@dataclasses.dataclass
class Poll:
  """How the launcher waits: seconds between polls, and how stale a run's
  heartbeat may grow before the run counts as gone."""
  seconds: float = 30.0
  stale_after: float = 300.0
  start_timeout: float = 900.0
  clock: object = time


def check_deadline(job: Job, poll: Poll, deadline: float | None,
                   doing: str) -> None:
  if deadline and poll.clock.time() > deadline:
    raise LaunchError(f'--max_hours={job.max_hours:g} reached {doing}.')


def bring_up(job: Job, cloud, poll: Poll, tarball: str,
             deadline: float | None = None) -> None:
  """A READY node (an ACTIVE queued resource) with this package installed:
  reuses, deletes what is stale or lost, creates, waits."""
  if job.queued:
    state, _ = cloud.queued_state()
    node = cloud.node_state() if state == 'ACTIVE' else None
    if state in QUEUED_ENDS or (state == 'ACTIVE' and (
        node is None or node in LOST_STATES)):
      print(f'queued resource {job.tpu} is {state}'
            f'{" with its node " + str(node) if state == "ACTIVE" else ""}: '
            'deleting it first.', flush=True)
      cloud.call(delete(job))
      state = None
    if state is None:
      cloud.call(create(job))
    wait_active(job, cloud, poll, deadline)
  else:
    state = cloud.node_state()
    if state in LOST_STATES:
      print(f'TPU {job.tpu} is {state}: deleting and recreating it.',
            flush=True)
      cloud.call(delete(job))
    if state is None or state in LOST_STATES:
      cloud.call(create(job))
  wait_ready(job, cloud, poll, deadline)
  for command in install(job, tarball):
    cloud.call(command)


def wait_active(job: Job, cloud, poll: Poll,
                deadline: float | None = None) -> None:
  began = poll.clock.time()
  while True:
    state, reason = cloud.queued_state()
    waited = (poll.clock.time() - began) / 60
    print(f'queued resource {job.tpu}: {state} (waited {waited:.0f} min)',
          flush=True)
    if state == 'ACTIVE':
      return
    if state in QUEUED_ENDS or state is None:
      raise LaunchError(
          f'queued resource {job.tpu} is {state or "gone"}: '
          f'{reason or "no reason given"} (gcloud compute tpus '
          f'queued-resources describe {job.tpu} --zone={job.zone}).')
    check_deadline(job, poll, deadline, 'waiting for the queued resource')
    poll.clock.sleep(poll.seconds)


def wait_ready(job: Job, cloud, poll: Poll,
               deadline: float | None = None) -> None:
  began = poll.clock.time()
  while True:
    state = cloud.node_state()
    if state == 'READY':
      return
    if state is None or state in LOST_STATES:
      raise LaunchError(f'TPU {job.tpu} is {state or "gone"} before its '
                        'first run.')
    print(f'TPU {job.tpu}: {state} (waited '
          f'{(poll.clock.time() - began) / 60:.0f} min)', flush=True)
    check_deadline(job, poll, deadline, 'waiting for the TPU')
    poll.clock.sleep(poll.seconds)


def latest_attempt(job: Job, cloud, index: int, max_retries: int
                   ) -> tuple[int, dict | None]:
  """The newest attempt of run `index` a previous --execute left in
  model_dir: (retry, its status or None)."""
  found = (0, None)
  for retry in range(max_retries + 1):
    status = cloud.job_status(index, retry)
    if status:
      found = (retry, status)
  return found


def wait_for_run(job: Job, cloud, poll: Poll, index: int, retry: int,
                 attempt: str, deadline: float | None
                 ) -> tuple[int | None, str | None]:
  """Polls attempt `attempt` of run `index` until it exits or is lost:
  (exit code or None, node state). Prints the log's new lines."""
  began, shown = poll.clock.time(), 0
  while True:
    status = cloud.job_status(index, retry)
    if status and status.get('attempt') != attempt:
      status = None  # An earlier attempt's, not yet replaced.
    log = cloud.job_log(index, retry) if status else ''
    new = log[shown:] if len(log) >= shown else log
    for line in new.splitlines()[-20:]:
      print(f'  [run {index}] {line}', flush=True)
    shown = len(log)
    now = poll.clock.time()
    if status and status['state'] == 'exited':
      return status['exit_code'], cloud.node_state()
    node = cloud.node_state()
    if node is None or node in LOST_STATES:
      return None, node
    if status is None and now - began > poll.start_timeout:
      return None, node
    if status and now - status['heartbeat'] > poll.stale_after:
      print(f'run {index}: no heartbeat for '
            f'{(now - status["heartbeat"]) / 60:.0f} min.', flush=True)
      return None, node
    check_deadline(job, poll, deadline, f'during run {index}')
    poll.clock.sleep(poll.seconds)


def execute(job: Job, tarball: str, cloud, *, poll: Poll = Poll(),
            max_retries: int = 3) -> int:
  """Runs the plan (see the module docstring); returns the score's exit
  code, or 1 when the launch stopped."""
  package(job, tarball)
  deadline = (poll.clock.time() + job.max_hours * 3600 if job.max_hours
              else None)
  try:
    bring_up(job, cloud, poll, tarball, deadline)
    scored = []
    for i in range(job.runs):
      retry, status = latest_attempt(job, cloud, i, max_retries)
      attempt = status.get('attempt') if status else None
      while True:
        if attempt is None:
          attempt = uuid.uuid4().hex[:12]
          cloud.call(start(job, i, retry, attempt))
        else:
          print(f'run {i}: found {job.job_dir(i, retry)} '
                f'({status["state"]}); picking it up.', flush=True)
        code, node = wait_for_run(job, cloud, poll, i, retry, attempt,
                                  deadline)
        action, next_retry = next_step(
            exit_code=code, node_state=node, timed=job.timed, retry=retry,
            max_retries=max_retries)
        print(f'run {i}: exit {code}, node {node}: {action}', flush=True)
        if action == 'done':
          break
        if action == 'give_up':
          raise LaunchError(
              f'run {i} ended with exit {code} ({job.job_dir(i, retry)}/'
              f'{job_runner.LOG} has its output); not retried.')
        if action == 'recreate':
          bring_up(job, cloud, poll, tarball, deadline)
        retry, attempt = next_retry, None
      os.makedirs(job.result_dir(), exist_ok=True)
      cloud.call(collect(job, i, retry))
      scored.append(job.run_dir(i, retry))
    code = cloud.call([sys.executable, *score(job)[1:]], check=False)
    if job.package and code == 0:
      code = cloud.call([sys.executable,
                         *package_command(job, scored)[1:]], check=False)
    elif job.package:
      print(f'no package: the score step ended with exit {code}.',
            flush=True)
    return code
  except LaunchError as e:
    print(f'error: {e}', file=sys.stderr, flush=True)
    return 1
  finally:
    if job.keep:
      print(f'TPU {job.tpu} kept (--keep): delete it with '
            f'{shlex.join(delete(job))}', flush=True)
    else:
      teardown(job, cloud)


def teardown(job: Job, cloud) -> None:
  """Deletes the TPU (and its queued resource) if it exists."""
  there = (cloud.queued_state()[0] if job.queued else cloud.node_state())
  if there is not None:
    cloud.call(delete(job), check=False)


