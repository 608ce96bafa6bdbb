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
images the same way and sends their per-image records, packed to what
`accumulate()` reads of them (`encode_records`), and image ids; every
worker puts the records back in one process's (category, area, image)
order and accumulates: the same AP bit for bit again.

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
  `image_ids`) as one float64 array, as little as accumulate() needs: how
  many images and detections, the image ids, then for each (category,
  image) with a record (then there is one for every area: None means no
  ground truth and no detection, whatever the area) its category index,
  image index and D detections packed in one number, each area's count of
  ground truth not ignored in another, the D scores (the same in every
  area), and per detection, for each area and IoU threshold, two bits:
  matched, ignored (accumulate() reads the matches and ignore flags only as
  booleans, and the ground truth's ignore flags only as that count): 2
  numbers a record and 3 a detection for COCO's 4 areas and 10 thresholds,
  against 7 a detection for the detections themselves."""
  n = len(image_ids)
  out = [np.asarray([n, detections], np.float64),
         np.asarray(image_ids, np.float64)]
  if not n:  # A host with no eval image.
    return np.concatenate(out)
  by_block = [records[b * n:(b + 1) * n] for b in range(len(records) // n)]
  for k in range(len(by_block) // num_areas):
    areas = by_block[k * num_areas:(k + 1) * num_areas]
    for i in range(n):
      if areas[0][i] is None:
        continue
      per_area = [area[i] for area in areas]
      scores = np.asarray(per_area[0]['dtScores'], np.float64).reshape(-1)
      unignored = [np.count_nonzero(np.asarray(r['gtIgnore']) == 0)
                   for r in per_area]
      out += [np.asarray([_pack((k, i, len(scores)), _HEADER_BITS),
                          _pack(unignored, _COUNT_BITS)], np.float64),
              scores, _pack_bits(per_area, len(scores))]
  return np.concatenate(out)


# Bit widths of the values packed in one float64 (52 bits at most: exact).
_HEADER_BITS = (12, 20, 20)  # Category index, image index, detections.
_COUNT_BITS = (13, 13, 13, 13)  # Ground truth not ignored, per area.


def _pack(values, widths) -> float:
  if len(values) > len(widths):
    raise ValueError(f'COCO records: {len(values)} values for '
                     f'{len(widths)} fields.')
  word, shift = 0, 0
  for value, width in zip(values, widths):
    if not 0 <= value < 1 << width:
      raise ValueError(f'COCO records: {value} does not fit {width} bits '
                       '(too many categories, images or detections a host).')
    word |= int(value) << shift
    shift += width
  return float(word)


def _unpack(word: float, widths) -> list[int]:
  word, out = int(word), []
  for width in widths:
    out.append(word & ((1 << width) - 1))
    word >>= width
  return out


def _pack_bits(per_area: Sequence[dict], d: int) -> np.ndarray:
  """[d x words] float64 integers: for each area and threshold, matched and
  ignored bits; 52 bits a word (exact in float64)."""
  if not d:
    return np.zeros([0])
  flags = []
  for record in per_area:
    matched = np.asarray(record['dtMatches']).reshape(-1, d) != 0
    ignored = np.asarray(record['dtIgnore']).reshape(-1, d) != 0
    flags += [matched, ignored]
  bits = np.concatenate(flags, axis=0).astype(np.int64)  # [2 x A x T, d]
  per_word = 52
  words = []
  for w in range(0, len(bits), per_word):
    chunk = bits[w:w + per_word]
    words.append((chunk << np.arange(len(chunk))[:, None]).sum(axis=0))
  return np.stack(words, axis=1).astype(np.float64).reshape(-1)


def decode_records(encoded: np.ndarray, num_areas: int,
                   num_thresholds: int) -> tuple[list[int], int, dict]:
  """encode_records' image ids, detection count and the records
  accumulate() reads, by (category index, area index, image id)."""
  n, detections = int(encoded[0]), int(encoded[1])
  image_ids = [int(i) for i in encoded[2:2 + n]]
  flag_rows = 2 * num_areas * num_thresholds
  words = -(-flag_rows // 52)
  records, at = {}, 2 + n
  while at < len(encoded):
    k, i, d = _unpack(encoded[at], _HEADER_BITS)
    unignored = _unpack(encoded[at + 1], _COUNT_BITS)[:num_areas]
    image = image_ids[i]
    at += 2
    scores = list(encoded[at:at + d])
    at += d
    packed = encoded[at:at + d * words].astype(np.int64).reshape(d, words)
    at += d * words
    bits = np.zeros([flag_rows, d], bool)
    for w in range(words):
      rows = range(w * 52, min((w + 1) * 52, flag_rows))
      for r in rows:
        bits[r] = (packed[:, w] >> (r - w * 52)) & 1
    bits = bits.reshape(num_areas, 2, num_thresholds, d)
    for a in range(num_areas):
      records[k, a, image] = {
          'dtScores': scores, 'dtMatches': bits[a, 0].astype(np.float64),
          'dtIgnore': bits[a, 1], 'gtIgnore': np.zeros(unignored[a])}
  return image_ids, detections, records


def _init_worker(annotation_file: str) -> None:
  global _WORKER_GT
  _WORKER_GT = load_annotations(annotation_file)


def _evaluate_chunk(args) -> list:
  detections, image_ids = args
  return evaluate_images(_WORKER_GT, detections, image_ids)


def join_chunks(chunks: Sequence[list], blocks: int) -> list:
  """evalImgs chunks of contiguous image id runs, each in (category, area,
  image) order, as one list in that order over all their images."""
  sizes = [len(c) // blocks for c in chunks]
  return [r for block in range(blocks)
          for chunk, size in zip(chunks, sizes)
          for r in chunk[block * size:(block + 1) * size]]


def summarize(gt: coco_lib.COCO, image_ids: Sequence[int],
              chunks: Sequence[list]) -> dict[str, float]:
  """accumulate() and summarize() over evalImgs chunks of contiguous image
  id ranges, in order."""
  ev = cocoeval.COCOeval(gt, None, 'bbox')
  ev.params.imgIds = sorted(image_ids)
  params = ev.params
  params.maxDets = sorted(params.maxDets)
  ev._paramsEval = copy.deepcopy(params)  # pylint: disable=protected-access
  ev.evalImgs = join_chunks(chunks, len(params.catIds) * len(params.areaRng))
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
    records = join_chunks(self._evaluated(detections, image_ids),
                          len(self.gt.getCatIds()) * areas)
    return encode_records(records, image_ids, areas, len(detections))

  def result_from(self, parts: Sequence[np.ndarray]) -> dict[str, float]:
    """result()'s values from every host's statistics.

    Raises:
      RuntimeError: if the hosts did not evaluate every image once.
    """
    seen, records, detections = [], {}, 0
    params = cocoeval.Params('bbox')
    for part in parts:
      ids, count, host_records = decode_records(
          part, len(params.areaRng), len(params.iouThrs))
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
