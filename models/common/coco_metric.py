"""COCO box (and mask) mAP with pycocotools, its per-image evaluation in a
pool of host processes.

MLPerf's SSD quality is pycocotools' `COCOeval(iouType='bbox')` AP (IoU
0.50:0.95, all areas, 100 detections) over every image of the eval
annotation file. `evaluate()` is a loop of `evaluateImg(image, category)`
calls, each independent of the others, and `accumulate()` reads their
results in (category, area, image) order. The pool splits the sorted image
ids into contiguous chunks, each process evaluates its chunk, and the parent
joins the per-image records in the same order and accumulates: the same
records in the same order as one process makes, so the same AP bit for bit
(tests/models/common/test_coco_metric.py). Google ran it in 4 host processes.

Across hosts (training.task.PerHostMetric) each host evaluates its own
images the same way and sends their per-image records, packed to what
`accumulate()` reads of them (`encode_records`), and image ids; every
worker puts the records back in one process's (category, area, image)
order and accumulates: the same AP bit for bit again.

Mask R-CNN adds COCO's `segm` evaluation: each detection's 28x28 mask is pasted
into its image (models/common/mask_paste.py, Google's segm_results) in the
pool's processes, and the same detections, boxes and masks, are loaded once for
both evaluations (Google's MaskCOCO: a result's area is its box's, which only
the by-size figures read).

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

from models.common import host_pool
from models.common import mask_paste

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


def segmentation_results(detections: np.ndarray, masks: np.ndarray,
                         sizes: Mapping[int, tuple]) -> list[dict]:
  """loadRes dicts of detections ([n, 7]) with their [n, M, M] mask
  probabilities pasted into their images (`sizes`: image id -> (height,
  width)) as compressed RLEs."""
  out = []
  ids = detections[:, 0].astype(np.int64)
  for image_id in np.unique(ids):
    rows = np.flatnonzero(ids == image_id)
    height, width = sizes[int(image_id)]
    rles = mask_paste.to_rle(mask_paste.paste(
        masks[rows], detections[rows, 1:5], int(height), int(width)))
    for row, rle in zip(rows, rles):
      d = detections[row]
      out.append({'image_id': int(d[0]), 'bbox': [float(v) for v in d[1:5]],
                  'score': float(d[5]), 'category_id': int(d[6]),
                  'segmentation': rle})
  return out


def evaluate_images(gt: coco_lib.COCO, detections: np.ndarray,
                    image_ids: Sequence[int], iou_type: str = 'bbox',
                    segmentations: list | None = None) -> list:
  """COCOeval.evaluate() over `image_ids` alone: its evalImgs records.
  `segm` reads `segmentations` (segmentation_results) instead of the
  detections' array."""
  if iou_type == 'segm' and segmentations:
    with contextlib.redirect_stdout(io.StringIO()):
      results = gt.loadRes(copy.deepcopy(segmentations))
  else:
    results = detections_coco(gt, detections if iou_type == 'bbox' else
                              np.zeros([0, 7]))
  ev = cocoeval.COCOeval(gt, results, iou_type)
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


def evaluate_all(gt: coco_lib.COCO, detections: np.ndarray,
                 image_ids: Sequence[int], iou_types: Sequence[str],
                 masks: np.ndarray | None, sizes: Mapping[int, tuple]
                 ) -> list[list]:
  """evaluate_images for each of `iou_types` (masks pasted once)."""
  segmentations = (segmentation_results(detections, masks, sizes)
                   if 'segm' in iou_types and len(detections) else None)
  return [evaluate_images(gt, detections, image_ids, t, segmentations)
          for t in iou_types]


def _evaluate_chunk(args) -> list:
  return evaluate_all(_WORKER_GT, *args)


def join_chunks(chunks: Sequence[list], blocks: int) -> list:
  """evalImgs chunks of contiguous image id runs, each in (category, area,
  image) order, as one list in that order over all their images."""
  sizes = [len(c) // blocks for c in chunks]
  return [r for block in range(blocks)
          for chunk, size in zip(chunks, sizes)
          for r in chunk[block * size:(block + 1) * size]]


def summarize(gt: coco_lib.COCO, image_ids: Sequence[int],
              chunks: Sequence[list], iou_type: str = 'bbox'
              ) -> dict[str, float]:
  """accumulate() and summarize() over evalImgs chunks of contiguous image
  id ranges, in order."""
  ev = cocoeval.COCOeval(gt, None, iou_type)
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
             image_ids: Sequence[int] | None = None, iou_type: str = 'bbox',
             segmentations: list | None = None) -> dict[str, float]:
  """pycocotools' own sequence in this process (the reference the pool is
  tested against), over `image_ids` (None: every image of `gt`); `segm`
  over `segmentations` (loadRes dicts)."""
  if iou_type == 'segm':
    with contextlib.redirect_stdout(io.StringIO()):
      results = gt.loadRes(copy.deepcopy(segmentations))
  else:
    results = detections_coco(gt, detections)
  ev = cocoeval.COCOeval(gt, results, iou_type)
  if image_ids is not None:
    ev.params.imgIds = list(image_ids)
  with contextlib.redirect_stdout(io.StringIO()):
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
  return dict(zip(STAT_NAMES, (float(s) for s in ev.stats)))


