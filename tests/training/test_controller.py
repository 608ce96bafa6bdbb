"""The Controller and its actions, driven by fakes in milliseconds (as Orbit's
controller tests drive theirs with a tiny runner)."""

import json

import pytest
import tensorflow as tf

from training import actions
from training import checkpoints
from training import controller as controller_lib
from training import evaluator as evaluator_lib
from training import events as ev
from training import mlperf_log


class FakeCheckpointer:
  def __init__(self, restore_to=None, step=None):
    self.saved, self.last_saved_step = [], None
    self.restore_to, self.step = restore_to, step
    self.held = set()

  def restore_latest(self):
    if self.restore_to is None:
      return checkpoints.Restored(None, [])
    self.step.assign(self.restore_to)
    return checkpoints.Restored(f'ckpt-{self.restore_to}', [])

  def latest(self):
    return f'ckpt-{self.saved[-1]}' if self.saved else None

  def save(self, step):
    self.saved.append(step)
    self.last_saved_step = step
    return f'ckpt-{step}'

  def hold(self, step):
    path = self.save(step) if self.last_saved_step != step else f'ckpt-{step}'
    self.held.add(path)
    return path

  def release(self, path):
    self.held.remove(path)


class FakeEvaluator:
  """Quality as a function of the step; with `lag`, asynchronous: each
  result is known `lag` loop ends after the one that started it."""

  def __init__(self, step, quality_at, lag=0):
    self.step, self.quality_at, self.lag = step, quality_at, lag
    self.asynchronous = lag > 0
    self.compiled = False
    self.pending = []  # [eval step, loop ends to go]

  def compile(self):
    self.compiled = True

  def start(self, step):
    assert step == int(self.step.numpy())  # The weights of that step.
    self.pending.append([step, self.lag])

  def results(self, *, wait):
    out = []
    while self.pending and (wait or self.pending[0][1] <= 0):
      step, _ = self.pending.pop(0)
      out.append(evaluator_lib.EvalResult(step, self.quality_at(step),
                                          {'examples': 10.0}))
    for p in self.pending:
      p[1] -= 1
    return out

  def cancel(self):
    steps = [p[0] for p in self.pending]
    self.pending.clear()
    return steps


def make(*, quality_at=lambda s: s / 100, losses=None, restore_to=None,
         extra_actions=(), higher_is_better=True, target=0.5,
         stop_at_target=True, lag=0, **schedule):
  step = tf.Variable(0, dtype=tf.int64)
  started_at = []

  def train_loop(iterator, num_steps):
    del iterator
    n = int(num_steps)
    step.assign_add(n)
    return float('nan') if losses and int(step.numpy()) in losses else 1.0

  schedule = controller_lib.RunSchedule(**{
      'global_batch_size': 8, 'steps_per_loop': 2, 'eval_every_steps': 4,
      'train_steps': 20, **schedule})
  checkpointer = FakeCheckpointer(restore_to, step)
  seen = []
  run_actions = [
      actions.NanGuard(checkpointer),
      actions.TargetTest(target=target, higher_is_better=higher_is_better,
                         first_eval_step=schedule.first_eval_step,
                         stop_at_target=stop_at_target),
      actions.CheckpointSaver(checkpointer, schedule.checkpoint_every_steps),
      seen.append, *extra_actions]
  c = controller_lib.Controller(
      train_loop=train_loop,
      make_train_iterator=lambda start: started_at.append(start) or 'it',
      evaluator=FakeEvaluator(step, quality_at, lag), step=step,
      schedule=schedule, total_steps=schedule.total_steps(0),
      steps_per_epoch=4, checkpointer=checkpointer, actions=run_actions,
      learning_rate=lambda s: 0.1)
  return c, checkpointer, seen, started_at


