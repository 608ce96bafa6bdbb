"""COCO box mAP: pycocotools' known answers on a real annotation file, the
pool of processes equal to one process bit for bit, every image once."""

import json
import os

import numpy as np
import pytest

from models.common import coco_metric


def annotations(ssd_data):
  path = os.path.join(ssd_data, 'val_annotations.json')
  with open(path) as f:
    return path, json.load(f)


def outputs_of(rows, image_ids, per_image=200):
  """HostMetric chunks from [n, 7] rows (image, x, y, w, h, score, label)."""
  boxes = np.zeros([len(image_ids), per_image, 4], np.float32)
  scores = np.zeros([len(image_ids), per_image], np.float32)
  classes = np.ones([len(image_ids), per_image], np.int32)
  for i, image_id in enumerate(image_ids):
    mine = rows[rows[:, 0] == image_id][:per_image]
    boxes[i, :len(mine)] = mine[:, 1:5]
    scores[i, :len(mine)] = mine[:, 5]
    classes[i, :len(mine)] = mine[:, 6]
  return {'image_id': np.asarray(image_ids, np.int32), 'boxes': boxes,
          'scores': scores, 'classes': classes}


def ground_truth_rows(data, shift_to_iou=None):
  rows = []
  for ann in data['annotations']:
    x, y, w, h = ann['bbox']
    if shift_to_iou:  # Slide right so that IoU = (w - d) / (w + d).
      r = shift_to_iou
      x += w * (1 - r) / (1 + r)
    rows.append([ann['image_id'], x, y, w, h, 1.0, ann['category_id']])
  return np.array(rows, np.float64)


def metric_of(path, data, processes):
  # The digits' category ids are 1..10 = labels 1..10.
  return coco_metric.CocoMetric(annotation_file=path,
                                category_ids=list(range(1, 11)),
                                processes=processes)


def evaluate(metric, rows, image_ids, chunk=7):
  metric.reset()
  for start in range(0, len(image_ids), chunk):
    metric.update(outputs_of(rows, image_ids[start:start + chunk]))
  return metric.result()


def test_perfect_detections_score_1_and_a_known_shift_scores_0_3(ssd_data):
  path, data = annotations(ssd_data)
  ids = [im['id'] for im in data['images']]
  metric = metric_of(path, data, processes=0)
  assert evaluate(metric, ground_truth_rows(data), ids)['AP'] == 1.0
  # Every box at IoU 0.62 with its own: a hit at the thresholds 0.50, 0.55
  # and 0.60 of the ten, a miss above.
  shifted = evaluate(metric, ground_truth_rows(data, 0.62), ids)
  assert shifted['AP'] == pytest.approx(0.3, abs=1e-9)
  assert shifted['AP50'] == 1.0 and shifted['AP75'] == 0.0


def noisy_rows(data):
  """Detections near the truth (some of the wrong class) and false
  positives elsewhere: an AP between 0.1 and 0.9."""
  rng = np.random.default_rng(0)
  rows = ground_truth_rows(data)
  noisy = rows.copy()
  noisy[:, 1:5] += rng.normal(0, 2.0, (len(rows), 4))
  noisy[:, 5] = rng.uniform(0.05, 1, len(rows))
  noisy[:, 6] = np.where(rng.uniform(size=len(rows)) < 0.2,
                         rng.integers(1, 11, len(rows)), rows[:, 6])
  extra = noisy.copy()  # False positives elsewhere.
  extra[:, 1:3] = rng.uniform(0, 100, (len(rows), 2))
  extra[:, 5] *= 0.5
  return np.concatenate([noisy, extra])


def test_pool_of_processes_equals_pycocotools_bit_for_bit(ssd_data):
  path, data = annotations(ssd_data)
  ids = [im['id'] for im in data['images']]
  rows = noisy_rows(data)
  pooled = metric_of(path, data, processes=2)
  try:
    got = evaluate(pooled, rows, ids)
  finally:
    pooled.close()
  want = coco_metric.coco_map(coco_metric.load_annotations(path),
                              pooled.detections())
  assert 0.1 < want['AP'] < 0.9
  for name in coco_metric.STAT_NAMES:
    assert got[name] == want[name], name  # Bit for bit.


def test_every_image_must_come_once(ssd_data):
  path, data = annotations(ssd_data)
  ids = [im['id'] for im in data['images']]
  rows = ground_truth_rows(data)
  metric = metric_of(path, data, processes=0)
  metric.update(outputs_of(rows, ids[:3]))
  with pytest.raises(RuntimeError, match=f'image {ids[1]} was detected twice'):
    metric.update(outputs_of(rows, ids[1:2]))
  metric.reset()
  metric.update(outputs_of(rows, ids[1:]))
  with pytest.raises(RuntimeError, match=rf'1 of {len(ids)} images of .*'
                     r'were not evaluated'):
    metric.result()


