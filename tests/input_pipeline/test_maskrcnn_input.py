"""Mask R-CNN's pipelines against a NumPy version of Google's
dataloader.py sequence, on real records written by tools.convert_coco
--include_masks (landscape, portrait and square images, a crowd)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from input_pipeline import fpn_anchors
from input_pipeline import maskrcnn
from tools import convert_coco

# Small sizes of the real geometry's kind: padded 64x128 (or 128x64), the
# short side to 60, the long one at most 120.
GEOMETRY = maskrcnn.Geometry(image_size=(64, 128), short_side=60,
                             long_side_max=120, gt_mask_size=12,
                             max_instances=4)
SHAPES = [(48, 80), (80, 48), (64, 64), (40, 90), (70, 50), (50, 70)]


def _polygon_box(rng, height, width):
  y0, x0 = (int(v) for v in rng.integers(0, [height // 2, width // 2]))
  h, w = (int(v) for v in rng.integers(8, [height // 2, width // 2]))
  polygon = [x0, y0, x0 + w, y0, x0 + w // 2, y0 + h]
  return polygon, [x0, y0, w, h]


def build(folder, shapes=SHAPES, instances=2):
  """COCO JSON and JPEGs -> records with masks through the real converter."""
  rng = np.random.default_rng(0)
  images_dir = folder / 'images'
  images_dir.mkdir(parents=True)
  images, anns = [], []
  for i, (h, w) in enumerate(shapes, start=1):
    Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(
        images_dir / f'{i}.jpg')
    images.append({'id': i, 'file_name': f'{i}.jpg', 'height': h, 'width': w})
    for k in range(instances + (i == 1)):
      polygon, box = _polygon_box(rng, h, w)
      anns.append({'id': len(anns) + 1, 'image_id': i,
                   'category_id': 3 if k % 2 else 7, 'bbox': box,
                   'area': box[2] * box[3] / 2, 'segmentation': [polygon],
                   'iscrowd': int(i == 1 and k == instances)})
  data = {'images': images, 'annotations': anns,
          'categories': [{'id': 3, 'name': 'three'},
                         {'id': 7, 'name': 'seven'}]}
  path = folder / 'instances.json'
  path.write_text(json.dumps(data))
  out = folder / 'out'
  for split in ('train', 'val'):
    convert_coco.convert(annotations=str(path), images=str(images_dir),
                         output_dir=str(out), split=split, num_shards=2,
                         include_masks=True)
  return str(out), data


@pytest.fixture(scope='module')
def maskrcnn_records(tmp_path_factory):
  return build(tmp_path_factory.mktemp('maskrcnn'))


# -- Google's sequence in NumPy ------------------------------------------------


def legacy_resize(image, height, width):
  """TF1 resize_images bilinear: source = out * in / out, no centres."""
  in_h, in_w = image.shape[:2]
  ys = np.arange(height) * (in_h / height)
  xs = np.arange(width) * (in_w / width)
  y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
  y1, x1 = np.minimum(y0 + 1, in_h - 1), np.minimum(x0 + 1, in_w - 1)
  dy, dx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
  top = image[y0][:, x0] * (1 - dx) + image[y0][:, x1] * dx
  bottom = image[y1][:, x0] * (1 - dx) + image[y1][:, x1] * dx
  return top * (1 - dy) + bottom * dy


def crop_and_resize(mask, box, size):
  """tf.image.crop_and_resize, bilinear, extrapolation 0, one box; the
  sample positions in float32 as the kernel computes them (the last row of
  a box reaching the edge can land a hair outside and read 0)."""
  h, w = mask.shape
  f = np.float32
  y1, x1, y2, x2 = box.astype(f)
  ys = y1 * f(h - 1) + np.arange(size, dtype=f) * ((y2 - y1) * f(h - 1) /
                                                  f(size - 1))
  xs = x1 * f(w - 1) + np.arange(size, dtype=f) * ((x2 - x1) * f(w - 1) /
                                                  f(size - 1))
  out = np.zeros([size, size])
  for i, y in enumerate(ys):
    for j, x in enumerate(xs):
      if not (0 <= y <= h - 1 and 0 <= x <= w - 1):
        continue
      t, l = int(np.floor(y)), int(np.floor(x))
      b, r = int(np.ceil(y)), int(np.ceil(x))
      dy, dx = y - t, x - l
      top = mask[t, l] + (mask[t, r] - mask[t, l]) * dx
      bottom = mask[b, l] + (mask[b, r] - mask[b, l]) * dx
      out[i, j] = top + (bottom - top) * dy
  return out


def google_train_example(image, boxes, classes, masks, flipped, geometry):
  """dataloader.py's training parser in NumPy, up to the RPN targets."""
  height, width = image.shape[:2]
  x = (image / 255.0 - maskrcnn.MEAN) / maskrcnn.STD
  if flipped:
    x, masks = x[:, ::-1], masks[:, :, ::-1]
    boxes = np.stack([boxes[:, 0], 1 - boxes[:, 3], boxes[:, 2],
                      1 - boxes[:, 1]], 1)
  scale = np.float32(min(np.float32(geometry.short_side) /
                         np.float32(min(height, width)),
                         np.float32(geometry.long_side_max) /
                         np.float32(max(height, width))))
  sh, sw = int(np.float32(height) * scale), int(np.float32(width) * scale)
  resized = legacy_resize(x, sh, sw)
  landscape = sh < sw
  out_h, out_w = geometry.padded_size(landscape)
  padded = np.zeros([out_h, out_w, 3])
  padded[:sh, :sw] = resized
  pixels = boxes * [sh, sw, sh, sw]
  pixels = np.clip(pixels, 0, [out_h - 1, out_w - 1] * 2)
  keep = pixels.sum(1) != 0
  crops = np.stack([np.pad(crop_and_resize(m, b, geometry.gt_mask_size), 2)
                    for m, b in zip(masks[keep], boxes[keep])])
  return {'image': padded.reshape(-1, 3), 'scale': scale, 'sh': sh, 'sw': sw,
          'pixels': pixels[keep], 'classes': classes[keep], 'crops': crops}


