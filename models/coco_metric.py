"""COCO box mAP with pycocotools, its per-image evaluation in a pool of
host processes.

MLPerf's SSD quality is pycocotools' `COCOeval(iouType='bbox')` AP (IoU
0.50:0.95, all areas, 100 detections) over every image of the eval
annotation file. `evaluate()` is a loop of `evaluateImg(image, category)`
calls, each independent of the others, and `accumulate()` reads their
results in (category, area, image) order. The pool splits the sorted image
ids into contiguous chunks, each process evaluates its chunk, and the parent
joins the per-image records in the same order and accumulates: the same
records in the same order as one process makes, so the same AP bit for bit
(tests/models/test_coco_metric.py). Google ran it in 4 host processes.

Imports no TensorFlow: the pool's processes start fresh (spawn) and import
this module alone.
"""

import contextlib
import copy
import io
import json
from typing import Mapping, Sequence

import numpy as np
from pycocotools import coco as coco_lib
from pycocotools import cocoeval

from models import host_pool

STAT_NAMES = ('AP', 'AP50', 'AP75', 'APs', 'APm', 'APl', 'ARmax1', 'ARmax10',
              'ARmax100', 'ARs', 'ARm', 'ARl')

_WORKER_GT = None  # The annotations, loaded once in each pool process.


def load_annotations(path: str) -> coco_lib.COCO:
  """pycocotools' COCO of an annotation file (local or gs://), quietly."""
  if path.startswith('gs://'):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with tf.io.gfile.GFile(path) as f:
      text = f.read()
    gt = coco_lib.COCO()
    gt.dataset = json.loads(text)
    with contextlib.redirect_stdout(io.StringIO()):
      gt.createIndex()
    return gt
  with contextlib.redirect_stdout(io.StringIO()):
    return coco_lib.COCO(path)


def detections_coco(gt: coco_lib.COCO, detections: np.ndarray
                    ) -> coco_lib.COCO:
  """The detections ([n, 7]: image id, x, y, w, h, score, category id) as
  pycocotools' results object (loadRes; an empty one for none)."""
  with contextlib.redirect_stdout(io.StringIO()):
    if len(detections):
      return gt.loadRes(np.asarray(detections, np.float64))
    empty = coco_lib.COCO()
    empty.dataset = {'images': list(gt.dataset['images']), 'annotations': [],
                     'categories': copy.deepcopy(gt.dataset['categories'])}
    empty.createIndex()
    return empty


def evaluate_images(gt: coco_lib.COCO, detections: np.ndarray,
                    image_ids: Sequence[int]) -> list:
  """COCOeval.evaluate() over `image_ids` alone: its evalImgs records."""
  ev = cocoeval.COCOeval(gt, detections_coco(gt, detections), 'bbox')
  ev.params.imgIds = list(image_ids)
  with contextlib.redirect_stdout(io.StringIO()):
    ev.evaluate()
  return ev.evalImgs


def _init_worker(annotation_file: str) -> None:
  global _WORKER_GT
  _WORKER_GT = load_annotations(annotation_file)


def _evaluate_chunk(args) -> list:
  detections, image_ids = args
  return evaluate_images(_WORKER_GT, detections, image_ids)


def summarize(gt: coco_lib.COCO, image_ids: Sequence[int],
              chunks: Sequence[list]) -> dict[str, float]:
  """accumulate() and summarize() over evalImgs chunks of contiguous image
  id ranges, in order."""
  ev = cocoeval.COCOeval(gt, None, 'bbox')
  ev.params.imgIds = sorted(image_ids)
  params = ev.params
  params.maxDets = sorted(params.maxDets)
  ev._paramsEval = copy.deepcopy(params)  # pylint: disable=protected-access
  sizes = [len(c) // (len(params.catIds) * len(params.areaRng))
           for c in chunks]
  joined = []
  blocks = len(params.catIds) * len(params.areaRng)
  for block in range(blocks):
    for chunk, size in zip(chunks, sizes):
      joined.extend(chunk[block * size:(block + 1) * size])
  ev.evalImgs = joined
  with contextlib.redirect_stdout(io.StringIO()):
    ev.accumulate()
    ev.summarize()
  return dict(zip(STAT_NAMES, (float(s) for s in ev.stats)))


