"""A trained model as a SavedModel with the task's serving signature."""

import tensorflow as tf


def save_serving(model, task, export_dir: str) -> None:
  """Writes `model` with `task.serving_fn(model)` as `serving_default`."""
  module = tf.Module()
  module.model = model
  module.serve = task.serving_fn(model)
  tf.saved_model.save(module, export_dir,
                      signatures={'serving_default': module.serve})
