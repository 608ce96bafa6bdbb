"""Checkpoints a run can trust: damaged ones set aside, rotation kept safe.

Restore walks the run's checkpoints newest first. One that fails to read
(truncated or missing data file, unreadable index, checksum mismatch) is
named, moved to `<folder>/damaged/` with the reason beside it (never
deleted), and the next older one is tried. A run that finds checkpoints but
can restore none refuses to start from step 0 unless told to (`restart`).
A checkpoint of another model or configuration is an error, not damage.

Rotation deletes only checkpoints of this run's line (the state file's list,
as restored, plus what this run wrote), and only after the checkpoint just
written reads back, so the last good checkpoint is never the one deleted.

With a remote model_dir and an uploader (training/uploads.py) a save writes
the checkpoint to a local staging folder, which takes the training thread
seconds, and the uploader copies it to model_dir (data files first, the
index last), then writes the state file, reads it back and rotates, while
training goes on; a storage outage delays that, retried, instead of
stopping the run. A newer save replaces an older one still waiting to
upload (a held one excepted), so an outage costs one checkpoint's space.

Under MultiWorkerMirroredStrategy every worker must take part in a save; only
the chief writes into model_dir, the others write to a scratch folder they
delete afterwards. A mesh over processes (DTensor) writes each checkpoint
collectively: every process names the same files in model_dir. Every worker
restores from the chief's folder; only the chief moves damaged checkpoints
aside.
"""

import dataclasses
import os
import re
import time

import tensorflow as tf

from core import error_text
from training import uploads as uploads_lib
from training import watchdog as watchdog_lib

DAMAGED_FOLDER = 'damaged'
_PREFIX = re.compile(r'ckpt-(\d+)$')
# Read failures that mean the files are bad. Transient storage errors
# (unavailable, deadline, permission) are not damage: they propagate.
_DAMAGE = (IndexError, tf.errors.DataLossError, tf.errors.NotFoundError,
           tf.errors.OutOfRangeError)


def _is_damage(error: BaseException) -> bool:
  # A missing data file or an index that is not an SSTable comes back as a
  # plain OpError with code UNKNOWN.
  return isinstance(error, _DAMAGE) or (
      type(error) is tf.errors.OpError and  # pylint: disable=unidiomatic-typecheck
      error.error_code == tf.errors.UNKNOWN)


def _first_line(error: BaseException) -> str:
  return error_text.one_line(error, limit=300)


def _remove_if_empty(folder: str) -> None:
  """Removes a local folder that is empty (another worker's scratch in it
  keeps it); object stores have no empty folders to leave behind."""
  if '://' in folder:
    return
  try:
    os.rmdir(folder)
  except OSError:
    pass  # Not empty, or already gone.


def step_of(prefix: str) -> int:
  match = _PREFIX.search(os.path.basename(prefix))
  return int(match.group(1)) if match else -1


@dataclasses.dataclass
class Restored:
  """What restore found: the path restored (None: starting at step 0) and
  one line per checkpoint skipped, saying why and where it went."""
  path: str | None
  skipped: list[str]


