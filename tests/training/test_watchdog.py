"""A stalled operation is named while it waits (training/watchdog.py)."""

import threading

import pytest

from training import watchdog


def test_a_stalled_operation_is_named_while_it_waits():
  lines, said = [], threading.Event()

  def say(line):
    lines.append(line)
    said.set()

  dog = watchdog.Watchdog(warn_after=0.05, say=say)
  with dog.watch('saving checkpoint gs://b/run/checkpoints/ckpt-6'):
    # The operation waits until the watchdog has spoken (no timing judged).
    assert said.wait(timeout=60)
  assert lines[0].startswith('stalled: saving checkpoint '
                             'gs://b/run/checkpoints/ckpt-6 has taken ')
  # Its thread ended with the operation.
  assert not [t for t in threading.enumerate()
              if t.name.startswith('watchdog: saving checkpoint')]


def test_a_quick_operation_says_nothing_and_zero_turns_it_off():
  lines = []
  with watchdog.Watchdog(warn_after=3600, say=lines.append).watch('x'):
    pass
  with watchdog.Watchdog(warn_after=0, say=lines.append).watch('x'):
    pass
  assert lines == []
  with pytest.raises(ValueError, match='must be >= 0'):
    watchdog.Watchdog(warn_after=-1)
