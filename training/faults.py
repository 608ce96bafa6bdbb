"""Infrastructure faults told apart from crashes: a peer that stopped, storage
that stayed unreachable. Each is one `error:` line naming it and an exit
code of its own (core/exit_codes.py: PEER_LOST, STORAGE_UNAVAILABLE)
that the launcher reruns as it reruns a preemption, never a traceback that
reads as the run's own failure.

The texts are TensorFlow's, as its runtime raises them (TF 2.20 and 2.21):
- a MultiWorkerMirrored peer that stops (SIGSTOP, a dead host): the
  coordination service's "The following tasks are unhealthy (stopped
  sending heartbeats): /job:worker/replica:0/task:1", raised into the
  surviving workers' collectives about 10-20 s later;
- a MultiWorkerMirrored worker that cannot listen on its own TF_CONFIG
  address (another process holds the port, or the address is not this
  host's): "Could not start gRPC server" as the strategy starts; a
  configuration fault, exit 2, before anything trains;
- gs:// that stays unreachable: TensorFlow's file system retries each
  request with backoff (core/storage.py sets how long) and then raises
  "All N retry attempts failed. The last failure: ..."; a write of the
  run's own files that stays undone past the outage budget raises
  StorageUnavailable (training/uploads.py).
"""

import dataclasses
import json
import os
import re

from core import error_text
from core import exit_codes

_UNHEALTHY = re.compile(
    r'tasks are unhealthy \(stopped sending heartbeats\):\s*((?:/job:\S+\s*)+)')
_RETRIES = re.compile(r'All \d+ retry attempts failed')
# A worker whose own address (TF_CONFIG) it cannot listen on.
_NO_SERVER = 'Could not start gRPC server'


class StorageUnavailable(Exception):
  """A write of the run's files stayed undone past the outage budget
  (training/uploads.py); its message is the whole line."""


@dataclasses.dataclass(frozen=True)
class Fault:
  """What stopped the run: its exit code and its one line."""
  code: int
  line: str


def _chain(error: BaseException):
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    yield error
    error = error.__cause__ or error.__context__


_LAST_CHECKPOINT = 'last checkpoint: '


def note_last_checkpoint(error: BaseException, path: str | None) -> None:
  """Notes on `error` the run's last checkpoint (None: none yet), which the
  fault's line names."""
  error.add_note(f'{_LAST_CHECKPOINT}{path or "none"}')


def _resumes_from(error: BaseException) -> str:
  notes = [n[len(_LAST_CHECKPOINT):] for e in _chain(error)
           for n in getattr(e, '__notes__', ())
           if n.startswith(_LAST_CHECKPOINT)]
  if not notes:
    return 'it resumes from its last checkpoint'
  if notes[0] == 'none':
    return 'it starts over (no checkpoint was written yet)'
  return f'it resumes from its last checkpoint, {notes[0]}'


def _own_address() -> str:
  """'127.0.0.1:5000 (TF_CONFIG's worker 1)', from TF_CONFIG."""
  try:
    config = json.loads(os.environ.get('TF_CONFIG', ''))
    task = config['task']
    address = config['cluster'][task['type']][task['index']]
    return f'{address} (TF_CONFIG\'s {task["type"]} {task["index"]})'
  except (ValueError, KeyError, IndexError, TypeError):
    return 'its TF_CONFIG address'


def classify(error: BaseException) -> Fault | None:
  """The infrastructure fault behind `error` (or its causes), or None for
  anything else (a crash)."""
  for e in _chain(error):
    if isinstance(e, StorageUnavailable):
      # Its first line: gin appends "In call to configurable ..." below.
      return Fault(exit_codes.STORAGE_UNAVAILABLE,
                   f'{str(e).splitlines()[0]} (exit '
                   f'{exit_codes.STORAGE_UNAVAILABLE})')
    text = str(e)
    unhealthy = _UNHEALTHY.search(text)
    if unhealthy:
      peers = ', '.join(unhealthy[1].split())
      return Fault(exit_codes.PEER_LOST, (
          f'a peer was lost: {peers} stopped sending heartbeats (a stopped '
          'or dead worker); this worker stopped with it. Rerun the job: '
          f'{_resumes_from(error)} (exit {exit_codes.PEER_LOST}).'))
    if _NO_SERVER in text:
      return Fault(exit_codes.USER_ERROR, (
          f'this worker could not start its server at {_own_address()}: '
          'another process holds that port on this host, or the address is '
          'not this host\'s. Free the port or name another in TF_CONFIG '
          f'(exit {exit_codes.USER_ERROR}).'))
    if _RETRIES.search(text):
      return Fault(exit_codes.STORAGE_UNAVAILABLE, (
          f'storage stayed unreachable: {error_text.one_line(e, limit=300)} '
          f'Rerun when it answers: {_resumes_from(error)} (exit '
          f'{exit_codes.STORAGE_UNAVAILABLE}).'))
  return None