def test_train_example_follows_googles_sequence():
  rng = np.random.default_rng(1)
  for shape in ((48, 80), (80, 48), (37, 61)):
    image = rng.integers(0, 256, shape + (3,), np.uint8)
    masks = (rng.uniform(size=(3,) + shape) > 0.5).astype(np.float32)
    boxes = np.array([[0.1, 0.2, 0.6, 0.9], [0.0, 0.0, 1.0, 1.0],
                      [0.3, 0.05, 0.35, 0.5]], np.float32)
    classes = np.array([3, 7, 3], np.int32)
    anchors = (tf.constant(GEOMETRY.anchors_for(True)),
               tf.constant(GEOMETRY.anchors_for(False)))
    for seed_value in range(4):
      seed = tf.constant([seed_value, 11], tf.int64)
      got = {k: v.numpy() for k, v in maskrcnn.train_example(
          tf.constant(image), tf.constant(boxes), tf.constant(classes),
          tf.constant(masks), seed, geometry=GEOMETRY,
          anchors=anchors).items()}
      flip_seed = tf.random.experimental.stateless_split(seed, 3)[0]
      flipped = bool(tf.random.stateless_uniform([], flip_seed) > 0.5)
      want = google_train_example(image, boxes, classes, masks, flipped,
                                  GEOMETRY)
      np.testing.assert_allclose(got['image'], want['image'], atol=1e-4)
      np.testing.assert_allclose(
          got['image_info'], [want['sh'], want['sw'], 1 / want['scale'],
                              shape[0], shape[1]], rtol=1e-6)
      n = len(want['pixels'])
      np.testing.assert_allclose(got['gt_boxes'][:n],
                                 want['pixels'] / want['scale'], rtol=1e-5,
                                 atol=1e-4)
      assert (got['gt_boxes'][n:] == -1).all()
      np.testing.assert_array_equal(got['gt_classes'][:n], want['classes'])
      assert (got['gt_classes'][n:] == -1).all()
      np.testing.assert_allclose(got['gt_masks'][:n], want['crops'],
                                 atol=1e-5)
      assert (got['gt_masks'][n:] == -1).all()
      # The RPN's targets: the orientation's anchors, the scaled boxes.
      landscape = want['sh'] < want['sw']
      scores, codes = fpn_anchors.rpn_targets(
          tf.constant(want['pixels'], tf.float32),
          GEOMETRY.anchors_for(landscape),
          tf.random.experimental.stateless_split(seed, 3)[1])
      np.testing.assert_array_equal(got['rpn_score_targets'], scores)
      np.testing.assert_allclose(got['rpn_box_targets'], codes, atol=1e-4)
      assert (got['rpn_score_targets'] == 1).sum() > 0


def test_boxes_that_clip_to_nothing_are_dropped_with_their_masks():
  image = np.zeros((40, 60, 3), np.uint8)
  boxes = np.array([[-0.5, -0.5, -0.1, -0.1], [0.2, 0.2, 0.8, 0.8]],
                   np.float32)
  got = maskrcnn.train_example(
      tf.constant(image), tf.constant(boxes), tf.constant([3, 7]),
      tf.ones([2, 40, 60]), tf.constant([0, 0], tf.int64), geometry=GEOMETRY,
      anchors=(GEOMETRY.anchors_for(True), GEOMETRY.anchors_for(False)))
  got = {k: v.numpy() for k, v in got.items()}
  np.testing.assert_array_equal(got['gt_classes'], [7, -1, -1, -1])
  assert got['gt_masks'][0, 2:-2, 2:-2].min() == 1.0
  assert (got['gt_masks'][1:] == -1).all()


