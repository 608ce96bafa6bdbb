"""Mask R-CNN's task: dynamic RoI shapes (the mask head on the foreground
RoIs only, RoIAlign by crops: off a TPU) give Google's fixed-shape losses
and gradients (128 mask rows, RoIAlign by gather)."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import maskrcnn as input_lib
from models.maskrcnn import model as maskrcnn_lib
from models.maskrcnn import task as maskrcnn_task
from tests.models.maskrcnn import test_spatial as spatial


def loss_and_grads(roi_shapes):
  data = input_lib.MaskRcnnInput(geometry=spatial.GEOMETRY, synthetic=True)
  task = maskrcnn_task.MaskRcnnTask(
      model=lambda **kw: maskrcnn_lib.MaskRCNN(
          depth=10, width_multiplier=0.125, fpn_channels=16, mlp_head_dim=32,
          seed=3, **kw),
      data=data, settings=dataclasses.replace(spatial.SETTINGS,
                                              roi_shapes=roi_shapes),
      metric_processes=0)
  model = task.build_model()
  batch = {k: tf.constant(v) for k, v in spatial.examples(
      2, landscape=True).items()}

  @tf.function(autograph=False)
  def step():
    with tf.GradientTape() as tape:
      losses, _ = task.train_losses(model, batch, (64, 128))
    return losses, tape.gradient(losses['total'], model.trainable_variables)

  losses, grads = step()
  return {k: float(v) for k, v in losses.items()}, [g.numpy() for g in grads]


def test_dynamic_roi_shapes_give_the_fixed_loss_and_gradients():
  static, static_grads = loss_and_grads('fixed')
  found, found_grads = loss_and_grads('dynamic')
  assert static['mask'] > 0
  for name, value in static.items():
    assert found[name] == pytest.approx(value, rel=1e-5), name
  for got, want in zip(found_grads, static_grads):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def test_an_unknown_roi_shapes_setting_is_named():
  with pytest.raises(ValueError, match=r"Settings.roi_shapes \(ROI_SHAPES\) is 'some'"):
    loss_and_grads('some')
