"""The query sample library: eval samples preprocessed as the model's eval path.

Samples come from the task's own eval pipeline (one host, no padding), so an
inference run sees exactly what in-loop evaluation sees. LoadGen chooses which
samples are in memory (load/unload); `get` serves only those.
"""

import numpy as np
import tensorflow as tf


class EvalSampleLibrary:
  """Eval samples by index, with their references for accuracy."""

  def __init__(self, *, task, count: int = 0, batch: int = 64):
    """Args:
      task: a training.task.Task whose data gives the eval set.
      count: use the first `count` samples (0: all).
      batch: read batch size.
    """
    data = task.data
    steps = data.eval_steps(num_pipelines=1, global_batch_size=batch)
    ds = data.eval_dataset(tf.distribute.InputContext(),
                           global_batch_size=batch, steps=steps)
    parts = [{k: v.numpy() for k, v in b.items()} for b in ds]
    merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    real = merged.pop('mask') == 1
    total = int(real.sum())
    self.total = min(count, total) if count else total
    self._all = {k: v[real][:self.total] for k, v in merged.items()}
    self._inputs = task.inference_inputs
    self._loaded = {}

  def load(self, indices) -> None:
    for i in indices:
      self._loaded[i] = {k: v[i] for k, v in self._all.items()}

  def unload(self, indices) -> None:
    for i in indices:
      self._loaded.pop(i, None)

  def get(self, indices) -> dict:
    """Model inputs for loaded samples, stacked in `indices` order."""
    rows = [self._loaded[i] for i in indices]
    batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    return self._inputs(batch)

  def references(self) -> dict:
    """All samples' fields (labels included), by index."""
    return self._all
