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

Across hosts (training.task.PerHostMetric) each host evaluates its own
images the same way and sends their per-image records (the four arrays
`accumulate()` reads: detection scores, matches, ignore flags and the
ground truth's ignore flags) and image ids; every worker puts the records
back in one process's (category, area, image) order and accumulates: the
same AP bit for bit again.

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


def encode_records(records: Sequence, image_ids: Sequence[int],
                   num_areas: int, detections: int) -> np.ndarray:
  """evalImgs records (in COCOeval's category, area, image order over
  `image_ids`) as one float64 array: how many images and detections, the
  image ids, then for each record
  that is not None its (category index, area index, image id, D, G, T) and
  the arrays accumulate() reads (dtScores [D], dtMatches and dtIgnore
  [T, D], gtIgnore [G])."""
  n = len(image_ids)
  out = [np.asarray([n, detections], np.float64),
         np.asarray(image_ids, np.float64)]
  for i, record in enumerate(records):
    if record is None:
      continue
    k, a = divmod(i // n, num_areas)
    matches = np.asarray(record['dtMatches'], np.float64)
    t, d = matches.shape if matches.ndim == 2 else (matches.shape[0], 0)
    scores = np.asarray(record['dtScores'], np.float64).reshape(-1)
    gt_ignore = np.asarray(record['gtIgnore'], np.float64).reshape(-1)
    out += [np.asarray([k, a, record['image_id'], len(scores),
                        len(gt_ignore), t], np.float64), scores,
            matches.reshape(-1),
            np.asarray(record['dtIgnore'], np.float64).reshape(-1),
            gt_ignore]
  return np.concatenate(out)


def decode_records(encoded: np.ndarray) -> tuple[list[int], int, dict]:
  """encode_records' image ids, detection count and records by (category
  index, area index, image id)."""
  n, detections = int(encoded[0]), int(encoded[1])
  image_ids = [int(i) for i in encoded[2:2 + n]]
  records, at = {}, 2 + n
  while at < len(encoded):
    k, a, image, d, g, t = (int(v) for v in encoded[at:at + 6])
    at += 6
    scores = encoded[at:at + d]
    at += d
    matches = encoded[at:at + t * d].reshape(t, d)
    at += t * d
    ignore = encoded[at:at + t * d].reshape(t, d)
    at += t * d
    records[k, a, image] = {'dtScores': list(scores), 'dtMatches': matches,
                            'dtIgnore': ignore,
                            'gtIgnore': encoded[at:at + g]}
    at += g
  return image_ids, detections, records


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
  training.task.PerHostMetric, fed per image `image_id` [n], `boxes` [n, D, 4]
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
    return summarize(self.gt, image_ids,
                     self._evaluated(detections, image_ids))

  def _evaluated(self, detections, image_ids) -> list:
    """evalImgs chunks of contiguous runs of `image_ids`, in order."""
    if self.processes <= 1:
      return [evaluate_images(self.gt, detections, image_ids)]
    parts = [list(p) for p in np.array_split(image_ids, self.processes)
             if len(p)]
    by_image = detections[:, 0].astype(np.int64)
    work = [(detections[np.isin(by_image, part)], part) for part in parts]
    return self._pool.map(_evaluate_chunk, work)

  def statistics(self) -> np.ndarray:
    """This host's images evaluated: encode_records of their evalImgs."""
    image_ids = sorted(self._seen)
    areas = len(cocoeval.Params('bbox').areaRng)
    detections = self.detections()
    if not image_ids:
      return encode_records([], [], areas, 0)
    chunks = self._evaluated(detections, image_ids)
    # One record list in (category, area, image) order over image_ids.
    blocks = len(self.gt.getCatIds()) * areas
    sizes = [len(c) // blocks for c in chunks]
    records = [r for block in range(blocks)
               for chunk, size in zip(chunks, sizes)
               for r in chunk[block * size:(block + 1) * size]]
    return encode_records(records, image_ids, areas, len(detections))

  def result_from(self, parts: Sequence[np.ndarray]) -> dict[str, float]:
    """result()'s values from every host's statistics.

    Raises:
      RuntimeError: if the hosts did not evaluate every image once.
    """
    seen, records, detections = [], {}, 0
    for part in parts:
      ids, count, host_records = decode_records(part)
      seen += ids
      detections += count
      records.update(host_records)
    image_ids = sorted(self.gt.getImgIds())
    if sorted(seen) != image_ids:
      raise RuntimeError(
          f'The hosts evaluated {len(seen)} images ({len(set(seen))} '
          f'different) of the {len(image_ids)} in {self.annotation_file}: '
          'each must evaluate its own, every image once.')
    areas = len(cocoeval.Params('bbox').areaRng)
    joined = [records.get((k, a, image)) for k in
              range(len(self.gt.getCatIds())) for a in range(areas)
              for image in image_ids]
    stats = summarize(self.gt, image_ids, [joined])
    stats['images'] = float(len(image_ids))
    stats['detections'] = float(detections)
    return stats

  def close(self) -> None:
    """Stops the pool's processes."""
    self._pool.close()
