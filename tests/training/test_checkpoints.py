"""The Checkpointer on real files: rotation, damaged checkpoints set aside,
a stale or lost state file, the refusal to restart silently from step 0."""

import os

import numpy as np
import pytest
import tensorflow as tf

from training import checkpoints


def make(model_dir, *, max_to_keep=3, restart=False, chief=True, worker_id=0):
  """A Checkpointer over five small variables and a step."""
  values = [tf.Variable(np.zeros([500], np.float32)) for _ in range(5)]
  step = tf.Variable(0, dtype=tf.int64)
  saver = checkpoints.Checkpointer(
      model_dir=str(model_dir), chief=chief, worker_id=worker_id,
      max_to_keep=max_to_keep, restart=restart, values=values, step=step)
  return saver, values, step


def save_steps(model_dir, steps, **kwargs):
  """Saves at each step, the values equal to the step."""
  saver, values, step = make(model_dir, **kwargs)
  for s in steps:
    step.assign(s)
    for v in values:
      v.assign(tf.fill(v.shape, float(s)))
    saver.save(s)
  return saver


def index_files(folder):
  return sorted(f for f in os.listdir(folder) if f.endswith('.index'))


def truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def data_file(model_dir, step):
  return os.path.join(model_dir, 'checkpoints',
                      f'ckpt-{step}.data-00000-of-00001')


def test_saves_restores_rotates_and_refuses_another_model(tmp_path):
  saver = save_steps(tmp_path, [2, 4, 6], max_to_keep=2)
  assert saver.last_saved_step == 6
  assert index_files(tmp_path / 'checkpoints') == ['ckpt-4.index',
                                                   'ckpt-6.index']
  assert tf.train.latest_checkpoint(str(tmp_path / 'checkpoints')).endswith(
      'ckpt-6')
  again, values, step = make(tmp_path)
  restored = again.restore_latest()
  assert restored.path.endswith('ckpt-6') and restored.skipped == []
  assert int(step.numpy()) == 6 and float(values[3][0]) == 6.0
  other = checkpoints.Checkpointer(model_dir=str(tmp_path), chief=True,
                                   c=tf.Variable(1.0))
  with pytest.raises(ValueError, match='different model'):
    other.restore_latest()


def test_an_empty_model_dir_starts_at_step_0(tmp_path):
  saver, _, step = make(tmp_path)
  assert saver.restore_latest() == checkpoints.Restored(None, [])
  assert int(step.numpy()) == 0


def test_a_truncated_checkpoint_is_set_aside_and_the_older_one_restored(
    tmp_path):
  save_steps(tmp_path, [10, 20])
  truncate(data_file(tmp_path, 20))
  saver, values, step = make(tmp_path)
  restored = saver.restore_latest()
  assert restored.path.endswith('ckpt-10') and int(step.numpy()) == 10
  assert all(float(v[0]) == 10.0 for v in values)
  [line] = restored.skipped
  assert 'ckpt-20: cannot be read' in line and 'Read less bytes' in line
  aside = tmp_path / 'checkpoints' / 'damaged' / 'ckpt-20'
  assert f'set aside in {aside}' in line
  assert sorted(os.listdir(aside)) == [
      'ckpt-20.data-00000-of-00001', 'ckpt-20.index', 'reason.txt']
  assert 'Read less bytes' in (aside / 'reason.txt').read_text()
  # The state file now names the restored checkpoint.
  assert tf.train.latest_checkpoint(str(tmp_path / 'checkpoints')).endswith(
      'ckpt-10')


def test_a_flipped_byte_fails_its_checksum_and_is_set_aside(tmp_path):
  save_steps(tmp_path, [10, 20])
  flip_a_byte(data_file(tmp_path, 20))
  saver, _, step = make(tmp_path)
  restored = saver.restore_latest()
  assert int(step.numpy()) == 10
  assert 'DataLossError' in restored.skipped[0]


def test_a_deleted_latest_checkpoint_resumes_from_the_older_one(tmp_path):
  # The "obvious repair" that used to restart silently from step 0.
  save_steps(tmp_path, [10, 20])
  for name in os.listdir(tmp_path / 'checkpoints'):
    if name.startswith('ckpt-20'):
      os.remove(tmp_path / 'checkpoints' / name)
  saver, _, step = make(tmp_path)
  restored = saver.restore_latest()
  assert int(step.numpy()) == 10
  assert 'ckpt-20: listed in the state file but its files are gone' in (
      restored.skipped[0])


