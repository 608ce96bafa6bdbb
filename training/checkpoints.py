"""Checkpoint save/restore with a clear error for a foreign checkpoint.

Under MultiWorkerMirroredStrategy every worker must take part in a save; only
the chief writes into model_dir, the others write to a scratch folder they
delete afterwards. Every worker restores from the chief's folder.
"""

import os

import tensorflow as tf


class Checkpointer:
  """Saves and restores the training state of one run."""

  def __init__(self, *, model_dir: str, chief: bool, worker_id: int = 0,
               max_to_keep: int = 3, folder: str = 'checkpoints', **objects):
    """Args:
      model_dir: the run's folder; checkpoints go to `<model_dir>/<folder>`.
      chief: whether this worker writes the real checkpoints.
      worker_id: names the scratch folder of a non-chief worker.
      max_to_keep: checkpoints kept on disk.
      folder: the checkpoints' folder inside model_dir.
      **objects: trackables to save (model, optimizer slots, step, ...).
    """
    self.directory = os.path.join(model_dir, folder)
    self.last_saved_step = None
    self.checkpoint = tf.train.Checkpoint(**objects)
    write_dir = (self.directory if chief else
                 os.path.join(model_dir, 'worker_scratch',
                              f'{folder}-{worker_id}'))
    self._scratch = None if chief else write_dir
    self._manager = tf.train.CheckpointManager(self.checkpoint, write_dir,
                                               max_to_keep=max_to_keep)

  def latest(self) -> str | None:
    return tf.train.latest_checkpoint(self.directory)

  def restore_latest(self) -> str | None:
    """Restores the newest checkpoint in model_dir, if any.

    Returns:
      The restored path, or None when model_dir holds no checkpoint.

    Raises:
      ValueError: the checkpoint belongs to another model or configuration.
    """
    path = self.latest()
    if path is None:
      return None
    try:
      self.checkpoint.restore(path).assert_consumed()
    except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as e:
      detail = str(e).splitlines()[0][:500]
      raise ValueError(
          f'{path} is a checkpoint of a different model or configuration than '
          f'this run ({detail}). Use a new --model_dir, or delete '
          f'{self.directory} to start over.') from e
    return path

  def save(self, step: int) -> str:
    path = self._manager.save(checkpoint_number=step)
    if self._scratch:
      tf.io.gfile.rmtree(self._scratch)
    self.last_saved_step = step
    return path
