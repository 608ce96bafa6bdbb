"""SSD300-ResNet34: the network, its backbone checkpoint, the loss and the
on-device detections, against NumPy ports of Google's v0.7 code."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import ssd_boxes
from models.common import resnet as resnet_lib
from models.ssd import model as ssd_lib
from models.ssd import features as ssd_features
from models.ssd import task as ssd_task


def small_ssd(**kwargs):
  return ssd_lib.SSD(num_classes=5, width_multiplier=0.125, **kwargs)


def test_ssd300_predicts_every_default_box_from_six_maps():
  model = small_ssd()
  classes, boxes, updates = model(tf.zeros([2, 300, 300, 3]), training=True)
  assert classes.shape == (2, 8732, 5) and boxes.shape == (2, 8732, 4)
  assert updates  # The backbone's batch-norm statistics.
  assert model.features.feature_sizes(300) == (38, 19, 10, 5, 3, 1)
  # The heads: kernel min(size, 3), default boxes x classes / x 4.
  assert model.params['ssd/class_net/class-8/kernel'].shape == (1, 1, 32, 20)
  assert model.params['ssd/box_net/box-3/kernel'].shape == (3, 3, 32, 16)
  full = ssd_lib.SSD()
  assert full.out_channels == (256, 512, 512, 256, 256, 256)


def test_a_geometry_the_network_does_not_make_is_refused():
  with pytest.raises(ValueError, match=r'gives feature maps \(19, 10, 5, 3, '
                     r'1\), but the geometry says \(38, 19, 10, 5, 3\)'):
    small_ssd(geometry=ssd_boxes.Geometry(
        image_size=150, feature_sizes=(38, 19, 10, 5, 3),
        steps=(8, 16, 30, 50, 150), scales=(15, 30, 60, 90, 120, 150),
        aspect_ratios=((2,),) * 5))


def saved_resnet34(tmp_path, width):
  resnet = resnet_lib.ResNet(depth=34, width_multiplier=width,
                             num_classes=10, seed=5)
  rng = np.random.default_rng(0)
  for v in resnet.state.values():  # Moving statistics that are not 0 or 1.
    v.assign(rng.uniform(0.5, 2.0, v.shape).astype(np.float32))
  return resnet, tf.train.Checkpoint(model=resnet).save(str(tmp_path / 'r'))


def test_backbone_loads_from_a_resnet34_checkpoint_of_this_suite(tmp_path):
  resnet, path = saved_resnet34(tmp_path, 0.125)
  model = small_ssd()
  loaded = model.load_backbone(path)
  assert loaded == len(model.backbone.params) + len(model.backbone.state)
  for name, var in {**model.backbone.params, **model.backbone.state}.items():
    source = {**resnet.params, **resnet.state}[name]
    np.testing.assert_array_equal(var.numpy(), source.numpy())
  # The classifier and the fourth stage are not part of the backbone.
  assert not any('stage4' in n or '/fc/' in n for n in model.params)


def assert_refused_before_any_assignment(model, path, match):
  before = model.params['resnet/stem/conv/kernel'].numpy()
  with pytest.raises(ValueError, match=match):
    model.load_backbone(path)
  np.testing.assert_array_equal(model.params['resnet/stem/conv/kernel'],
                                before)


def test_backbone_checkpoint_of_another_width_names_the_variable(tmp_path):
  _, path = saved_resnet34(tmp_path, 0.25)
  model = small_ssd()
  assert_refused_before_any_assignment(
      model, path, r'resnet/\S+: shape \(.*\) in checkpoint .* but \(.*\) '
      r'in the model.*width')
  with pytest.raises(ValueError, match='No checkpoint.*BACKBONE_CHECKPOINT'):
    model.load_backbone(str(tmp_path / 'nothing'))


def test_a_deeper_resnet_checkpoint_is_refused_by_a_shallower_backbone(
    tmp_path):
  # A ResNet-34's names include a ResNet-10's: without the check its first
  # blocks would load.
  _, path = saved_resnet34(tmp_path, 0.125)
  assert_refused_before_any_assignment(
      small_ssd(features=functools.partial(ssd_features.ResNetFeatures,
                                           depth=10)), path,
      r'holds model/(params|state)/resnet\.Sstage1\.Sblock1.*ResNet-10.*'
      r'ResNetFeatures\.depth')


def test_bfloat16_tracks_float32():
  images = tf.constant(np.random.default_rng(1).uniform(
      0, 1, (1, 300, 300, 3)).astype(np.float32))
  f32 = small_ssd(seed=2)(images, training=False)
  bf16 = small_ssd(seed=2, compute_dtype='bfloat16')(images, training=False)
  assert bf16[0].dtype == tf.float32
  for a, b in zip(f32[:2], bf16[:2]):
    assert np.corrcoef(a.numpy().ravel(), b.numpy().ravel())[0, 1] > 0.99


# -- The loss: Google's ssd_model.py in NumPy -----------------------------------

def numpy_topk_mask(scores, k):
  """_topk_mask's binary search over the float bits, per image."""
  out = np.zeros_like(scores)
  for b in range(scores.shape[0]):
    s = scores[b].astype(np.float32)
    kth_negative = np.sum(s > 0.0) < k[b]
    value = np.int32(1 << 31) if kth_negative else np.int32(0)
    value = np.array(value, np.int32)
    for bit in range(30, -1, -1):
      new = np.bitwise_or(value, np.int32(1 << bit))
      larger = np.sum(s > new.view(np.float32))
      if (larger >= k[b]) != kth_negative:
        value = new
    out[b] = (s >= value.view(np.float32)).astype(np.float32)
  return out