@pytest.mark.parametrize('state_file', ['kept', 'lost'])
def test_a_deleted_index_sets_the_data_aside_before_a_save_overwrites_it(
    tmp_path, state_file):
  save_steps(tmp_path, [10, 20])
  folder = tmp_path / 'checkpoints'
  os.remove(folder / 'ckpt-20.index')
  if state_file == 'lost':
    os.remove(folder / 'checkpoint')
  data = sorted(f for f in os.listdir(folder) if f.startswith('ckpt-20.'))
  assert data == ['ckpt-20.data-00000-of-00001']
  saved = (folder / data[0]).read_bytes()
  saver, values, step = make(tmp_path)
  restored = saver.restore_latest()
  assert int(step.numpy()) == 10
  aside = folder / 'damaged' / 'ckpt-20'
  assert restored.skipped == [
      f'{folder}/ckpt-20: its .index file is missing (1 other file left); '
      f'set aside in {aside}']
  assert sorted(os.listdir(aside)) == [data[0], 'reason.txt']
  assert (aside / data[0]).read_bytes() == saved
  assert 'its .index file is missing' in (aside / 'reason.txt').read_text()
  # The resumed run saves step 20 again beside it, not over it.
  step.assign(20)
  for v in values:
    v.assign(tf.fill(v.shape, 7.0))
  saver.save(20)
  assert (aside / data[0]).read_bytes() == saved
  assert index_files(folder) == ['ckpt-10.index', 'ckpt-20.index']


def test_a_non_chief_leaves_the_index_less_data_to_the_chief(tmp_path):
  save_steps(tmp_path, [10, 20])
  os.remove(tmp_path / 'checkpoints' / 'ckpt-20.index')
  saver, _, step = make(tmp_path, chief=False, worker_id=1)
  restored = saver.restore_latest()
  assert int(step.numpy()) == 10
  assert restored.skipped[0].endswith('the chief sets it aside')
  assert 'ckpt-20.data-00000-of-00001' in os.listdir(tmp_path / 'checkpoints')


def test_a_lost_or_garbled_state_file_hides_no_checkpoint(tmp_path):
  save_steps(tmp_path, [10, 20])
  (tmp_path / 'checkpoints' / 'checkpoint').write_text('not a { proto')
  saver, _, step = make(tmp_path)
  assert saver.restore_latest().path.endswith('ckpt-20')
  assert int(step.numpy()) == 20
  os.remove(tmp_path / 'checkpoints' / 'checkpoint')
  saver, _, step = make(tmp_path)
  assert saver.restore_latest().path.endswith('ckpt-20')


def test_no_restorable_checkpoint_refuses_step_0_unless_told(tmp_path):
  save_steps(tmp_path, [10])
  truncate(data_file(tmp_path, 10))
  saver, values, step = make(tmp_path)
  with pytest.raises(ValueError) as e:
    saver.restore_latest()
  message = str(e.value)
  assert 'ckpt-10: cannot be read' in message and '--gin.RESTART=True' in message
  assert 'Nothing was deleted' in message
  aside = tmp_path / 'checkpoints' / 'damaged' / 'ckpt-10'
  assert 'ckpt-10.index' in os.listdir(aside)
  # A rerun still refuses: the set-aside checkpoint counts as found.
  saver, _, _ = make(tmp_path)
  with pytest.raises(ValueError, match='set aside by an earlier run'):
    saver.restore_latest()
  # Told to, it starts from step 0 with the variables as built: the failed
  # read assigned nothing.
  saver, values, step = make(tmp_path, restart=True)
  for v in values:
    v.assign(tf.fill(v.shape, -1.0))
  assert saver.restore_latest() == checkpoints.Restored(None, [])
  assert int(step.numpy()) == 0 and all(float(v[0]) == -1.0 for v in values)
  assert 'ckpt-10.index' in os.listdir(aside)  # Still kept.


def flip_a_byte(path):
  with open(path, 'r+b') as f:
    f.seek(1000)
    byte = f.read(1)
    f.seek(1000)
    f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize('damage', [truncate, flip_a_byte])
def test_a_failed_restore_assigns_nothing(tmp_path, damage):
  save_steps(tmp_path, [10])
  damage(data_file(tmp_path, 10))
  saver, values, step = make(tmp_path, restart=True)
  for v in values:
    v.assign(tf.fill(v.shape, 7.0))
  step.assign(3)
  saver.restore_latest()
  assert int(step.numpy()) == 3
  assert all(np.all(v.numpy() == 7.0) for v in values)


