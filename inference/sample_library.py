"""The query sample library: eval samples preprocessed as the model's eval path.

Samples come from the task's own eval pipeline (one host, no padding, file
order), so an inference run sees exactly what in-loop evaluation sees. Only
what LoadGen has loaded is held: construction makes one pass that counts the
samples and keeps their references (labels, masked-LM ids: small), and
`load` reads the requested samples when LoadGen asks for them. The 50,000
ImageNet validation images (about 30 GB as float32 at 224x224) never need to
fit in memory at once; LoadGen loads its performance sample count
(`Task.inference_performance_samples`, 1,024 for ResNet-50).
"""

import numpy as np
import tensorflow as tf


class EvalSampleLibrary:
  """Eval samples by index, read lazily, with their references for accuracy."""

  def __init__(self, *, task, count: int = 0, batch: int = 64,
               repeat_to: int = 0):
    """Args:
      task: a training.task.Task whose data gives the eval set.
      count: use the first `count` samples (0: all).
      batch: read batch size.
      repeat_to: at least this many samples: the set repeated whole as
        often as it takes (index i is sample i mod the set's size), as
        MLPerf Inference v0.5 made GNMT's 3,903,900 samples of
        newstest2014's 3,003; a quality over the repeated set is the set's.
    """
    self._task, self._batch = task, batch
    references = {k: [] for k in task.inference_references}
    total = 0
    for rows in self._real_batches():
      for k in references:
        references[k].append(rows[k])
      total += len(next(iter(rows.values())))
      if count and total >= count:
        break
    self.real_total = min(count, total) if count else total
    copies = max(1, -(-repeat_to // self.real_total)) if repeat_to else 1
    self.total = self.real_total * copies
    self._references = {
        k: np.tile(np.concatenate(v)[:self.real_total],
                   (copies,) + (1,) * (np.concatenate(v).ndim - 1))
        for k, v in references.items()}
    self._inputs = task.inference_inputs
    self._loaded = {}
    self._stream, self._stream_start = None, 0  # Reader and its next index.

  def _real_batches(self):
    """The eval set as NumPy batches of real samples, in file order."""
    data = self._task.data
    steps = data.eval_steps(num_pipelines=1, global_batch_size=self._batch)
    ds = data.eval_dataset(tf.distribute.InputContext(),
                           global_batch_size=self._batch, steps=steps,
                           cache=False)
    for batch in ds:
      batch = {k: v.numpy() for k, v in batch.items()}
      real = batch.pop('mask') == 1
      yield {k: v[real] for k, v in batch.items()}

  def load(self, indices) -> None:
    """Reads the samples at `indices`.

    Reading goes on from where the previous load stopped while the indices
    lie ahead (LoadGen's accuracy mode loads the set chunk by chunk, in
    order) and starts a new pass otherwise.
    """
    wanted = {}  # Sample of the set -> the indices that repeat it.
    for i in indices:
      if i not in self._loaded:
        wanted.setdefault(i % self.real_total, []).append(i)
    if not wanted:
      return
    if self._stream is None or min(wanted) < self._stream_start:
      self._stream, self._stream_start = self._real_batches(), 0
    last = max(wanted)
    while self._stream_start <= last:
      rows = next(self._stream)
      n = len(next(iter(rows.values())))
      start = self._stream_start
      for r in set(wanted).intersection(range(start, start + n)):
        row = {k: v[r - start] for k, v in rows.items()}
        for i in wanted[r]:
          self._loaded[i] = row
      self._stream_start += n

  def unload(self, indices) -> None:
    for i in indices:
      self._loaded.pop(i, None)

  def loaded(self) -> list[int]:
    """Indices of the samples held in memory."""
    return sorted(self._loaded)

  def held_bytes(self) -> int:
    """Bytes of the loaded samples' arrays."""
    rows = {id(row): row for row in self._loaded.values()}  # Repeats share.
    return sum(v.nbytes for row in rows.values() for v in row.values())

  def get(self, indices) -> dict:
    """Model inputs for loaded samples, stacked in `indices` order."""
    rows = [self._loaded[i] for i in indices]
    batch = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    return self._inputs(batch)

  def references(self) -> dict:
    """Every sample's reference fields (labels), by index."""
    return self._references