class Checkpointer:
  """Saves and restores the training state of one run."""

  def __init__(self, *, model_dir: str, chief: bool, worker_id: int = 0,
               max_to_keep: int = 3, folder: str = 'checkpoints',
               restart: bool = False, before_save=None,
               collective_save: bool = False, watchdog=None,
               uploads: uploads_lib.Uploader | None = None,
               staging: str | None = None, resumable: bool = True,
               **objects):
    """Args:
      model_dir: the run's folder; checkpoints go to `<model_dir>/<folder>`.
      chief: whether this worker writes the real checkpoints.
      worker_id: names the scratch folder of a non-chief worker.
      max_to_keep: checkpoints of this run kept on disk.
      folder: the checkpoints' folder inside model_dir.
      restart: start from step 0 when checkpoints exist but none restores
        (they stay on disk, set aside).
      before_save: called on every worker before each save (sharded
        optimizer slots gather their shards).
      watchdog: a training/watchdog.Watchdog naming a save or restore
        that stalls (None: none).
      uploads: a training/uploads.Uploader for a remote model_dir: saves go
        to `staging` and upload in the background (None: saves write
        model_dir directly).
      staging: a local folder of this checkpointer's own (with uploads).
      resumable: its checkpoints are what a rerun resumes from (the run's
        state; not the best weights alone), named as the last durable one.
      collective_save: the workers write each checkpoint together (a mesh
        over processes: DTensor's save is collective and every process must
        name the same files); the chief alone keeps the books (state file,
        rotation, read-back).
      **objects: trackables to save (model, optimizer slots, step, ...).
    """
    if max_to_keep < 1:
      raise ValueError(f'`max_checkpoints` must be at least 1, got '
                       f'{max_to_keep}.')
    self.directory = os.path.join(model_dir, folder)
    self.chief, self.max_to_keep, self.restart = chief, max_to_keep, restart
    self.last_saved_step = None
    self._before_save = before_save
    self._watch = (watchdog or watchdog_lib.Watchdog(warn_after=0)).watch
    self._objects = objects
    self.checkpoint = tf.train.Checkpoint(**objects)
    self._uploads = None if collective_save else uploads
    self._resumable = resumable
    if self._uploads and not staging:
      raise ValueError('A Checkpointer with uploads needs a staging folder.')
    if self._uploads:
      self._write_dir = staging  # Local; uploaded by the chief alone.
    else:
      self._write_dir = (self.directory if chief or collective_save else
                         os.path.join(model_dir, 'worker_scratch',
                                      f'{folder}-{worker_id}'))
    self._kept = [p for p in self._listed() if self._exists(p)]
    self._held = set()  # Kept out of rotation (hold / release).

  # -- What is on disk ----------------------------------------------------------

  def _listed(self) -> list[str]:
    """The state file's checkpoints, oldest first ([] if absent or bad)."""
    try:
      state = tf.train.get_checkpoint_state(self.directory)
    except (tf.errors.OpError, ValueError) as e:  # A damaged state file.
      print(f'warning: cannot read {self.directory}/checkpoint '
            f'({_first_line(e)}); looking for checkpoint files instead.',
            flush=True)
      return []
    if state is None:
      return []
    return [os.path.join(self.directory, os.path.basename(p))
            for p in state.all_model_checkpoint_paths]

  @staticmethod
  def _exists(prefix: str) -> bool:
    return tf.io.gfile.exists(prefix + '.index')

  def _candidates(self) -> list[str]:
    """Checkpoints to try, newest first: listed ones and any `ckpt-N.index`
    on disk (a lost or stale state file hides nothing)."""
    on_disk = [p[:-len('.index')] for p in
               tf.io.gfile.glob(os.path.join(self.directory, 'ckpt-*.index'))]
    # Data files whose index is gone: damage to set aside too.
    on_disk += [p.rsplit('.data-', 1)[0] for p in tf.io.gfile.glob(
        os.path.join(self.directory, 'ckpt-*.data-*'))]
    found = {p for p in self._listed() + on_disk if step_of(p) >= 0}
    return sorted(found, key=step_of, reverse=True)

  def set_aside(self) -> list[str]:
    """Checkpoints earlier restores moved to the damaged folder."""
    folder = os.path.join(self.directory, DAMAGED_FOLDER)
    if not tf.io.gfile.isdir(folder):
      return []
    return sorted(os.path.join(folder, name)
                  for name in tf.io.gfile.listdir(folder))

  def latest(self) -> str | None:
    return self._kept[-1] if self._kept else None

  # -- Restore ----------------------------------------------------------------

  def _values(self) -> list:
    root = tf.train.Checkpoint(**self._objects)  # The view holds a weakref.
    return [(v, v.numpy()) for v in tf.train.TrackableView(root).descendants()
            if isinstance(v, tf.Variable)]

  def _move_aside(self, prefix: str, reason: str) -> str:
    """Moves a checkpoint's files to damaged/<name>[.k]/ with reason.txt."""
    name = os.path.basename(prefix)
    target = os.path.join(self.directory, DAMAGED_FOLDER, name)
    k = 1
    while tf.io.gfile.exists(target):
      k += 1
      target = os.path.join(self.directory, DAMAGED_FOLDER, f'{name}.{k}')
    tf.io.gfile.makedirs(target)
    for path in tf.io.gfile.glob(prefix + '.*'):
      tf.io.gfile.rename(path, os.path.join(target, os.path.basename(path)))
    with tf.io.gfile.GFile(os.path.join(target, 'reason.txt'), 'w') as f:
      f.write(f'{time.strftime("%Y-%m-%d %H:%M:%S")} restore of {prefix} '
              f'failed: {reason}\n')
    return target

  def restore_latest(self) -> Restored:
    """Restores the newest checkpoint that reads, setting damaged ones aside.

    Returns:
      The restored path (None when starting from step 0) and what was
      skipped.

    Raises:
      ValueError: a checkpoint belongs to another model or configuration,
        or checkpoints exist but none restores and `restart` is off.
    """
    skipped, earlier = [], self.set_aside()
    # On one host a failed read assigns nothing (one RestoreV2 before any
    # assignment); across hosts the hosts read in turn. Starting over must
    # start from the built values, so keep them when that may happen.
    built = self._values() if self.restart else None
    for prefix in self._candidates():
      if not self._exists(prefix):
        left = tf.io.gfile.glob(prefix + '.*')
        if not left:
          skipped.append(f'{prefix}: listed in the state file but its files '
                         'are gone')
          continue
        # Its data without the index cannot be read, and a save at that step
        # would write over it: set aside like any other damage.
        reason = (f'its .index file is missing ({len(left)} other file'
                  f'{"s" if len(left) > 1 else ""} left)')
        where = (f'set aside in {self._move_aside(prefix, reason)}'
                 if self.chief else 'the chief sets it aside')
        skipped.append(f'{prefix}: {reason}; {where}')
        continue
      # A fresh Checkpoint per attempt: a failed restore leaves pending
      # reads on its Checkpoint that the next restore would retry.
      attempt = tf.train.Checkpoint(**self._objects)
      try:
        with self._watch(f'restoring {prefix}'):
          attempt.restore(prefix).assert_consumed()
      except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
        raise ValueError(
            f'{prefix} is a checkpoint of a different model or configuration '
            f'than this run ({_first_line(e)}). Use a new --model_dir, or '
            f'delete {self.directory} to start over.') from e
      except Exception as e:  # pylint: disable=broad-except
        if not _is_damage(e):
          raise
        reason = f'{type(e).__name__}: {_first_line(e)}'
        where = (f'set aside in {self._move_aside(prefix, reason)}'
                 if self.chief else 'the chief sets it aside')
        skipped.append(f'{prefix}: cannot be read ({reason}); {where}')
        continue
      self.checkpoint = attempt  # It holds the restored save_counter.
      if self._uploads and self._resumable:
        self._uploads.note_durable(
            f'{prefix} (step {step_of(prefix)}, restored at the start)',
            written=False)
      self._kept = [p for p in self._kept
                    if step_of(p) < step_of(prefix) and self._exists(p)]
      self._kept.append(prefix)
      if self.chief and skipped:
        self._write_state()
      return Restored(prefix, skipped)
    self._kept = []
    if self.chief and skipped:
      self._write_state()
    if built and skipped:
      for variable, value in built:
        variable.assign(value)
    found = skipped + [f'{p} (set aside by an earlier run)' for p in earlier]
    if found and not self.restart:
      raise ValueError(
          f'{self.directory} holds checkpoints but none can be restored: '
          f'{"; ".join(found)}. Nothing was deleted. To start this run over '
          'from step 0, rerun with --gin.RESTART=True; or use a '
          'new --model_dir.')
    return Restored(None, skipped)

  # -- Save -------------------------------------------------------------------

  def _write_state(self) -> None:
    """Writes TensorFlow's `checkpoint` state file (text CheckpointState,
    names relative to the folder), so tf.train.latest_checkpoint and
    TensorBoard read it; atomically, by a rename."""
    names = [os.path.basename(p) for p in self._kept]
    lines = ([f'model_checkpoint_path: "{names[-1]}"'] if names else []) + [
        f'all_model_checkpoint_paths: "{name}"' for name in names]
    state = os.path.join(self.directory, 'checkpoint')
    temporary = f'{state}.tmp-{os.getpid()}'
    with tf.io.gfile.GFile(temporary, 'w') as f:
      f.write('\n'.join(lines) + '\n')
    tf.io.gfile.rename(temporary, state, overwrite=True)

  @staticmethod
  def _reads_back(prefix: str) -> bool:
    try:
      tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
      return bool(tf.io.gfile.glob(prefix + '.data-*'))
    except Exception:  # pylint: disable=broad-except
      return False

  def save(self, step: int, *, held: bool = False) -> str:
    """Writes the state at `step`, then rotates this run's old checkpoints
    (with uploads: queues the upload and returns; `held`: never replaced
    by a newer save while it waits)."""
    if self._uploads:
      self._uploads.check()  # A fault of an earlier upload stops the run.
    path = os.path.join(self._write_dir, f'ckpt-{step}')
    if self._before_save:
      self._before_save()
    # As tf.train.CheckpointManager does: checkpoints carry save_counter, so
    # those written before this class (and by the manager) still match.
    self.checkpoint.save_counter.assign_add(1)
    with self._watch(f'saving checkpoint {path}'):
      self.checkpoint.write(path)
    self.last_saved_step = step
    if self._uploads:
      return self._queue_upload(path, step, held)
    if not self.chief:
      if self._write_dir != self.directory:
        tf.io.gfile.rmtree(self._write_dir)
        _remove_if_empty(os.path.dirname(self._write_dir))
      return path
    self._commit(path)
    return path

  def _commit(self, path: str) -> bool:
    """Lists the checkpoint just written, and rotates if it reads back."""
    # By step: uploads can land out of order (a held one after a newer one).
    self._kept = sorted([p for p in self._kept if p != path] + [path],
                        key=step_of)
    self._write_state()
    if not self._reads_back(path):
      print(f'warning: {path} does not read back; older checkpoints are '
            'kept.', flush=True)
      return False
    self._rotate()
    return True

  # -- Uploads (a remote model_dir) -------------------------------------------

  @staticmethod
  def _remove(prefix: str) -> None:
    for name in tf.io.gfile.glob(prefix + '.*'):
      tf.io.gfile.remove(name)

  def _queue_upload(self, staged: str, step: int, held: bool) -> str:
    path = os.path.join(self.directory, os.path.basename(staged))
    if not self.chief:
      self._remove(staged)  # Every worker takes part; the chief writes.
      return path
    self._uploads.submit(
        f'the upload of checkpoint {path}',
        lambda: self._upload(staged, path, step),
        key=None if held else f'checkpoint {self.directory}',
        drop=lambda: self._drop(staged, path))
    return path

  def _drop(self, staged: str, path: str) -> bool:
    """A newer save replaces this one's upload, unless it became held."""
    if path in self._held:
      return False
    self._remove(staged)
    return True

  def _upload(self, staged: str, path: str, step: int) -> None:
    """Copies a staged checkpoint in (its index last: a checkpoint with an
    index is whole), commits it, then removes the staged files. Safe to
    repeat after a failure."""
    self._copy(staged, path)
    if self._commit(path) and self._resumable:
      self._uploads.note_durable(f'{path} (step {step})')
    self._remove(staged)

  def _rotate(self) -> None:
    """Deletes the oldest checkpoints beyond max_to_keep, held ones aside."""
    held = set(self._held)  # The training thread may add to it.
    free = [p for p in self._kept if p not in held]
    for old in free[:max(len(free) - self.max_to_keep, 0)]:
      # Removed before it leaves the list: a retry after a storage fault
      # finds it again.
      self._remove(old)
      self._kept.remove(old)
    self._write_state()

  def hold(self, step: int) -> str:
    """Saves the state at `step` (unless just saved) and keeps it out of
    rotation until `release`: an asynchronous evaluation's weights, on disk
    until its result says whether they met the target."""
    path = os.path.join(self.directory if self._uploads else self._write_dir,
                        f'ckpt-{step}')
    if self.chief:
      self._held.add(path)  # Before its upload commits and rotates.
    if self.last_saved_step != step:
      path = self.save(step, held=True)
    return path

  def adopt(self, source: str, step: int) -> str:
    """Copies the checkpoint `source` (of another folder) in as this
    folder's `ckpt-<step>`, then rotates; the chief's job (other workers
    only return the path)."""
    path = os.path.join(self.directory, f'ckpt-{step}')
    if not self.chief:
      return path
    self.last_saved_step = step
    if self._uploads:  # After the source's own upload, in order.
      self._uploads.submit(f'the copy of {source} to {path}',
                           lambda: self._copy_in(source, path))
    else:
      self._copy_in(source, path)
    return path

  def _copy(self, source: str, path: str) -> None:
    """Copies checkpoint `source` to `path` in this folder, its index last
    (a checkpoint with an index is whole)."""
    tf.io.gfile.makedirs(self.directory)
    for name in sorted(tf.io.gfile.glob(source + '.*'),
                       key=lambda name: name.endswith('.index')):
      tf.io.gfile.copy(name, path + name[len(source):], overwrite=True)

  def _copy_in(self, source: str, path: str) -> None:
    self._copy(source, path)
    self._kept = [p for p in self._kept if p != path] + [path]
    self._rotate()

  def release(self, path: str) -> None:
    """Returns a held checkpoint to the rotation."""
    if path in self._held:
      self._held.discard(path)
      if self._uploads:
        self._uploads.submit(f'the rotation of {self.directory}',
                             self._rotate)
      else:
        self._rotate()
