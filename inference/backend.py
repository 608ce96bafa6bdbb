"""Backends: something that predicts a batch. LoadGen never sees them."""

import numpy as np
import tensorflow as tf


def set_intra_op_threads(threads: int) -> None:
  """Threads each TF op may use; 0 keeps TF's default (one per core).

  Process-wide, and only before TF runs anything. With W worker threads,
  W x threads = cores runs W predictions side by side, each on its own
  cores: more throughput from small batches than all cores on one.
  """
  if threads:
    try:
      tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError as e:
      raise RuntimeError('Set intra-op threads before TensorFlow runs any '
                         'op (first thing in the process).') from e


class SavedModelBackend:
  """A SavedModel's `serving_default` signature."""

  def __init__(self, path: str):
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f'No SavedModel at {path}; make one with '
                              'tools/export_savedmodel.py.')
    self._model = tf.saved_model.load(path)
    self._fn = self._model.signatures['serving_default']
    self.input_specs = self._fn.structured_input_signature[1]
    self.path = path

  def check_inputs(self, inputs: dict) -> None:
    """Fails naming the mismatch when the data does not fit the signature."""
    want = {k: (tuple(s.shape[1:]), s.dtype) for k, s in
            self.input_specs.items()}
    have = {k: (tuple(v.shape[1:]), tf.as_dtype(v.dtype)) for k, v in
            inputs.items()}
    if want.keys() != have.keys() or any(
        want[k][0] != have[k][0] for k in want):
      raise ValueError(
          f'The SavedModel at {self.path} takes {want} but the dataset gives '
          f'{have} (name: (shape without batch, dtype)). Export the model with '
          'the gin files of this dataset.')

  def predict(self, inputs: dict) -> dict:
    outputs = self._fn(**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


class NoOpBackend:
  """Answers zeros at once: measures the harness's own per-query cost."""

  def __init__(self, output_key: str):
    self.output_key = output_key

  def check_inputs(self, inputs: dict) -> None:
    del inputs

  def predict(self, inputs: dict) -> dict:
    n = len(next(iter(inputs.values())))
    return {self.output_key: np.zeros([n], np.int32)}
