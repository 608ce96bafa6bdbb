"""Runs one command on a TPU VM worker, detached from the launcher's ssh
session, and keeps its state beside the run, in model_dir.

  nohup setsid python -m tools.launcher.job_runner --job_dir=gs://b/runs/run_0/job \\
      -- python train.py ... </dev/null >/dev/null 2>&1 &

Every `--heartbeat` seconds and when the command ends it writes
`<job_dir>/status.json` ({"state": "running" | "exited", "exit_code",
"attempt", "host", "pid", "started", "heartbeat"}, times in Unix seconds) and
`<job_dir>/log.txt` (the command's output so far, its last
`--log_bytes`). tools.launch polls them: a dropped ssh connection or a
restarted launcher loses nothing, and a heartbeat that stops says the VM
went away. SIGTERM/SIGINT (a preempted VM, a cancelled job) are passed on
to the command, which saves and exits 75 (core/exit_codes.py).
With `--per_worker` (a run on every host of a slice) worker k > 0 writes to
`<job_dir>/worker_<k>` (its number from the TPU VM's metadata); worker 0,
the chief, to `<job_dir>`.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from tools.launcher import object_store

STATUS, LOG = 'status.json', 'log.txt'


def tail(path: str, limit: int) -> str:
  with open(path, 'rb') as f:
    f.seek(max(0, os.path.getsize(path) - limit))
    return f.read().decode('utf-8', 'replace')


def run(command: list[str], *, job_dir: str, attempt: str = '',
        heartbeat: float = 30.0, log_bytes: int = 1 << 20) -> int:
  """Runs `command` to its end, publishing its state; returns its exit
  code."""
  log_path = os.path.join(tempfile.mkdtemp(prefix='job_runner_'), LOG)
  started = time.time()
  with open(log_path, 'wb') as log:
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda s, _: child.send_signal(s))

  def publish(state, code=None):
    object_store.write_text(object_store.join(job_dir, LOG),
                            tail(log_path, log_bytes))
    object_store.write_text(object_store.join(job_dir, STATUS), json.dumps({
        'state': state, 'exit_code': code, 'attempt': attempt,
        'host': socket.gethostname(),
        'pid': child.pid, 'started': started, 'heartbeat': time.time()}))

  code = None
  while code is None:
    publish('running')
    try:
      code = child.wait(timeout=heartbeat)
    except subprocess.TimeoutExpired:
      pass
  publish('exited', code)
  return code


def worker_job_dir(job_dir: str) -> str:
  """This TPU VM host's job folder: job_dir for worker 0 (or no metadata),
  job_dir/worker_<k> for worker k."""
  from distribution.gce_metadata import metadata
  number = int(metadata('instance/attributes/agent-worker-number') or 0)
  return object_store.join(job_dir, f'worker_{number}') if number else job_dir


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--job_dir', required=True,
                      help='where status.json and log.txt go (gs:// or local)')
  parser.add_argument('--attempt', default='',
                      help='an id the launcher tells this attempt by')
  parser.add_argument('--per_worker', action='store_true',
                      help='workers other than 0 write to job_dir/worker_<k>')
  parser.add_argument('--heartbeat', type=float, default=30.0)
  parser.add_argument('--log_bytes', type=int, default=1 << 20)
  parser.add_argument('command', nargs=argparse.REMAINDER,
                      help='-- then the command')
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ['--'] else args.command
  if not command:
    parser.error('give the command after --')
  job_dir = args.job_dir
  if args.per_worker:
    job_dir = worker_job_dir(job_dir)
  return run(command, job_dir=job_dir, attempt=args.attempt,
             heartbeat=args.heartbeat,
             log_bytes=args.log_bytes)


if __name__ == '__main__':
  sys.exit(main())
