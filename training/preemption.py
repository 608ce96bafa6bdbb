"""Preemption: SIGTERM or SIGINT ends the run at the next boundary, saved.

What a preempted TPU VM or a cluster scheduler sends is SIGTERM, some time
before the machine goes away (30 s for a Spot VM). The first signal sets a
flag; the device loop or evaluation in flight finishes (Python handles
signals between the calls); at its end (a training loop's end, before any
evaluation due there, or an evaluation's end) every worker agrees to stop
(a one-value all-reduce of the flags, so a signal on any worker stops all
of them at the same step), saves a checkpoint there unless that step was
just saved, and the run ends with MLPerf run_stop status `aborted` and
exit code EXIT_PREEMPTED, which a launcher reads as "preempted, resume me".
A second signal, or the grace period running out, exits at once: the
checkpoints already written stay intact.
"""

import os
import signal
import threading
import time

from core import exit_codes
from distribution import strategy as strategies
from training import events as ev

EXIT_PREEMPTED = exit_codes.PREEMPTED
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class PreemptionGuard:
  """The action that turns a termination signal into a saved, resumable stop."""

  def __init__(self, *, checkpointer, worker_sum: strategies.WorkerSum,
               grace_seconds: float = 300.0):
    """Args:
      checkpointer: saves the state at the agreed step.
      worker_sum: sums a host value over the workers (they agree through it).
      grace_seconds: after the first signal, exit at once if the run has not
        saved and stopped within this many seconds (0: wait indefinitely).
    """
    self.checkpointer, self.grace_seconds = checkpointer, grace_seconds
    self.worker_sum = worker_sum
    self.signalled = None  # The first signal's number, once received.
    self.stopped = False  # Whether this guard has stopped the run.
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    if self.signalled is not None:
      print(f'second signal {signum}: exiting now; the last checkpoint '
            'written is kept.', flush=True)
      os._exit(128 + signum)  # pylint: disable=protected-access
    self.signalled = signum
    print(f'signal {signum}: finishing this loop or evaluation, then saving '
          'and stopping '
          f'(again to exit at once; grace {self.grace_seconds:g} s).',
          flush=True)
    if self.grace_seconds:
      timer = threading.Timer(self.grace_seconds, self._out_of_time, [signum])
      timer.daemon = True
      timer.start()

  def _out_of_time(self, signum):
    print(f'grace period of {self.grace_seconds:g} s over: exiting; the last '
          'checkpoint written is kept.', flush=True)
    os._exit(128 + signum)  # pylint: disable=protected-access

  def _install(self):
    if threading.current_thread() is not threading.main_thread():
      return  # Signals reach the main thread only (a notebook's worker...).
    for sig in SIGNALS:
      self._previous[sig] = signal.signal(sig, self._handle)

  def _restore(self):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}

  def __call__(self, event):
    if isinstance(event, ev.RunStart):
      self._install()
    elif isinstance(event, ev.LoopEnd):
      return self._maybe_stop(event.step, 'this loop')
    elif isinstance(event, ev.EvalEnd):
      return self._maybe_stop(
          event.step if event.known_at_step is None else event.known_at_step,
          'an evaluation')
    elif isinstance(event, ev.RunEnd):
      self._restore()
    return None

  def _maybe_stop(self, step: int, after: str):
    if self.stopped:
      return None  # Decided already; the run is stopping.
    # Every worker sees the same LoopEnd and EvalEnd events (the evaluator
    # agrees on results), so they all take part in this sum at each one:
    # any worker signalled stops all of them at this same step.
    if self.worker_sum(float(self.signalled is not None)) == 0:
      return None
    if self.checkpointer.last_saved_step == step:
      # The signal came during this step's save (or it was saved already).
      saved = f'step {step} was just saved'
    else:
      began = time.time()
      path = self.checkpointer.save(step)
      saved = f'saved {path} in {time.time() - began:.1f} s'
    print(f'preempted at step {step}, after {after}: {saved}; rerun the same '
          'command to resume.', flush=True)
    self.stopped = True
    return ev.Decision(status='aborted', stop=True, preempted=True)