def test_stops_at_the_first_eval_reaching_the_target_and_saves_there():
  c, ckpt, seen, _ = make(checkpoint_every_steps=0)
  result = c.run()
  # Evals every 4 steps: quality 0.04, 0.08, ... reaches 0.5? never by 20.
  assert result.status == 'aborted' and result.step == 20
  c, ckpt, seen, _ = make(quality_at=lambda s: s / 10)
  result = c.run()
  assert (result.status, result.step, result.quality) == ('success', 8, 0.8)
  assert [e[0] for e in result.evals] == [4, 8]
  assert ckpt.saved == [8]  # The final state, once.


def test_lower_is_better_targets():
  c, _, _, _ = make(quality_at=lambda s: 1.0 - s / 10, target=0.45,
                    higher_is_better=False)
  result = c.run()
  assert (result.status, result.step) == ('success', 8)


def test_no_eval_before_first_eval_step_except_at_the_end():
  c, _, _, _ = make(first_eval_step=10, quality_at=lambda s: 1.0)
  result = c.run()
  assert [e[0] for e in result.evals] == [12]
  c, _, _, _ = make(first_eval_step=30, quality_at=lambda s: 1.0)
  result = c.run()
  # The budget's end evaluates, but before the minimum: not a success.
  assert [e[0] for e in result.evals] == [20]
  assert result.status == 'aborted'


def test_an_eval_offset_moves_every_evaluation_and_block():
  c, _, _, _ = make(eval_offset_steps=2, quality_at=lambda s: 0.0)
  result = c.run()
  assert [e[0] for e in result.evals] == [2, 6, 10, 14, 18, 20]


def test_periodic_checkpoints_and_no_duplicate_final_save():
  c, ckpt, _, _ = make(checkpoint_every_steps=4, quality_at=lambda s: 0.0)
  c.run()
  assert ckpt.saved == [4, 8, 12, 16, 20]


def test_continuing_past_the_target_keeps_success():
  c, _, _, _ = make(stop_at_target=False, quality_at=lambda s: s / 10)
  result = c.run()
  assert (result.status, result.step) == ('success', 20)


def test_nan_loss_aborts_before_saving_and_names_the_last_checkpoint():
  c, ckpt, seen, _ = make(checkpoint_every_steps=4, losses={10})
  with pytest.raises(FloatingPointError, match='step 10.*ckpt-8'):
    c.run()
  assert ckpt.saved == [4, 8]
  assert isinstance(seen[-1], ev.RunEnd) and seen[-1].status == 'aborted'


def test_resume_restores_then_positions_the_input_at_that_step():
  c, _, seen, started_at = make(restore_to=12, quality_at=lambda s: 0.0)
  result = c.run()
  assert started_at == [12]
  assert [e[0] for e in result.evals] == [16, 20]
  assert isinstance(seen[0], ev.InitEnd) and seen[0].step == 12


def test_actions_see_the_run_in_order():
  c, _, seen, _ = make(train_steps=8, quality_at=lambda s: 0.0)
  c.run()
  kinds = [type(e).__name__ for e in seen]
  assert kinds == ['InitEnd', 'RunStart',
                   'LoopStart', 'LoopEnd', 'LoopStart', 'LoopEnd',
                   'EvalStart', 'EvalEnd',
                   'LoopStart', 'LoopEnd', 'LoopStart', 'LoopEnd',
                   'EvalStart', 'EvalEnd', 'RunEnd']
  assert [e.next_eval_step for e in seen if isinstance(e, ev.LoopStart)] == [
      4, 4, 8, 8]


def test_a_user_action_can_stop_the_run():
  stop_at_6 = lambda e: (ev.Decision(stop=True) if isinstance(e, ev.LoopEnd)
                         and e.step == 6 else None)
  c, _, _, _ = make(extra_actions=[stop_at_6], quality_at=lambda s: 0.0)
  assert c.run().step == 6


