"""training/preemption.py with real signals to this process and a real
Checkpointer: where the run stops, and that a step is saved once."""

import os
import signal

import numpy as np
import tensorflow as tf

from training import checkpoints
from training import events as ev
from training import preemption


def guarded(tmp_path):
  step = tf.Variable(0, dtype=tf.int64)
  saver = checkpoints.Checkpointer(
      model_dir=str(tmp_path), chief=True, step=step,
      values=[tf.Variable(np.zeros([8], np.float32))])
  guard = preemption.PreemptionGuard(
      checkpointer=saver, worker_sum=lambda value, **_: value,
      grace_seconds=0)
  guard(ev.RunStart(step=0))
  return saver, guard


def loop_end(step):
  return ev.LoopEnd(step=step, total_steps=100, loss=1.0, learning_rate=0.1,
                    examples_per_second=1.0)


def test_a_signal_during_an_eval_stops_at_that_evals_end(tmp_path):
  saver, guard = guarded(tmp_path)
  try:
    assert guard(loop_end(10)) is None
    os.kill(os.getpid(), signal.SIGTERM)  # While the eval of step 10 runs.
    decision = guard(ev.EvalEnd(step=10, quality=0.5, metrics={},
                                known_at_step=10))
    assert decision.stop and decision.preempted
    assert decision.status == 'aborted'
    assert saver.last_saved_step == 10
    assert tf.train.latest_checkpoint(saver.directory).endswith('ckpt-10')
    # Decided once: later events of the stopping run change nothing.
    assert guard(loop_end(10)) is None
    assert int(saver.checkpoint.save_counter.numpy()) == 1
  finally:
    guard(ev.RunEnd(step=10, status='aborted', quality=None,
                    time_to_train=0.0))
  assert signal.getsignal(signal.SIGTERM) is not guard._handle  # pylint: disable=protected-access


def test_a_signal_during_a_save_saves_that_step_once(tmp_path, capsys):
  saver, guard = guarded(tmp_path)
  try:
    saver.save(20)  # The periodic save, during which the signal arrives.
    os.kill(os.getpid(), signal.SIGTERM)
    decision = guard(loop_end(20))
    assert decision.stop and decision.preempted
    assert int(saver.checkpoint.save_counter.numpy()) == 1  # Not twice.
    assert 'preempted at step 20, after this loop: step 20 was just saved' in (
        capsys.readouterr().out)
  finally:
    guard(ev.RunEnd(step=20, status='aborted', quality=None,
                    time_to_train=0.0))


def test_no_signal_no_stop(tmp_path):
  saver, guard = guarded(tmp_path)
  try:
    assert guard(loop_end(5)) is None
    assert guard(ev.EvalEnd(step=5, quality=0.1, metrics={})) is None
    assert saver.last_saved_step is None
  finally:
    guard(ev.RunEnd(step=5, status='aborted', quality=None,
                    time_to_train=0.0))
