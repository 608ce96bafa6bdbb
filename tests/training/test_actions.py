"""Actions a user adds from gin: best checkpoint by quality, SavedModel export."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline.image_preprocessing import normalize
from models.common.resnet import ResNet
from tests import helpers


@pytest.mark.slow
def test_best_checkpoint_and_export_added_from_gin(quickstart_data, tmp_path):
  model_dir = str(tmp_path / 'run')
  result = helpers.run_quick(
      quickstart_data, model_dir, TRAIN_STEPS=12, EVAL_EVERY_STEPS=4,
      **{'train.train.actions': '[@training.actions.KeepBestCheckpoint, '
                                '@training.actions.ExportSavedModel]'})
  qualities = [e[2] for e in result.evals]
  assert len(qualities) == 3
  best = json.load(open(os.path.join(model_dir, 'best', 'best.json')))
  assert best['quality'] == max(qualities)
  assert best['step'] == result.evals[int(np.argmax(qualities))][0]
  # The best checkpoint holds the weights of that evaluation's model.
  model = ResNet(depth=18, width_multiplier=0.25, num_classes=10)
  tf.train.Checkpoint(model=model).read(best['checkpoint']).expect_partial()
  logits, labels = helpers.validation_logits(model, quickstart_data)
  assert np.mean(np.argmax(logits, -1) == labels) == pytest.approx(
      best['quality'], abs=1e-6)
  # The export answers like the trained model.
  served = tf.saved_model.load(os.path.join(model_dir, 'export'))
  images = tf.random.uniform([4, 32, 32, 3], 0, 255, seed=1)
  np.testing.assert_allclose(
      served.signatures['serving_default'](images=images)['logits'],
      result.model(normalize(images), training=False)[0],
      rtol=1e-4, atol=1e-4)
