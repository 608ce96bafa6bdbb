"""Each pipeline's synthetic mode (what tools/predictor/cost.py counts a step
from) gives batches of the real pipeline's features, dtypes and ranks, and
reads no file."""

import ast
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import clicks
from input_pipeline import coco
from input_pipeline.translation import TranslationInput
from tests import helpers
from tests.input_pipeline.test_coco import GEOMETRY

CONTEXT = tf.distribute.InputContext()


def spec(dataset):
  return {k: (v.dtype, v.shape.rank) for k, v in dataset.element_spec.items()}


def first(dataset):
  return next(iter(dataset))


def both_ways(real, synthetic, batch=4):
  """(real train, synthetic train, real eval, synthetic eval) datasets."""
  return (real.train_dataset(CONTEXT, global_batch_size=batch),
          synthetic.train_dataset(CONTEXT, global_batch_size=batch),
          real.eval_dataset(CONTEXT, global_batch_size=batch, steps=1),
          synthetic.eval_dataset(CONTEXT, global_batch_size=batch, steps=1))


def test_coco_synthetic_batches_are_the_real_ones_shapes(ssd_data):
  real = coco.CocoInput(data_dir=ssd_data, geometry=GEOMETRY,
                        interleave_cycle=2)
  synthetic = coco.CocoInput(data_dir='/nonexistent', geometry=GEOMETRY,
                             synthetic=True)
  synthetic.check()  # Reads nothing.
  assert synthetic.num_classes == coco.COCO_CATEGORIES + 1
  train, fake_train, evals, fake_evals = both_ways(real, synthetic)
  for a, b in ((train, fake_train), (evals, fake_evals)):
    assert {k: v.shape[1:] for k, v in first(a).items()} == {
        k: v.shape[1:] for k, v in first(b).items()}
    assert spec(a) == spec(b)
  batch = first(fake_train)
  # The targets come from the real assignment: anchors matched to boxes.
  assert np.all(batch['num_matched'].numpy() > 0)
  assert np.all(batch['num_matched'].numpy() == np.sum(
      batch['classes'].numpy() > 0, axis=1))


def test_translation_synthetic_batches_are_packed_rows(translation_data):
  data_dir, _ = translation_data
  real = TranslationInput(data_dir=data_dir)
  synthetic = TranslationInput(data_dir='/nonexistent', synthetic=True)
  synthetic.check()
  assert synthetic.metadata['vocab_size'] == 33708
  train, fake_train, evals, fake_evals = both_ways(real, synthetic)
  assert spec(train) == spec(fake_train)
  assert spec(evals) == spec(fake_evals)
  rows = first(fake_train)
  assert rows['inputs'].shape == (4, 256)
  segments = rows['inputs_segmentation'].numpy()[0]
  # Tokens where a segment is, none in the padding after the last one.
  assert np.all((rows['inputs'].numpy()[0] > 0) == (segments > 0))
  assert segments.max() == 256 // 40
  sources = first(fake_evals)['inputs'].numpy()
  assert sources.shape == (4, 97) and np.all(sources[:, -1] == 1)


def test_click_synthetic_batches_have_criteos_features(dlrm_data):
  real = clicks.ClickInput(data_dir=dlrm_data)
  synthetic = clicks.ClickInput(data_dir='/nonexistent', synthetic=True)
  synthetic.check()
  assert synthetic.num_dense == 13 and len(synthetic.vocab_sizes) == 26
  assert max(synthetic.vocab_sizes) == clicks.SYNTHETIC_MAX_ROWS
  train, fake_train, evals, fake_evals = both_ways(real, synthetic)
  assert spec(train) == spec(fake_train)
  assert spec(evals) == spec(fake_evals)
  ids = first(fake_train)['sparse'].numpy()
  assert np.all(ids < np.array(synthetic.vocab_sizes))


@pytest.mark.parametrize('make', [
    lambda: coco.CocoInput(data_dir='/nonexistent', synthetic=True),
    lambda: TranslationInput(data_dir='/nonexistent', synthetic=True),
    lambda: clicks.ClickInput(data_dir='/nonexistent', synthetic=True)])
def test_a_synthetic_eval_is_one_step_of_no_real_examples(make):
  data = make()
  assert data.eval_steps(num_pipelines=1, global_batch_size=8) == 1
  assert data.num_eval_examples() == 0


def test_the_synthetic_clicks_have_the_pod_configs_vocabularies():
  with open(os.path.join(helpers.ROOT, 'gin', 'dlrm_pod.gin')) as f:
    sizes = re.search(r'^TABLE_SIZES = (\([^)]*\))', f.read(), re.M).group(1)
  assert ast.literal_eval(sizes) == clicks.CRITEO_TERABYTE_VOCAB_SIZES