@pytest.mark.parametrize('schedule, message', [
    (dict(eval_every_steps=5), r'`eval_every_steps` \(5\) must be a multiple '
     r'of `steps_per_loop` \(2\)'),
    (dict(checkpoint_every_steps=3), r'`checkpoint_every_steps` \(3\)'),
    (dict(steps_per_loop=0), '`steps_per_loop` must be positive'),
    (dict(eval_offset_steps=3), r'`eval_offset_steps` \(3\) must be a '
     r'multiple of `steps_per_loop` \(2\) below `eval_every_steps` \(4\)'),
    (dict(eval_offset_steps=4), r'`eval_offset_steps` \(4\)'),
])
def test_schedule_mistakes_are_named(schedule, message):
  with pytest.raises(ValueError, match=message):
    make(**schedule)


def test_epochs_need_data_that_knows_its_epoch_size():
  s = controller_lib.RunSchedule(global_batch_size=8, steps_per_loop=1,
                                 eval_every_steps=1, train_epochs=2.5)
  assert s.total_steps(steps_per_epoch=10) == 25
  with pytest.raises(ValueError, match='TRAIN_STEPS'):
    s.total_steps(steps_per_epoch=0)


def test_mlperf_log_follows_the_events(tmp_path):
  path = tmp_path / 'mlperf.log'
  log = mlperf_log.MlperfLog(
      path=str(path), benchmark='resnet', submission=mlperf_log.Submission(),
      epoch_num=lambda step: step / 4)  # 4 steps an epoch.
  log.hyperparameters = {'global_batch_size': 8}
  ev.notify([log], ev.InitStart())
  c, _, _, _ = make(train_steps=8, quality_at=lambda s: s / 10,
                    extra_actions=[log])
  c.run()
  lines = [json.loads(l.split(':::MLLOG ')[1]) for l in path.read_text(
  ).splitlines()]
  keys = [l['key'] for l in lines]
  assert keys[:6] == ['submission_benchmark', 'submission_org',
                      'submission_division', 'submission_status',
                      'submission_platform', 'cache_clear']
  assert keys[6:] == ['init_start', 'global_batch_size', 'init_stop',
                      'run_start', 'block_start', 'block_stop', 'eval_start',
                      'eval_accuracy', 'eval_stop', 'block_start',
                      'block_stop', 'eval_start', 'eval_accuracy', 'eval_stop',
                      'run_stop']
  blocks = [{k: l['metadata'][k] for k in ('first_epoch_num', 'epoch_count')}
            for l in lines if l['key'] == 'block_start']
  assert blocks == [{'first_epoch_num': 0.0, 'epoch_count': 1.0},
                    {'first_epoch_num': 1.0, 'epoch_count': 1.0}]
  assert lines[-1]['metadata']['status'] == 'success'


def new_log(path):
  return mlperf_log.MlperfLog(
      path=str(path), benchmark='resnet', submission=mlperf_log.Submission(),
      epoch_num=lambda step: step / 4)


def keys_of(path):
  return [json.loads(l.split(':::MLLOG ')[1])['key']
          for l in path.read_text().splitlines()]


def test_a_start_that_fails_writes_no_mlperf_log(tmp_path):
  path = tmp_path / 'mlperf.log'
  path.write_text('the earlier run\n')
  log = new_log(path)
  ev.notify([log], ev.InitStart())
  log.close()  # Failed before InitEnd.
  assert path.read_text() == 'the earlier run\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['mlperf.log']