def test_rotation_deletes_only_this_runs_older_checkpoints(tmp_path):
  save_steps(tmp_path, [10, 20, 30], max_to_keep=3)
  truncate(data_file(tmp_path, 30))
  # A checkpoint this run's state file does not list (copied in by hand).
  folder = tmp_path / 'checkpoints'
  for name in os.listdir(folder):
    if name.startswith('ckpt-10.'):
      data = (folder / name).read_bytes()
      (folder / name.replace('ckpt-10', 'ckpt-5')).write_bytes(data)
  saver, values, step = make(tmp_path, max_to_keep=2)
  assert saver.restore_latest().path.endswith('ckpt-20')
  for s in (30, 40, 50):
    step.assign(s)
    saver.save(s)
  # Keeps the newest two of its own line; the unlisted ckpt-5 and the
  # damaged ckpt-30 (set aside) are untouched.
  assert index_files(folder) == ['ckpt-40.index', 'ckpt-5.index',
                                 'ckpt-50.index']
  assert 'ckpt-30.index' in os.listdir(folder / 'damaged' / 'ckpt-30')


def test_a_second_damage_of_one_step_gets_its_own_folder(tmp_path):
  save_steps(tmp_path, [10, 20])
  truncate(data_file(tmp_path, 20))
  make(tmp_path)[0].restore_latest()
  saver, _, step = make(tmp_path)
  step.assign(20)
  saver.save(20)
  truncate(data_file(tmp_path, 20))
  assert make(tmp_path)[0].restore_latest().path.endswith('ckpt-10')
  assert sorted(os.listdir(tmp_path / 'checkpoints' / 'damaged')) == [
      'ckpt-20', 'ckpt-20.2']


def test_non_chief_writes_to_scratch_and_removes_it(tmp_path):
  saver, _, _ = make(tmp_path, chief=False, worker_id=1)
  saver.save(1)
  assert not os.path.exists(tmp_path / 'checkpoints')
  assert not os.path.exists(tmp_path / 'worker_scratch')
  # Another worker's scratch being written keeps the folder.
  os.makedirs(tmp_path / 'worker_scratch' / 'checkpoints-2')
  saver.save(2)
  assert os.listdir(tmp_path / 'worker_scratch') == ['checkpoints-2']


def test_non_chief_skips_a_damaged_checkpoint_without_moving_it(tmp_path):
  save_steps(tmp_path, [10, 20])
  truncate(data_file(tmp_path, 20))
  saver, _, step = make(tmp_path, chief=False, worker_id=1)
  restored = saver.restore_latest()
  assert int(step.numpy()) == 10
  assert 'the chief sets it aside' in restored.skipped[0]
  assert 'ckpt-20.index' in os.listdir(tmp_path / 'checkpoints')


def test_a_held_checkpoint_outlives_rotation_until_released(tmp_path):
  # An asynchronous evaluation's weights: held at its step, released when
  # its result did not meet the target.
  saver, values, step = make(tmp_path, max_to_keep=1)
  for s in (4, 6, 8):
    step.assign(s)
    for v in values:
      v.assign(tf.fill(v.shape, float(s)))
    if s == 4:
      held = saver.hold(s)
    else:
      saver.save(s)
  folder = tmp_path / 'checkpoints'
  assert index_files(folder) == ['ckpt-4.index', 'ckpt-8.index']
  again = saver.hold(8)  # Just saved: held, not saved again.
  assert again.endswith('ckpt-8') and saver.last_saved_step == 8
  saver.release(again)
  assert index_files(folder) == ['ckpt-4.index', 'ckpt-8.index']
  # The best-checkpoint folder takes a copy of the held weights.
  best = checkpoints.Checkpointer(model_dir=str(tmp_path), chief=True,
                                  folder='best', max_to_keep=1,
                                  values=[tf.Variable(np.zeros([500],
                                                               np.float32))
                                          for _ in range(5)],
                                  step=tf.Variable(0, dtype=tf.int64))
  best.adopt(held, 4)
  reader = tf.train.load_checkpoint(str(tmp_path / 'best'))
  assert reader.get_tensor('step/.ATTRIBUTES/VARIABLE_VALUE') == 4
  saver.release(held)
  assert index_files(folder) == ['ckpt-8.index']
  assert tf.train.latest_checkpoint(str(folder)).endswith('ckpt-8')
