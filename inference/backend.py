"""Backends: something that predicts a batch. LoadGen never sees them."""

import threading

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


class TFLiteBackend:
  """A TFLite model's `serving_default` signature (tools/quantize_tflite.py
  writes one from an exported SavedModel) through the LiteRT interpreter
  (ai-edge-litert, TensorFlow's successor to tf.lite.Interpreter).

  An interpreter is not thread-safe: each worker thread has its own, and
  one a batch size (resizing the input reallocates every tensor).
  """

  def __init__(self, path: str, threads: int = 0, postprocess=None):
    """Args:
      path: the .tflite file.
      threads: the interpreter's threads (0: LiteRT's default).
      postprocess: the task's float post-processing, for a model converted
        from the `network` signature (training.task.QuantizedServing).
    """
    from ai_edge_litert import interpreter as litert  # Only this backend.
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f'No TFLite model at {path}; make one with '
                              'tools/quantize_tflite.py.')
    with tf.io.gfile.GFile(path, 'rb') as f:
      self._content = f.read()
    self._make = lambda: litert.Interpreter(
        model_content=self._content, num_threads=threads or None)
    probe = self._make()
    signatures = probe.get_signature_list()
    self._postprocess = None
    if 'serving_default' in signatures:
      self._signature = 'serving_default'
    elif 'network' in signatures and postprocess is not None:
      self._signature = 'network'
      # One graph a batch shape, not an eager NMS loop per query.
      self._postprocess = tf.function(postprocess, reduce_retracing=True)
    else:
      raise ValueError(f'The TFLite model at {path} has no serving_default '
                       f'signature (it has {sorted(signatures)}'
                       + (', and the task has no float post-processing for '
                          'its `network`' if 'network' in signatures else '')
                       + '): convert it from an exported SavedModel of this '
                       'task with tools/quantize_tflite.py.')
    runner = probe.get_signature_runner(self._signature)
    self.input_specs = {k: (tuple(d['shape_signature'][1:]), d['dtype'])
                        for k, d in runner.get_input_details().items()}
    self.path = path
    self._local = threading.local()

  def check_inputs(self, inputs: dict) -> None:
    """Fails naming the mismatch when the data does not fit the model."""
    have = {k: tuple(v.shape[1:]) for k, v in inputs.items()}
    want = {k: shape for k, (shape, _) in self.input_specs.items()}
    if have != want:
      raise ValueError(
          f'The TFLite model at {self.path} takes {want} but the dataset '
          f'gives {have} (name: shape without batch). Convert the model '
          'exported with the gin files of this dataset.')

  def _runner(self, batch: int):
    runners = getattr(self._local, 'runners', None)
    if runners is None:
      runners = self._local.runners = {}
    if batch not in runners:
      interpreter = self._make()
      runner = interpreter.get_signature_runner(self._signature)
      runners[batch] = (interpreter, runner)  # The runner needs both alive.
    return runners[batch][1]

  def predict(self, inputs: dict) -> dict:
    batch = len(next(iter(inputs.values())))
    runner = self._runner(batch)
    outputs = runner(**{k: np.asarray(v, self.input_specs[k][1])
                        for k, v in inputs.items()})
    if self._postprocess is None:
      return outputs
    return {k: v.numpy() for k, v in self._postprocess(outputs).items()}


# ONNX element types (onnxruntime's NodeArg.type) as NumPy dtypes.
_ONNX_DTYPES = {'tensor(float)': np.float32, 'tensor(int32)': np.int32,
                'tensor(int64)': np.int64}


class OnnxBackend:
  """An ONNX model (tools/export_onnx.py converts an exported SavedModel's
  serving signature) through ONNX Runtime's CPU provider. One session
  serves every worker thread (its `run` is thread-safe)."""

  def __init__(self, path: str, threads: int = 0):
    """Args:
      path: the .onnx file.
      threads: the session's intra-op threads (0: ONNX Runtime's default,
        one per physical core).
    """
    import onnxruntime  # Only this backend.
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f'No ONNX model at {path}; make one with '
                              'tools/export_onnx.py.')
    options = onnxruntime.SessionOptions()
    if threads:
      options.intra_op_num_threads = threads
    with tf.io.gfile.GFile(path, 'rb') as f:
      self._session = onnxruntime.InferenceSession(
          f.read(), options, providers=['CPUExecutionProvider'])
    # Symbolic dimensions (the batch, and any tf2onnx left unknown) are
    # names, not sizes: None here.
    unknown = [f'{i.name}: {i.type}' for i in self._session.get_inputs()
               if i.type not in _ONNX_DTYPES]
    if unknown:
      raise ValueError(f'The ONNX model at {path} takes inputs of types this '
                       f'backend does not feed ({", ".join(unknown)}; it '
                       f'feeds {sorted(_ONNX_DTYPES)}).')
    self.input_specs = {
        i.name: (tuple(d if isinstance(d, int) else None
                       for d in i.shape[1:]), _ONNX_DTYPES[i.type])
        for i in self._session.get_inputs()}
    self._outputs = [o.name for o in self._session.get_outputs()]
    self.path = path

  def check_inputs(self, inputs: dict) -> None:
    """Fails naming the mismatch when the data does not fit the model."""
    have = {k: tuple(v.shape[1:]) for k, v in inputs.items()}
    want = {k: shape for k, (shape, _) in self.input_specs.items()}
    if have.keys() != want.keys() or any(
        len(have[k]) != len(want[k]) or
        any(w is not None and w != h for w, h in zip(want[k], have[k]))
        for k in want):
      raise ValueError(
          f'The ONNX model at {self.path} takes {want} but the dataset gives '
          f'{have} (name: shape without batch). Convert the model exported '
          'with the gin files of this dataset.')

  def predict(self, inputs: dict) -> dict:
    values = self._session.run(self._outputs, {
        k: np.asarray(v, self.input_specs[k][1]) for k, v in inputs.items()})
    return dict(zip(self._outputs, values))


class NoOpBackend:
  """Answers zeros at once: measures the harness's own per-query cost."""

  def __init__(self, output_key: str):
    self.output_key = output_key

  def check_inputs(self, inputs: dict) -> None:
    del inputs

  def predict(self, inputs: dict) -> dict:
    n = len(next(iter(inputs.values())))
    return {self.output_key: np.zeros([n], np.int32)}