def test_more_instances_than_the_limit_keep_the_first():
  boxes = np.tile([[0.1, 0.1, 0.5, 0.5]], [6, 1]).astype(np.float32)
  got = maskrcnn.train_example(
      tf.zeros([40, 60, 3], tf.uint8), tf.constant(boxes),
      tf.constant([3, 7, 3, 7, 3, 7]), tf.ones([6, 40, 60]),
      tf.constant([0, 0], tf.int64), geometry=GEOMETRY,
      anchors=(GEOMETRY.anchors_for(True), GEOMETRY.anchors_for(False)))
  np.testing.assert_array_equal(got['gt_classes'], [3, 7, 3, 7])


# -- The datasets on real records ---------------------------------------------


def make_input(data_dir, **kwargs):
  return maskrcnn.MaskRcnnInput(data_dir=data_dir, geometry=GEOMETRY,
                                num_train_examples=len(SHAPES),
                                interleave_cycle=2, **kwargs)


def context(num_pipelines=1, pipeline_id=0, replicas=1):
  return tf.distribute.InputContext(num_pipelines, pipeline_id, replicas)


def test_training_batches_hold_one_orientation_and_leave_crowds_out(
    maskrcnn_records):
  data_dir, _ = maskrcnn_records
  data = make_input(data_dir, deterministic=True, seed=2)
  data.check()
  assert data.num_classes == 8  # Category ids 3 and 7 are the classes.
  ds = data.train_dataset(context(), global_batch_size=2)
  seen = {True: 0, False: 0}
  for batch in ds.take(12):
    info = batch['image_info'].numpy()
    landscape = info[:, 3] < info[:, 4]
    assert landscape.all() or not landscape.any()
    seen[bool(landscape[0])] += 1
    assert batch['image'].shape == (2, 64 * 128, 3)
    assert batch['rpn_score_targets'].shape == (2, GEOMETRY.num_anchors)
    assert batch['gt_masks'].shape == (2, 4, 16, 16)
    real = batch['gt_classes'].numpy() > 0
    # Image 1 (48x80) has three instances, one a crowd: two reach training.
    assert real.sum(1).max() <= 2
    assert set(batch['gt_classes'].numpy()[real].tolist()) <= {3, 7}
  assert seen[True] and seen[False]


def test_eval_covers_every_image_once_over_hosts(maskrcnn_records):
  data_dir, coco = maskrcnn_records
  data = make_input(data_dir)
  # Landscape: 48x80, 40x90, 50x70; portrait: 80x48, 64x64, 70x50.
  counts = maskrcnn.orientation_counts(
      sorted(tf.io.gfile.glob(f'{data_dir}/val-*')), 1)
  assert counts == [(3, 3)]
  assert data.num_eval_examples() == 6
  for pipelines, batch in ((1, 2), (2, 2), (2, 4)):
    steps = data.eval_steps(num_pipelines=pipelines,
                            global_batch_size=batch * pipelines)
    ids = []
    for p in range(pipelines):
      batches = list(data.eval_dataset(
          context(pipelines, p, pipelines), global_batch_size=batch *
          pipelines, steps=steps))
      assert len(batches) == steps
      for b in batches:
        info = b['image_info'].numpy()
        landscape = info[:, 3] < info[:, 4]
        assert landscape.all() or not landscape.any()
        real = b['mask'].numpy() == 1
        ids += b['image_id'].numpy()[real].tolist()
        assert (b['image_id'].numpy()[~real] == -1).all()
    assert sorted(ids) == [im['id'] for im in coco['images']]


def test_eval_image_is_the_training_image_without_flip():
  image = np.random.default_rng(3).integers(0, 256, (50, 70, 3), np.uint8)
  got = maskrcnn.eval_example(tf.constant(image), 5, geometry=GEOMETRY)
  want = google_train_example(image, np.array([[0.1, 0.1, 0.5, 0.5]]),
                              np.ones([1]), np.zeros([1, 50, 70]), False,
                              GEOMETRY)
  np.testing.assert_allclose(got['image'], want['image'], atol=1e-4)


def test_records_without_masks_are_named_before_compute(tmp_path,
                                                        maskrcnn_records):
  data_dir, _ = maskrcnn_records
  source = os.path.dirname(data_dir)  # build()'s folder.
  plain = str(tmp_path / 'plain')
  for split in ('train', 'val'):
    convert_coco.convert(annotations=os.path.join(source, 'instances.json'),
                         images=os.path.join(source, 'images'),
                         output_dir=plain, split=split, num_shards=1)
  with pytest.raises(ValueError, match=r"has no feature 'image/object/mask'"
                     r'.*--include_masks'):
    make_input(plain).check()


def test_bad_geometry_names_its_binding():
  with pytest.raises(ValueError, match=r'Geometry.image_size \(64, 100\) is '
                     'not a multiple of the largest feature stride 64'):
    maskrcnn.MaskRcnnInput(geometry=maskrcnn.Geometry(
        image_size=(64, 100), short_side=60, long_side_max=100))
