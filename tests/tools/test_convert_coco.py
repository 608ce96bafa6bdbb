"""tools/convert_coco.py: COCO JSON + images to SSD's records, and bad input
named before anything appears."""

import copy
import io
import json
import os
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from tools import convert_coco


def coco_folder(tmp_path, n_images=3):
  """A small real COCO set: JPEG and PNG images, crowd and edge boxes."""
  images_dir = tmp_path / 'images'
  images_dir.mkdir()
  images, anns = [], []
  rng = np.random.default_rng(0)
  for i in range(1, n_images + 1):
    name = f'{i:03d}.png' if i == 2 else f'{i:03d}.jpg'
    pixels = rng.integers(0, 255, (40, 60, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(images_dir / name)
    images.append({'id': 100 + i, 'file_name': name, 'height': 40,
                   'width': 60})
  anns = [
      {'id': 1, 'image_id': 101, 'category_id': 5, 'bbox': [6, 4, 30, 20],
       'area': 600, 'iscrowd': 0},
      # Reaches 0.5 px past the right edge: clipped, as COCO has many.
      {'id': 2, 'image_id': 101, 'category_id': 9, 'bbox': [40, 10, 20.5, 8],
       'area': 160, 'iscrowd': 1},
      {'id': 3, 'image_id': 102, 'category_id': 5, 'bbox': [0, 0, 60, 40],
       'area': 2400, 'iscrowd': 0},
  ]  # Image 103 has no boxes.
  data = {'images': images, 'annotations': anns,
          'categories': [{'id': 5, 'name': 'five'}, {'id': 9, 'name': 'nine'}]}
  path = tmp_path / 'instances.json'
  path.write_text(json.dumps(data))
  return str(path), str(images_dir), data


def convert(tmp_path, annotations, images, **kwargs):
  return convert_coco.convert(annotations=annotations, images=images,
                              output_dir=str(tmp_path / 'out'),
                              split=kwargs.pop('split', 'val'),
                              num_shards=kwargs.pop('num_shards', 2),
                              **kwargs)


def read_records(paths):
  out = []
  for raw in tf.data.TFRecordDataset(paths):
    f = tf.train.Example.FromString(raw.numpy()).features.feature
    out.append({k: (v.bytes_list.value or v.float_list.value or
                    v.int64_list.value) for k, v in f.items()})
  return out


def test_records_hold_every_image_with_its_boxes_and_the_annotations(tmp_path):
  annotations, images, data = coco_folder(tmp_path)
  done = convert(tmp_path, annotations, images)
  assert (done.images, done.boxes, done.images_without_boxes) == (3, 3, 1)
  out = tmp_path / 'out'
  assert sorted(os.listdir(out)) == ['categories.json', 'val-00000-of-00002',
                                     'val-00001-of-00002',
                                     'val_annotations.json']
  assert json.loads((out / 'val_annotations.json').read_text()) == data
  assert [c['id'] for c in json.loads((out / 'categories.json').read_text())
          ] == [5, 9]
  records = {int(r['image/source_id'][0]): r
             for r in read_records(done.paths)}
  assert sorted(records) == [101, 102, 103]
  first = records[101]
  assert list(first['image/object/class/label']) == [5, 9]
  assert list(first['image/object/is_crowd']) == [0, 1]
  np.testing.assert_allclose(first['image/object/bbox/xmin'], [0.1, 40 / 60])
  np.testing.assert_allclose(first['image/object/bbox/ymax'], [0.6, 0.45])
  np.testing.assert_allclose(first['image/object/bbox/xmax'], [0.6, 1.0])
  assert not records[103].get('image/object/class/label')
  # The PNG became an RGB JPEG.
  assert records[102]['image/encoded'][0][:3] == b'\xff\xd8\xff'
  # A train split keeps no annotation copy; the categories must agree.
  convert(tmp_path, annotations, images, split='train')
  assert not (out / 'train_annotations.json').exists()


def bad(data, change):
  data = copy.deepcopy(data)
  change(data)
  return data


BAD_INPUT = [
    (lambda d: d.pop('annotations'), r"not a COCO annotation file: it has no "
     r"'annotations'"),
    (lambda d: d['annotations'][0].update(image_id=7), r'annotation 1 names '
     r'image 7, which the file does not list'),
    (lambda d: d['annotations'][2].update(category_id=3), r'annotation 3 names '
     r'category 3'),
    (lambda d: d['annotations'][0].update(bbox=[6, 4, 0, 20]), r'annotation 1:'
     r' box \[6, 4, 0, 20\] has no area .*--on_bad_annotation=skip'),
    (lambda d: d['annotations'][0].update(bbox=[50, 4, 30, 20]),
     r'annotation 1: box .* reaches outside its 60x40 image 001.jpg'),
    (lambda d: d['images'][2].update(file_name='gone.jpg'), r'Image 103: '
     r'.*gone.jpg does not exist'),
]


@pytest.mark.parametrize('change,message', BAD_INPUT)
def test_bad_input_is_named_and_nothing_is_written(tmp_path, change, message):
  annotations, images, data = coco_folder(tmp_path)
  with open(annotations, 'w') as f:
    json.dump(bad(data, change), f)
  with pytest.raises(ValueError, match=message):
    convert(tmp_path, annotations, images)
  out = tmp_path / 'out'
  assert not out.exists() or not os.listdir(out)


def test_a_file_that_is_no_image_is_named(tmp_path):
  annotations, images, _ = coco_folder(tmp_path)
  with open(os.path.join(images, '003.jpg'), 'wb') as f:
    f.write(b'GIF89a not really')
  with pytest.raises(ValueError, match=r'Image 103: .*003.jpg is not a JPEG '
                     r'or PNG file \(starts 47 49 46 38\)'):
    convert(tmp_path, annotations, images)
  assert not os.listdir(tmp_path / 'out')


def test_skip_leaves_bad_boxes_out_and_counts_them(tmp_path):
  annotations, images, data = coco_folder(tmp_path)
  with open(annotations, 'w') as f:
    json.dump(bad(data, lambda d: d['annotations'][0].update(
        bbox=[6, 4, 30, -1])), f)
  done = convert(tmp_path, annotations, images, on_bad_annotation='skip')
  assert done.boxes == 2 and [a for a, _ in done.skipped] == [1]


def test_command_line_usage_and_error_line(tmp_path):
  annotations, images, data = coco_folder(tmp_path)
  with open(annotations, 'w') as f:
    json.dump(bad(data, lambda d: d['annotations'][0].update(image_id=7)), f)
  run = subprocess.run(
      [sys.executable, '-m', 'tools.convert_coco', f'--annotations={annotations}',
       f'--images={images}', f'--output_dir={tmp_path / "out"}', '--split=val'],
      capture_output=True, text=True, check=False)
  assert run.returncode == 2
  assert run.stderr.strip().splitlines()[-1].startswith(
      f'error: {annotations}, annotation 1 names image 7')
  usage = subprocess.run([sys.executable, '-m', 'tools.convert_coco',
                          '--help'], capture_output=True, text=True,
                         check=False)
  assert '--annotations' in usage.stdout and 'convert_coco' in usage.stdout


def _uncompressed_rle(mask):
  """COCO's uncompressed RLE of a 0/1 mask: run lengths in column-major
  order, starting with a run of zeros (what crowd regions carry)."""
  flat = mask.flatten(order='F')
  changes = np.flatnonzero(np.diff(flat)) + 1
  runs = np.diff(np.concatenate([[0], changes, [flat.size]]))
  counts = ([0] if flat[0] else []) + runs.tolist()
  return {'size': list(mask.shape), 'counts': counts}


def with_segmentations(data):
  """`data` with one instance in each of COCO's three forms."""
  from pycocotools import mask as mask_utils
  data = copy.deepcopy(data)
  anns = data['annotations']
  # Two polygons (their union), inside the box [6, 4, 30, 20].
  anns[0]['segmentation'] = [[6, 4, 20, 4, 13, 24], [22, 6, 36, 6, 36, 20,
                                                       22, 20]]
  crowd = np.zeros((40, 60), np.uint8)
  crowd[10:18, 41:60] = 1
  crowd[12:14, 45:50] = 0
  anns[1]['segmentation'] = _uncompressed_rle(crowd)
  whole = np.zeros((40, 60), np.uint8)
  whole[3:37, 5:55] = 1
  rle = mask_utils.encode(np.asfortranarray(whole))
  anns[2]['segmentation'] = {'size': rle['size'],
                             'counts': rle['counts'].decode()}
  return data


def test_masks_are_pngs_equal_to_cocos_own_masks(tmp_path):
  from pycocotools.coco import COCO
  annotations, images, data = coco_folder(tmp_path)
  data = with_segmentations(data)
  with open(annotations, 'w') as f:
    json.dump(data, f)
  done = convert(tmp_path, annotations, images, include_masks=True)
  records = {int(r['image/source_id'][0]): r
             for r in read_records(done.paths)}
  coco = COCO(annotations)
  for image_id, ann_ids in ((101, [1, 2]), (102, [3])):
    pngs = records[image_id]['image/object/mask']
    assert len(pngs) == len(ann_ids)
    for png, ann_id in zip(pngs, ann_ids):
      decoded = Image.open(io.BytesIO(png))
      assert decoded.format == 'PNG' and decoded.mode == 'L'
      mask = np.asarray(decoded)
      expected = coco.annToMask(coco.anns[ann_id])
      assert expected.sum() > 0
      np.testing.assert_array_equal(mask, expected)
  assert not records[103].get('image/object/mask')
  # Without the flag, no masks (SSD's records stay as they were).
  plain = convert(tmp_path / 'plain', annotations, images)
  assert not any(r.get('image/object/mask')
                 for r in read_records(plain.paths))


BAD_MASKS = [
    (lambda d: d['annotations'][0].update(segmentation=[[6, 4, 20, 4]]),
     r'annotation 1: segmentation polygon has 4 coordinates'),
    (lambda d: d['annotations'][1]['segmentation'].update(size=[60, 40]),
     r"annotation 2: segmentation RLE size \[60, 40\] is not its image's "
     r'\[40, 60\]'),
    (lambda d: d['annotations'][1]['segmentation']['counts'].append(5),
     r'annotation 2: segmentation RLE counts cover 2405 pixels, not 40 x 60'),
    (lambda d: d['annotations'][2].pop('segmentation'),
     r'annotation 3: no segmentation \(--include_masks needs one\)'),
]


@pytest.mark.parametrize('change,message', BAD_MASKS)
def test_bad_masks_are_named_and_nothing_is_written(tmp_path, change,
                                                    message):
  annotations, images, data = coco_folder(tmp_path)
  with open(annotations, 'w') as f:
    json.dump(bad(with_segmentations(data), change), f)
  with pytest.raises(ValueError, match=message):
    convert(tmp_path, annotations, images, include_masks=True)
  out = tmp_path / 'out'
  assert not out.exists() or not os.listdir(out)
