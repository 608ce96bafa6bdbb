"""MobileNet-v1 against Keras' MobileNet (the same network as TF-slim's
mobilenet_v1, a maintained implementation): the same weights give the same
logits; and the MLPerf task's input scaling."""

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import image_preprocessing
from models.common import mobilenet


def keras_mobilenet(alpha, size, classes):
  return tf.keras.applications.MobileNet(
      input_shape=(size, size, 3), alpha=alpha, weights=None,
      classes=classes, classifier_activation=None)


def copy_weights(keras_model, ours):
  """Keras' variables into ours, with random moving statistics (so that
  eval batch norm is not the identity)."""
  rng = np.random.default_rng(0)
  p, s = ours.params, ours.state

  def bn(layer, name):
    gamma, beta, mean, var = (w.shape for w in layer.weights)
    del gamma, beta, var
    values = [rng.uniform(0.5, 1.5, mean), rng.normal(0, 0.1, mean),
              rng.normal(0, 0.1, mean), rng.uniform(0.5, 1.5, mean)]
    layer.set_weights(values)
    for key, v in zip(('gamma', 'beta'), values[:2]):
      p[f'{name}/{key}'].assign(v)
    for key, v in zip(('moving_mean', 'moving_variance'), values[2:]):
      s[f'{name}/{key}'].assign(v)

  layers = {layer.name: layer for layer in keras_model.layers}
  p['mobilenet/conv0/kernel'].assign(layers['conv1'].weights[0])
  bn(layers['conv1_bn'], 'mobilenet/conv0/bn')
  for i in range(1, 14):
    p[f'mobilenet/conv{i}/depthwise/kernel'].assign(
        layers[f'conv_dw_{i}'].weights[0])
    bn(layers[f'conv_dw_{i}_bn'], f'mobilenet/conv{i}/depthwise/bn')
    p[f'mobilenet/conv{i}/pointwise/kernel'].assign(
        layers[f'conv_pw_{i}'].weights[0])
    bn(layers[f'conv_pw_{i}_bn'], f'mobilenet/conv{i}/pointwise/bn')
  kernel, bias = layers['conv_preds'].weights
  p['mobilenet/logits/kernel'].assign(kernel)
  p['mobilenet/logits/bias'].assign(bias)


def test_the_same_weights_give_keras_mobilenets_logits():
  alpha, size = 0.5, 64
  keras_model = keras_mobilenet(alpha, size, 10)
  ours = mobilenet.MobileNetV1(num_classes=10, width_multiplier=alpha)
  # Same variables, same shapes: the structure is slim's and Keras'.
  assert sum(int(np.prod(w.shape)) for w in keras_model.weights) == sum(
      int(np.prod(v.shape)) for v in [*ours.params.values(),
                                      *ours.state.values()])
  copy_weights(keras_model, ours)
  images = tf.random.stateless_uniform([2, size, size, 3], [1, 2], -1, 1)
  want = keras_model(images, training=False)
  got, updates = ours(images, training=False)
  assert updates == {}
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_full_width_has_the_published_parameter_count():
  # MobileNet 1.0 with 1,000 classes: 4,231,976 trainable weights (Keras'
  # MobileNet summary; Howard et al.'s "4.2 million"); slim's checkpoint
  # has 1,025 more for its background class.
  ours = mobilenet.MobileNetV1(num_classes=1000)
  assert sum(int(np.prod(v.shape)) for v in ours.params.values()) == 4231976
  assert ours.channels[11] == 512 and ours.channels[13] == 1024


def test_training_returns_new_moving_statistics_and_a_backbone_its_maps():
  ours = mobilenet.MobileNetV1(num_classes=10, width_multiplier=0.25)
  logits, updates = ours(tf.zeros([2, 32, 32, 3]), training=True)
  assert logits.shape == (2, 10)
  assert set(updates) == set(ours.state)
  backbone = mobilenet.MobileNetV1(width_multiplier=0.25, classifier=False)
  maps, _ = backbone.features(tf.zeros([1, 300, 300, 3]), training=False)
  # SSD-MobileNet-v1's first two maps: 19x19 (block 11), 10x10 (block 13).
  assert maps[11].shape[1:3] == (19, 19) and maps[13].shape[1:3] == (10, 10)
  with pytest.raises(ValueError, match='built without its classifier'):
    backbone(tf.zeros([1, 32, 32, 3]), training=False)


def test_spatial_partitions_are_refused_with_the_fix():
  with pytest.raises(ValueError, match='SPATIAL_PARTITIONS is 2; set it to 1'):
    mobilenet.MobileNetV1(spatial_partitions=2)


def test_mobilenet_pixels_are_in_minus_one_to_one():
  got = image_preprocessing.to_unit_range(tf.constant([0.0, 127.5, 255.0]))
  np.testing.assert_allclose(got, [-1.0, 0.0, 1.0])