def test_hosts_records_give_the_one_host_map_bit_for_bit(ssd_data):
  path, data = annotations(ssd_data)
  ids = [im['id'] for im in data['images']]
  rows = noisy_rows(data)
  whole = metric_of(path, data, processes=0)
  want = evaluate(whole, rows, ids)
  assert 0.1 < want['AP'] < 0.9
  # Three hosts with interleaved images (as replicas take batches), one
  # evaluating its share in a pool of 2 processes.
  rng = np.random.default_rng(1)
  host_of = rng.integers(0, 3, len(ids))
  hosts = [metric_of(path, data, processes=p) for p in (0, 2, 0)]
  try:
    for h, metric in enumerate(hosts):
      mine = [i for i, host in zip(ids, host_of) if host == h]
      for start in range(0, len(mine), 5):
        metric.update(outputs_of(rows, mine[start:start + 5]))
    parts = [m.statistics() for m in hosts]
  finally:
    hosts[1].close()
  got = hosts[0].result_from(parts)
  assert got == want  # Every statistic bit for bit, images and detections.
  # What travels: fewer numbers than the detections' own 7 each (here 345
  # for 80 detections, image ids included).
  assert sum(len(p) for p in parts) < 7 * len(rows)
  assert whole.result_from([whole.statistics()]) == want
  # A host's images missing, or twice.
  evaluated = len(ids) - int(np.sum(host_of == 2))
  with pytest.raises(RuntimeError,
                     match=rf'evaluated {evaluated} images .* of the '
                     rf'{len(ids)}'):
    hosts[0].result_from(parts[:2])
  with pytest.raises(RuntimeError, match='every image once'):
    hosts[0].result_from(parts + parts[2:])
  # A host with no eval image (more hosts than images) sends its empty share.
  idle = metric_of(path, data, processes=0)
  assert hosts[0].result_from(parts + [idle.statistics()]) == want


# -- Masks (Mask R-CNN) --------------------------------------------------------


def mask_outputs(path, data, rows, image_ids, size=28):
  """outputs_of(rows) with each detection's mask: its ground truth's mask
  sampled at the centres of a size x size grid over the detection's box
  (rows in annotation order, one a ground truth)."""
  gt = coco_metric.load_annotations(path)
  out = outputs_of(rows, image_ids)
  masks = np.zeros(out['boxes'].shape[:2] + (size, size), np.float32)
  sizes = {im['id']: (im['height'], im['width']) for im in data['images']}
  for i, image_id in enumerate(image_ids):
    mine = [a for a in data['annotations'] if a['image_id'] == image_id]
    for j, (ann, row) in enumerate(zip(mine, rows[rows[:, 0] == image_id])):
      truth = gt.annToMask(ann)
      x, y, w, h = row[1:5]
      ys = np.clip((y + (np.arange(size) + 0.5) * h / size).astype(int), 0,
                   truth.shape[0] - 1)
      xs = np.clip((x + (np.arange(size) + 0.5) * w / size).astype(int), 0,
                   truth.shape[1] - 1)
      masks[i, j] = truth[ys][:, xs]
  out['masks'] = masks
  out['image_size'] = np.asarray([sizes[i] for i in image_ids], np.int32)
  return out


def test_masks_pasted_in_a_pool_equal_pycocotools_segm_bit_for_bit(ssd_data):
  path, data = annotations(ssd_data)
  ids = [im['id'] for im in data['images']]
  exact, shifted = ground_truth_rows(data), ground_truth_rows(data, 0.8)

  def run(rows, processes):
    metric = coco_metric.CocoMetric(
        annotation_file=path, category_ids=list(range(1, 11)),
        processes=processes, iou_types=('bbox', 'segm'))
    try:
      for start in range(0, len(ids), 7):
        metric.update(mask_outputs(path, data, rows, ids[start:start + 7]))
      return metric.result(), metric
    finally:
      metric.close()

  got, metric = run(exact, processes=2)
  # Masks drawn from the ground truth at 28x28 and pasted back: nearly
  # every mask matches at IoU 0.5, most at the stricter thresholds.
  assert got['AP'] > 0.99 and 0.6 < got['segm_AP'] <= 1.0
  assert got['segm_AP50'] > 0.95
  gt = coco_metric.load_annotations(path)
  sizes = {im['id']: (im['height'], im['width']) for im in data['images']}
  want = coco_metric.coco_map(
      gt, None, iou_type='segm', segmentations=coco_metric.segmentation_results(
          metric.detections(), metric.masks(), sizes))
  for name in coco_metric.STAT_NAMES:
    assert got[f'segm_{name}'] == want[name], name  # Bit for bit.
  one, _ = run(exact, processes=0)
  assert one == got
  # Boxes slid to IoU 0.8 cut their masks: both APs fall.
  worse, _ = run(shifted, processes=0)
  assert worse['AP'] < got['AP'] and worse['segm_AP'] < got['segm_AP'] - 0.05


def test_hosts_mask_records_give_the_one_host_segm_ap(ssd_data):
  path, data = annotations(ssd_data)
  ids = [im['id'] for im in data['images']]
  rows = ground_truth_rows(data, 0.9)

  def metric():
    return coco_metric.CocoMetric(
        annotation_file=path, category_ids=list(range(1, 11)), processes=0,
        iou_types=('bbox', 'segm'))

  whole = metric()
  whole.update(mask_outputs(path, data, rows, ids))
  want = whole.result()
  hosts = [metric(), metric()]
  hosts[0].update(mask_outputs(path, data, rows, ids[::2]))
  hosts[1].update(mask_outputs(path, data, rows, ids[1::2]))
  got = hosts[1].result_from([h.statistics() for h in hosts])
  assert got == want and 0.1 < want['segm_AP'] < 0.95
