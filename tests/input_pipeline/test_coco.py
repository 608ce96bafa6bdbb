"""SSD's COCO pipelines: Google's crop in NumPy, training targets, eval
coverage over hosts, and the checks before compute."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import coco
from input_pipeline import ssd_boxes

GEOMETRY = ssd_boxes.Geometry(image_size=160, feature_sizes=(20, 10, 5, 3, 1),
                              steps=(8, 16, 32, 53, 160),
                              scales=(16, 32, 64, 96, 128, 160),
                              aspect_ratios=((2,), (2, 3), (2, 3), (2,), (2,)))


def numpy_google_crop_proposal(boxes, width, height, u_left, u_top, min_iou):
  """dataloader.py's crop_proposal with its own names: its `ltrb` is
  (left, top, right, bottom) but is compared with boxes' (ymin, xmin,
  ymax, xmax) columns and cropped as (y1, x1, y2, x2): `left` runs along
  the height."""
  left, top = u_left * (1 - width), u_top * (1 - height)
  right, bottom = left + width, top + height
  ltrb = np.stack([left, top, right, bottom], 1)
  lt = np.maximum(ltrb[:, None, :2], boxes[None, :, :2])
  rb = np.minimum(ltrb[:, None, 2:], boxes[None, :, 2:])
  inter = np.prod(np.maximum(rb - lt, 0), -1)
  a1 = np.prod(ltrb[:, 2:] - ltrb[:, :2], 1)[:, None]
  a2 = np.prod(boxes[:, 2:] - boxes[:, :2], 1)[None]
  ious = inter / (a1 + a2 - inter)
  xc = 0.5 * (boxes[:, 0] + boxes[:, 2])[None]
  yc = 0.5 * (boxes[:, 1] + boxes[:, 3])[None]
  masks = ((xc > left[:, None]) & (xc < right[:, None]) &
           (yc > top[:, None]) & (yc < bottom[:, None]))
  valid = ((height / width < 2) & (width / height < 2) &
           np.all(ious > min_iou, 1) & np.any(masks, 1))
  index = np.arange(1, 51)
  selection = np.max(index * valid) == index
  return (selection.any(), (ltrb * selection[:, None]).sum(0),
          np.any(masks & selection[:, None], 0))


def test_crop_proposal_equals_googles_for_the_same_draws():
  rng = np.random.default_rng(0)
  hits = 0
  for trial in range(40):
    n = 1 + trial % 4
    yx = rng.uniform(0, 0.7, (n, 2))
    boxes = np.concatenate([yx, yx + rng.uniform(0.05, 0.3, (n, 2))], 1)
    boxes = boxes.astype(np.float32)
    heights, widths = (rng.uniform(0.3, 1, 50).astype(np.float32)
                       for _ in range(2))
    u_top, u_left = (rng.uniform(0, 1, 50).astype(np.float32)
                     for _ in range(2))
    min_iou = coco.CROP_MIN_IOU_CHOICES[trial % 6]
    use, window, kept = (t.numpy() for t in coco.crop_proposal(
        tf.constant(boxes), tf.constant(heights), tf.constant(widths),
        tf.constant(u_top), tf.constant(u_left), tf.constant(min_iou)))
    want = numpy_google_crop_proposal(boxes, heights, widths, u_top, u_left,
                                      min_iou)
    assert use == want[0]
    np.testing.assert_allclose(window, want[1], rtol=1e-6)
    np.testing.assert_array_equal(kept, want[2])
    hits += bool(use)
  assert 5 < hits < 40  # Both outcomes were exercised.


def make_input(data_dir, **kwargs):
  return coco.CocoInput(data_dir=data_dir, geometry=GEOMETRY,
                        num_train_examples=40, interleave_cycle=2,
                        **kwargs)


def _jpeg(pixels, **options):
  import io  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  out = io.BytesIO()
  Image.fromarray(pixels).save(out, format='JPEG', **options)
  return tf.constant(out.getvalue())


def test_decode_window_is_the_crop_and_resize_of_the_whole_image():
  """Decoding only the blocks around the window, and flipping by the
  window's mirror, gives the values of crop_and_resize over the whole
  decoded image (then reversed): JPEGs of each chroma layout, progressive,
  grey, sides not multiples of 16, windows at the edges and tiny ones."""
  rng = np.random.default_rng(7)
  base = rng.integers(0, 255, (30, 40, 3)).astype(np.uint8)
  from PIL import Image  # pylint: disable=import-outside-toplevel
  photo = np.asarray(Image.fromarray(base).resize((333, 250)))
  photo = np.clip(photo + rng.normal(0, 20, photo.shape), 0, 255).astype(
      np.uint8)
  jpegs = [_jpeg(photo, quality=90), _jpeg(photo, subsampling=0),
           _jpeg(photo, progressive=True), _jpeg(photo[..., 0])]
  windows = [[0, 0, 1, 1], [0.31, 0.07, 0.9, 0.55], [0.5, 0.5, 0.52, 0.53],
             [0, 0.6, 0.4, 1], [0.7, 0, 1, 0.3]]
  for jpeg in jpegs:
    whole = tf.io.decode_jpeg(jpeg, channels=3)[None]
    for window in windows:
      want = tf.image.crop_and_resize(whole, [window], [0], [64, 64])[0]
      for flip in (False, True):
        got = coco.decode_window(jpeg, tf.constant(window, tf.float32),
                                 tf.constant(flip), 64)
        np.testing.assert_allclose(got, want[:, ::-1] if flip else want,
                                   atol=0.02)


def googles_jitter(image, seed):
  """Google's color_jitter as TensorFlow's stateless ops draw it."""
  s = tf.random.experimental.stateless_split(seed, 4)
  image = tf.image.stateless_random_brightness(image, 0.125, s[0])
  image = tf.image.stateless_random_contrast(image, 0.5, 1.5, s[1])
  image = tf.image.stateless_random_saturation(image, 0.5, 1.5, s[2])
  return tf.image.stateless_random_hue(image, 0.05, s[3])


def test_jitter_factors_on_the_host_and_applied_on_the_device_are_googles():
  rng = np.random.default_rng(0)
  images = rng.uniform(size=(6, 24, 20, 3)).astype(np.float32)
  images[1] = images[1, ..., :1]  # Grey.
  images[2] = images[2] > 0.5  # Saturated colours and black.
  seeds = [tf.constant([i, 11 * i + 3], tf.int64) for i in range(6)]
  want = np.stack([googles_jitter(im, s) for im, s in zip(images, seeds)])
  jitter = tf.stack([coco.jitter_factors(im, s)
                     for im, s in zip(images, seeds)])
  np.testing.assert_allclose(coco.apply_jitter(images, jitter), want,
                             atol=1e-5)
  # Height slices jittered apart (spatial partitioning) are the same.
  halves = [coco.apply_jitter(images[:, rows], jitter)
            for rows in (slice(0, 10), slice(10, 24))]
  np.testing.assert_allclose(np.concatenate(halves, 1), want, atol=1e-5)
  # XLA (a TPU's compiler) takes it whole, with the same values.
  compiled = tf.function(coco.apply_jitter, jit_compile=True)
  np.testing.assert_allclose(compiled(images, jitter), want, atol=1e-5)
  # Each factor matters: without the hue shift it is off.
  no_hue = tf.concat([jitter[:, :3], tf.zeros([6, 1]), jitter[:, 4:]], 1)
  assert np.abs(coco.apply_jitter(images, no_hue) - want).max() > 1e-2


def test_training_batches_carry_targets_for_every_default_box(ssd_data):
  data = make_input(ssd_data, deterministic=True, seed=3)
  data.check()
  assert data.num_classes == 11 and data.category_ids == list(range(1, 11))
  ctx = tf.distribute.InputContext()
  batch = next(iter(data.train_dataset(ctx, global_batch_size=6)))
  assert batch['image'].shape == (6, 160, 160, 3)
  assert batch['classes'].shape == (6, GEOMETRY.num_boxes)
  assert batch['boxes'].shape == (6, GEOMETRY.num_boxes, 4)
  assert batch['jitter'].shape == (6, coco.JITTER_SIZE)
  # The host leaves the image unjittered in [0, 1]; the contrast's centre is
  # its brightened means.
  assert 0 <= batch['image'].numpy().min() and batch['image'].numpy().max() <= 1
  np.testing.assert_allclose(
      batch['jitter'][:, 4:],
      batch['image'].numpy().mean((1, 2)) + batch['jitter'][:, :1],
      atol=1e-5)
  classes = batch['classes'].numpy()
  np.testing.assert_array_equal(batch['num_matched'].numpy(),
                                (classes > 0).sum(1))
  assert (classes > 0).sum(1).min() >= 1 and classes.max() <= 10
  # Matched targets decode to boxes inside the (cropped) image.
  anchors = ssd_boxes.default_boxes(GEOMETRY)
  decoded = ssd_boxes.decode(batch['boxes'], anchors).numpy()[classes > 0]
  assert decoded.min() > -1e-4 and decoded.max() < 1 + 1e-4
  # Deterministic: the same stream again, and a resumed one starts where a
  # run at that step is.
  again = next(iter(data.train_dataset(ctx, global_batch_size=6)))
  np.testing.assert_array_equal(again['image'], batch['image'])
  stream = iter(data.train_dataset(ctx, global_batch_size=6))
  second = [next(stream) for _ in range(2)][1]
  resumed = next(iter(data.train_dataset(ctx, global_batch_size=6,
                                         start_step=1)))
  np.testing.assert_array_equal(resumed['classes'], second['classes'])


def test_eval_over_three_hosts_covers_every_image_once(ssd_data):
  data = make_input(ssd_data)
  total = data.num_eval_examples()
  steps = data.eval_steps(num_pipelines=3, global_batch_size=12)
  seen = []
  for host in range(3):
    ctx = tf.distribute.InputContext(3, host, 3)
    for batch in data.eval_dataset(ctx, global_batch_size=12, steps=steps):
      real = batch['mask'].numpy() == 1
      seen += batch['image_id'].numpy()[real].tolist()
      assert (batch['raw_shape'].numpy()[real] == 160).all()
  assert len(seen) == len(set(seen)) == total
  assert set(seen) == set(range(1, total + 1))


def test_checks_name_what_is_missing(ssd_data, tmp_path, quickstart_data):
  copy = tmp_path / 'copy'
  shutil.copytree(ssd_data, copy, ignore=shutil.ignore_patterns('coco'))
  os.remove(copy / 'categories.json')
  with pytest.raises(ValueError, match=r'categories.json is missing.*'
                     r'tools.convert_coco'):
    make_input(str(copy)).check()
  # ImageNet-schema records are not detection records.
  wrong = coco.CocoInput(data_dir=quickstart_data, train_pattern='train-*',
                         eval_pattern='validation-*')
  with pytest.raises(ValueError, match=r"no feature 'image/source_id'.*"
                     r'tools.convert_coco'):
    wrong.check()