def numpy_google_loss(logits, codes, gt_classes, gt_boxes, num_matched,
                      mining=True):
  mask = (gt_classes > 0).astype(np.float64)
  x = np.abs(gt_boxes - codes)
  quadratic = np.minimum(x, 1.0)
  huber = 0.5 * quadratic**2 + (x - quadratic)
  box_loss = np.sum(np.sum(huber, -1) * mask, 1)
  box_loss = np.mean(box_loss / num_matched)
  shifted = logits - logits.max(-1, keepdims=True)
  log_sum_exp = np.log(np.exp(shifted).sum(-1))
  picked = np.take_along_axis(shifted, gt_classes[..., None], -1)[..., 0]
  ce = log_sum_exp - picked
  k = np.minimum(num_matched.astype(np.int32) * 3, logits.shape[1])
  top = numpy_topk_mask((ce * (1 - mask)).astype(np.float32), k) * mining
  class_loss = np.mean(np.sum(ce * (mask + top), 1) / num_matched)
  return class_loss + box_loss


def targets(rng, n_images, anchors):
  classes, boxes, matched = [], [], []
  for i in range(n_images):
    n = 1 + i * 3
    yx = rng.uniform(0, 0.7, (n, 2))
    gt = np.concatenate([yx, yx + rng.uniform(0.05, 0.3, (n, 2))], 1)
    c, b, m = ssd_boxes.assign_targets(
        tf.constant(gt, tf.float32), tf.constant(rng.integers(1, 5, n),
                                                 tf.int32),
        tf.constant(anchors))
    classes.append(c.numpy())
    boxes.append(b.numpy())
    matched.append(m.numpy())
  return np.stack(classes), np.stack(boxes), np.array(matched)


def test_loss_equals_googles_with_hard_negative_mining():
  rng = np.random.default_rng(0)
  anchors = ssd_boxes.default_boxes()
  classes, boxes, matched = targets(rng, 3, anchors)
  logits = rng.normal(0, 2, (3, 8732, 5)).astype(np.float32)
  codes = (boxes + rng.normal(0, 1.5, boxes.shape)).astype(np.float32)
  got = ssd_task.detection_loss(tf.constant(logits), tf.constant(codes),
                                tf.constant(classes), tf.constant(boxes),
                                tf.constant(matched)).numpy()
  want = numpy_google_loss(logits.astype(np.float64),
                           codes.astype(np.float64), classes,
                           boxes.astype(np.float64), matched)
  np.testing.assert_allclose(got.mean(), want, rtol=1e-5)
  # The 3 x matched hardest negatives are in it: without them it is less.
  positives_only = numpy_google_loss(
      logits.astype(np.float64), codes.astype(np.float64), classes,
      boxes.astype(np.float64), matched, mining=False)
  assert want > positives_only + 0.5


# -- Detections: Google's NumPy decode_single (coco_metric.py) ---------------