def test_each_attempt_gets_its_own_log_and_a_resumed_one_says_so(tmp_path):
  path = tmp_path / 'mlperf.log'
  first = new_log(path)
  ev.notify([first], ev.InitStart())
  make(train_steps=8, extra_actions=[first])[0].run()
  for attempt in (2, 3):
    log = new_log(path)
    ev.notify([log], ev.InitStart())
    c, _, _, _ = make(train_steps=12, restore_to=8, extra_actions=[log])
    c.run()
    assert (tmp_path / f'mlperf.log.{attempt - 1}').exists()
  assert keys_of(tmp_path / 'mlperf.log.1').count('init_start') == 1
  assert 'resumed_from_checkpoint' not in keys_of(tmp_path / 'mlperf.log.1')
  keys = keys_of(path)
  assert keys.count('init_start') == 1 and keys.count('run_stop') == 1
  assert keys.index('init_start') < keys.index('resumed_from_checkpoint') < (
      keys.index('init_stop'))
  resumed = [json.loads(l.split(':::MLLOG ')[1]) for l in
             path.read_text().splitlines() if 'resumed_from' in l][0]
  assert resumed['value'] == 'ckpt-8' and resumed['metadata']['step'] == 8


# Asynchronous evaluations (training/evaluator.py): the Controller's side.


def test_an_async_result_stops_the_run_where_it_is_known():
  # Evals every 4 steps, loops of 2, results 1 loop end late: the eval at
  # step 8 (0.8) is known at step 10, where the run stops.
  c, ckpt, seen, _ = make(quality_at=lambda s: s / 10, lag=1)
  result = c.run()
  assert (result.status, result.step, result.quality) == ('success', 10, 0.8)
  assert [e[0] for e in result.evals] == [4, 8]
  ends = [e for e in seen if isinstance(e, ev.EvalEnd)]
  assert [(e.step, e.known_at_step, e.checkpoint) for e in ends] == [
      (4, 6, 'ckpt-4'), (8, 10, 'ckpt-8')]
  # Each eval's weights were saved at its step; the ones that met the
  # target stay held (out of rotation); the final state is saved too.
  assert ckpt.saved == [4, 8, 10] and ckpt.held == {'ckpt-8'}


def test_the_budget_end_waits_for_every_async_result():
  c, ckpt, _, _ = make(quality_at=lambda s: 1.0 if s == 20 else 0.0, lag=3,
                       train_steps=20)
  result = c.run()
  assert (result.status, result.step) == ('success', 20)
  assert [e[0] for e in result.evals] == [4, 8, 12, 16, 20]
  assert ckpt.held == {'ckpt-20'}


def test_evaluations_still_computing_at_a_stop_are_dropped_and_named(capsys):
  # The eval at 4 (quality 1) is known at 10; the one at 8 is still running.
  c, ckpt, _, _ = make(quality_at=lambda s: 1.0 if s == 4 else 0.0, lag=3)
  result = c.run()
  assert (result.status, result.step) == ('success', 10)
  assert [e[0] for e in result.evals] == [4]
  assert ('dropped the evaluations still computing (steps 8): the run '
          'stopped at step 10.') in capsys.readouterr().out
  assert ckpt.held == {'ckpt-4'}  # Step 8's returned to the rotation.


def test_an_async_mlperf_log_passes_its_events_in_order(tmp_path):
  path = tmp_path / 'mlperf.log'
  log = new_log(path)
  log.hyperparameters = {'global_batch_size': 8}
  ev.notify([log], ev.InitStart())
  c, _, _, _ = make(train_steps=12, quality_at=lambda s: s / 10, lag=1,
                    extra_actions=[log])
  c.run()
  lines = [json.loads(l.split(':::MLLOG ')[1]) for l in path.read_text(
  ).splitlines()]
  events = [(l['key'], l['metadata'].get('epoch_num')) for l in lines
            if l['key'].startswith(('eval', 'run_stop', 'block'))]
  # The eval of step 8 (epoch 2) is logged with its epoch when known, in
  # the block after it; run_stop follows at once.
  assert events == [
      ('block_start', None), ('block_stop', None), ('eval_start', 1.0),
      ('block_start', None), ('eval_accuracy', 1.0), ('eval_stop', 1.0),
      ('block_stop', None), ('eval_start', 2.0), ('block_start', None),
      ('eval_accuracy', 2.0), ('eval_stop', 2.0), ('run_stop', None)]
