"""A trained model as a SavedModel with the task's serving signature."""

import tensorflow as tf

# The signature of the part a quantized model computes in INT8, where the
# task has one (training.task.QuantizedServing).
NETWORK_SIGNATURE = 'network'


def save_serving(model, task, export_dir: str) -> None:
  """Writes `model` with `task.serving_fn(model)` as `serving_default`,
  and `task.network_fn(model)` as `network` if the task has one."""
  module = tf.Module()
  module.model = model
  module.serve = task.serving_fn(model)
  signatures = {'serving_default': module.serve}
  if hasattr(task, 'network_fn'):
    module.network = task.network_fn(model)
    signatures[NETWORK_SIGNATURE] = module.network
  tf.saved_model.save(module, export_dir, signatures=signatures)