class CocoMetric:
  """COCO box (and mask) mAP of on-device detections. Implements
  training.task.PerHostMetric, fed per image `image_id` [n], `boxes`
  [n, D, 4] (x, y, w, h in the original image's pixels), `scores` [n, D] (0
  for an empty slot) and `classes` [n, D] (labels 1..K); for `segm` also
  `masks` [n, D, M, M] (probabilities) and `image_size` [n, 2] (the
  original height and width)."""

  def __init__(self, *, annotation_file: str, category_ids: Sequence[int],
               processes: int = 4, iou_types: Sequence[str] = ('bbox',)):
    """Args:
      annotation_file: the eval set's COCO annotations.
      category_ids: the COCO category id of each label 1..K.
      processes: evaluate images in this many host processes (0 or 1: in
        this process).
      iou_types: 'bbox', and 'segm' for masks.
    """
    self.annotation_file = annotation_file
    self.category_ids = np.asarray([0] + list(category_ids), np.float64)
    self.processes = processes
    self.iou_types = tuple(iou_types)
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
    self._rows, self._masks, self._sizes = [], [], {}

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
    if 'segm' in self.iou_types:
      self._masks.append(np.asarray(outputs['masks'], np.float32)[real])
      for image_id, size in zip(ids.tolist(),
                                np.asarray(outputs['image_size']).tolist()):
        self._sizes[image_id] = tuple(size)

  def detections(self) -> np.ndarray:
    """[n, 7] rows of everything added since `reset`."""
    return (np.concatenate(self._rows) if self._rows else
            np.zeros([0, 7], np.float64))

  def masks(self) -> np.ndarray | None:
    """[n, M, M] masks of `detections()` (None without `segm`)."""
    if 'segm' not in self.iou_types:
      return None
    return np.concatenate(self._masks) if self._masks else np.zeros([0, 1, 1])

  @staticmethod
  def _named(stats: dict, iou_type: str) -> dict:
    prefix = '' if iou_type == 'bbox' else f'{iou_type}_'
    return {prefix + k: v for k, v in stats.items()}

  def result(self) -> dict[str, float]:
    """pycocotools' 12 statistics ('AP' is MLPerf's box mAP; with masks
    'segm_AP' and the rest so named), 'images' and 'detections' (scored
    boxes); every image of the annotation file must have come once."""
    image_ids = sorted(self.gt.getImgIds())
    missing = set(image_ids) - self._seen
    if missing:
      raise RuntimeError(
          f'{len(missing)} of {len(image_ids)} images of '
          f'{self.annotation_file} were not evaluated (e.g. '
          f'{sorted(missing)[:3]}): the eval records and the annotation '
          'file must hold the same images.')
    detections = self.detections()
    stats = {}
    for iou_type, chunks in zip(self.iou_types, self._evaluated(
        detections, image_ids)):
      stats.update(self._named(summarize(self.gt, image_ids, chunks,
                                         iou_type), iou_type))
    stats['images'] = float(len(image_ids))
    stats['detections'] = float(len(detections))
    return stats

  def _evaluated(self, detections, image_ids) -> list[list]:
    """For each iou type, evalImgs chunks of contiguous runs of
    `image_ids`, in order."""
    masks = self.masks()
    if self.processes <= 1:
      return [[records] for records in evaluate_all(
          self.gt, detections, image_ids, self.iou_types, masks,
          self._sizes)]
    parts = [list(p) for p in np.array_split(image_ids, self.processes)
             if len(p)]
    by_image = detections[:, 0].astype(np.int64)
    work = []
    for part in parts:
      mine = np.isin(by_image, part)
      work.append((detections[mine], part, self.iou_types,
                   None if masks is None else masks[mine],
                   {i: self._sizes[i] for i in part if i in self._sizes}))
    done = self._pool.map(_evaluate_chunk, work)
    return [[chunk[t] for chunk in done] for t in range(len(self.iou_types))]

  def statistics(self) -> np.ndarray:
    """This host's images evaluated: for each iou type, encode_records of
    their evalImgs, after a header of the types' lengths."""
    image_ids = sorted(self._seen)
    areas = len(cocoeval.Params('bbox').areaRng)
    detections = self.detections()
    if not image_ids:
      parts = [encode_records([], [], areas, 0) for _ in self.iou_types]
    else:
      parts = [encode_records(join_chunks(chunks, len(self.gt.getCatIds()) *
                                          areas), image_ids, areas,
                              len(detections))
               for chunks in self._evaluated(detections, image_ids)]
    return np.concatenate([np.asarray([len(p) for p in parts], np.float64)] +
                          parts)

  def result_from(self, parts: Sequence[np.ndarray]) -> dict[str, float]:
    """result()'s values from every host's statistics.

    Raises:
      RuntimeError: if the hosts did not evaluate every image once.
    """
    types = len(self.iou_types)
    split = []
    for part in parts:
      lengths = np.asarray(part[:types], np.int64)
      ends = types + np.cumsum(lengths)
      split.append([part[e - n:e] for e, n in zip(ends, lengths)])
    image_ids = sorted(self.gt.getImgIds())
    stats = {}
    for t, iou_type in enumerate(self.iou_types):
      seen, records, detections = [], {}, 0
      params = cocoeval.Params(iou_type)
      for host in split:
        ids, count, host_records = decode_records(
            host[t], len(params.areaRng), len(params.iouThrs))
        seen += ids
        detections += count
        records.update(host_records)
      if sorted(seen) != image_ids:
        raise RuntimeError(
            f'The hosts evaluated {len(seen)} images ({len(set(seen))} '
            f'different) of the {len(image_ids)} in {self.annotation_file}: '
            'each must evaluate its own, every image once.')
      areas = len(params.areaRng)
      joined = [records.get((k, a, image)) for k in
                range(len(self.gt.getCatIds())) for a in range(areas)
                for image in image_ids]
      stats.update(self._named(summarize(self.gt, image_ids, [joined],
                                         iou_type), iou_type))
    stats['images'] = float(len(image_ids))
    stats['detections'] = float(detections)
    return stats

  def close(self) -> None:
    """Stops the pool's processes."""
    self._pool.close()
