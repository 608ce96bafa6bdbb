"""tools/build_ssd_quickstart_data.py: with --include_masks each digit's
mask is its ink, exactly, and agrees with its box and area; the INT8
calibration canvases are training canvases."""

import collections
import io
import json
import os

import numpy as np
from PIL import Image
import tensorflow as tf

from tools import build_ssd_quickstart_data as build_data


def test_masks_are_the_ink_and_agree_with_boxes_and_areas(tmp_path):
  done = build_data.build(str(tmp_path), train_canvases=3, eval_digits=6,
                          include_masks=True)
  assert done['val'].boxes == 6
  size = build_data.CANVAS
  instances = 0
  areas = collections.defaultdict(list)  # The COCO file's, by image.
  with open(os.path.join(tmp_path, 'val_annotations.json')) as f:
    for a in json.load(f)['annotations']:
      areas[a['image_id']].append(a['area'])
  for split in ('train', 'val'):
    for raw in tf.data.TFRecordDataset(done[split].paths):
      f = tf.train.Example.FromString(raw.numpy()).features.feature
      masks = [np.asarray(Image.open(io.BytesIO(png)))
               for png in f['image/object/mask'].bytes_list.value]
      boxes = np.stack([f[f'image/object/bbox/{k}'].float_list.value
                        for k in ('ymin', 'xmin', 'ymax', 'xmax')], 1)
      assert len(masks) == len(boxes) > 0
      assert sum(m.astype(int) for m in masks).max() == 1  # No overlap.
      for mask, box in zip(masks, boxes):
        rows, cols = np.nonzero(mask)
        extent = np.array([rows.min(), cols.min(), rows.max() + 1,
                           cols.max() + 1]) / size
        np.testing.assert_allclose(box, extent, atol=1e-6)
        instances += 1
      if split == 'val':
        image_id = int(f['image/source_id'].bytes_list.value[0])
        assert [float(m.sum()) for m in masks] == areas[image_id]
  assert instances == done['train'].boxes + done['val'].boxes


def test_calibration_canvases_are_training_canvases_in_the_eval_layout(
    tmp_path):
  done = build_data.build(str(tmp_path), train_canvases=4, eval_digits=6,
                          calibration_canvases=2)
  folder = tmp_path / 'calibration'
  assert done['calibration'].images == 2
  assert sorted(p.name for p in folder.glob('val-*')) == [
      'val-00000-of-00001']
  assert (folder / 'categories.json').read_text() == (
      tmp_path / 'categories.json').read_text()

  def jpegs(paths):
    return [tf.train.Example.FromString(raw.numpy()).features.feature[
        'image/encoded'].bytes_list.value[0]
            for raw in tf.data.TFRecordDataset(paths)]
  calibration = jpegs(done['calibration'].paths)
  train = set(jpegs(done['train'].paths))
  # The first training canvases, none of the eval ones.
  assert set(calibration) <= train
  assert not set(calibration) & set(jpegs(done['val'].paths))
