"""tools/export_savedmodel.py: the SavedModel predicts what the model does."""

import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import image_preprocessing
from tests import helpers
from tools import export_savedmodel

pytestmark = pytest.mark.slow  # End-to-end: real runs and processes.


def export(data_dir, model_dir, export_dir, **params):
  bindings = [f'DATA_DIR = {data_dir!r}', helpers.SMALL_RESNET,
              *(f'{k} = {v!r}' for k, v in params.items())]
  try:
    return export_savedmodel.export(
        gin_files=[os.path.join(helpers.ROOT, 'gin/resnet_quickstart.gin')],
        gin_params=bindings, checkpoint_dir=model_dir, export_dir=export_dir)
  finally:
    gin.clear_config()


def test_export_matches_the_trained_model_in_both_precisions(quickstart_data,
                                                             tmp_path):
  model_dir = str(tmp_path / 'run')
  result = helpers.run_quick(quickstart_data, model_dir)
  export(quickstart_data, model_dir, str(tmp_path / 'f32'))
  export(quickstart_data, model_dir, str(tmp_path / 'bf16'),
         COMPUTE_DTYPE='bfloat16')
  images = tf.random.stateless_uniform([5, 32, 32, 3], [1, 2], 0, 255)
  want, _ = result.model(image_preprocessing.normalize(images), training=False)
  f32 = tf.saved_model.load(str(tmp_path / 'f32')).signatures[
      'serving_default']
  got = f32(images=images)
  np.testing.assert_allclose(got['logits'], want, rtol=1e-5, atol=1e-5)
  # Any batch size: the signature's batch dimension is dynamic.
  assert f32(images=images[:2])['classes'].shape == (2,)
  bf16 = tf.saved_model.load(str(tmp_path / 'bf16')).signatures[
      'serving_default']
  assert float(tf.norm(bf16(images=images)['logits'] - want) /
               tf.norm(want)) < 0.05


def test_export_refuses_a_checkpoint_of_another_model(quickstart_data,
                                                      tmp_path):
  model_dir = str(tmp_path / 'run')
  helpers.run_quick(quickstart_data, model_dir)
  with pytest.raises(ValueError, match='does not fit the model'):
    export(quickstart_data, model_dir, str(tmp_path / 'out'), DEPTH=34)


def test_export_without_a_checkpoint_says_so(quickstart_data, tmp_path):
  with pytest.raises(FileNotFoundError, match='No checkpoint in'):
    export(quickstart_data, str(tmp_path / 'none'), str(tmp_path / 'out'))