def numpy_decode_single(bboxes_in, scores_in, indices, criteria=0.5,
                        max_output=200, max_num=200):
  def calc_iou(target, candidates):
    lt = np.maximum(target[None, :2], candidates[:, :2])
    rb = np.minimum(target[None, 2:], candidates[:, 2:])
    delta = np.maximum(rb - lt, 0)
    inter = delta[:, 0] * delta[:, 1]
    a1 = np.prod(target[2:] - target[:2])
    a2 = np.prod(candidates[:, 2:] - candidates[:, :2], axis=1)
    return inter / (a1 + a2 - inter)

  boxes_out, scores_out, labels_out = [], [], []
  for i in range(1, scores_in.shape[1]):
    bboxes = bboxes_in[indices[:, i], :]
    score = scores_in[:, i]
    keep = score > 0.05
    if not keep.any():
      continue
    bboxes, score = bboxes[keep], score[keep]
    order = np.argsort(score)[-max_num:]
    candidates = []
    while len(order):
      idx = order[-1]
      order = order[calc_iou(bboxes[idx], bboxes[order]) < criteria]
      candidates.append(idx)
    boxes_out.append(bboxes[candidates])
    scores_out.append(score[candidates])
    labels_out.extend([i] * len(candidates))
  boxes_out, scores_out = np.concatenate(boxes_out), np.concatenate(scores_out)
  labels_out = np.array(labels_out)
  best = np.argsort(scores_out)[-max_output:]
  return boxes_out[best], labels_out[best], scores_out[best]


def test_detections_equal_googles_numpy_nms():
  rng = np.random.default_rng(3)
  anchors = ssd_boxes.default_boxes()
  logits = rng.normal(0, 3, (2, 8732, 5)).astype(np.float32)
  codes = rng.normal(0, 1, (2, 8732, 4)).astype(np.float32)
  raw_shape = np.array([[480, 640], [300, 200]], np.int32)
  corners, scores, labels = ssd_task.detect(
      tf.constant(logits), tf.constant(codes), anchors)
  boxes = ssd_task.pixel_xywh(corners, tf.constant(raw_shape)).numpy()
  scores, labels = scores.numpy(), labels.numpy()
  decoded = ssd_boxes.decode(tf.constant(codes), anchors).numpy()
  probs = tf.nn.softmax(logits).numpy()
  for b in range(2):
    top = np.argsort(-probs[b], axis=0, kind='stable')[:200]  # [200, C]
    top_scores = np.take_along_axis(probs[b], top, 0)
    want_boxes, want_labels, want_scores = numpy_decode_single(
        decoded[b], top_scores, top)
    h, w = raw_shape[b]
    want = np.stack([want_boxes[:, 1] * w, want_boxes[:, 0] * h,
                     (want_boxes[:, 3] - want_boxes[:, 1]) * w,
                     (want_boxes[:, 2] - want_boxes[:, 0]) * h], 1)
    real = scores[b] > 0
    assert real.sum() == len(want_scores) == 200
    # The same detections, ordered by class, score and place (equal scores
    # may come in either order).
    mine = np.lexsort((boxes[b][real][:, 0], -scores[b][real],
                       labels[b][real]))
    theirs = np.lexsort((want[:, 0], -want_scores, want_labels))
    np.testing.assert_array_equal(labels[b][real][mine], want_labels[theirs])
    np.testing.assert_allclose(scores[b][real][mine], want_scores[theirs],
                               rtol=1e-6)
    np.testing.assert_allclose(boxes[b][real][mine], want[theirs], rtol=1e-4,
                               atol=1e-3)


def test_nms_keeps_a_box_only_a_suppressed_box_overlaps():
  # a overlaps b (IoU 0.6), b overlaps c, a does not overlap c: greedy NMS
  # keeps a and c (b, suppressed, suppresses nothing).
  boxes = tf.constant([[[0.0, 0.0, 1.0, 1.0], [0.0, 0.25, 1.0, 1.25],
                        [0.0, 1.0, 1.0, 2.0]]])
  keep = ssd_task.greedy_nms(boxes, tf.constant([[True, True, True]]), 0.5)
  np.testing.assert_array_equal(keep.numpy(), [[True, False, True]])