def coco_map(gt: coco_lib.COCO, detections: np.ndarray,
             image_ids: Sequence[int] | None = None) -> dict[str, float]:
  """pycocotools' own sequence in this process (the reference the pool is
  tested against), over `image_ids` (None: every image of `gt`)."""
  ev = cocoeval.COCOeval(gt, detections_coco(gt, detections), 'bbox')
  if image_ids is not None:
    ev.params.imgIds = list(image_ids)
  with contextlib.redirect_stdout(io.StringIO()):
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
  return dict(zip(STAT_NAMES, (float(s) for s in ev.stats)))


class CocoMetric:
  """COCO box mAP of on-device detections. Implements
  training.task.HostMetric, fed per image `image_id` [n], `boxes` [n, D, 4]
  (x, y, w, h in the original image's pixels), `scores` [n, D] (0 for an
  empty slot) and `classes` [n, D] (labels 1..K)."""

  def __init__(self, *, annotation_file: str, category_ids: Sequence[int],
               processes: int = 4):
    """Args:
      annotation_file: the eval set's COCO annotations.
      category_ids: the COCO category id of each label 1..K.
      processes: evaluate images in this many host processes (0 or 1: in
        this process).
    """
    self.annotation_file = annotation_file
    self.category_ids = np.asarray([0] + list(category_ids), np.float64)
    self.processes = processes
    self._gt = None
    self._pool = host_pool.HostPool(processes, initializer=_init_worker,
                                    initargs=(annotation_file,))
    self.reset()

  @property
  def gt(self) -> coco_lib.COCO:
    if self._gt is None:
      self._gt = load_annotations(self.annotation_file)
    return self._gt

  def reset(self) -> None:
    self._seen = set()
    self._rows = []

  def update(self, outputs: Mapping[str, np.ndarray]) -> None:
    ids = np.asarray(outputs['image_id'])
    for image_id in ids.tolist():
      if image_id in self._seen:
        raise RuntimeError(f'Eval image {image_id} was detected twice: the '
                           'eval input repeats records.')
      self._seen.add(image_id)
    scores = np.asarray(outputs['scores'], np.float64)
    real = scores > 0
    n, d = scores.shape
    rows = np.concatenate([
        np.repeat(ids, d).reshape(n, d, 1).astype(np.float64),
        np.asarray(outputs['boxes'], np.float64), scores[..., None],
        self.category_ids[np.asarray(outputs['classes'])][..., None]],
                          axis=-1)
    self._rows.append(rows[real])

  def detections(self) -> np.ndarray:
    """[n, 7] rows of everything added since `reset`."""
    return (np.concatenate(self._rows) if self._rows else
            np.zeros([0, 7], np.float64))

  def result(self) -> dict[str, float]:
    """pycocotools' 12 statistics ('AP' is MLPerf's mAP), 'images' and
    'detections' (scored boxes); every image of the annotation file must
    have come once."""
    image_ids = sorted(self.gt.getImgIds())
    missing = set(image_ids) - self._seen
    if missing:
      raise RuntimeError(
          f'{len(missing)} of {len(image_ids)} images of '
          f'{self.annotation_file} were not evaluated (e.g. '
          f'{sorted(missing)[:3]}): the eval records and the annotation '
          'file must hold the same images.')
    detections = self.detections()
    stats = self._pooled(detections, image_ids)
    stats['images'] = float(len(image_ids))
    stats['detections'] = float(len(detections))
    return stats

  def _pooled(self, detections, image_ids):
    if self.processes <= 1:
      chunks = [evaluate_images(self.gt, detections, image_ids)]
      return summarize(self.gt, image_ids, chunks)
    parts = [list(p) for p in np.array_split(image_ids, self.processes)
             if len(p)]
    by_image = detections[:, 0].astype(np.int64)
    work = [(detections[np.isin(by_image, part)], part) for part in parts]
    chunks = self._pool.map(_evaluate_chunk, work)
    return summarize(self.gt, image_ids, chunks)

  def close(self) -> None:
    """Stops the pool's processes."""
    self._pool.close()
