"""The SSD detection task: model, inputs, loss, NMS on the device, COCO mAP.

Google's MLPerf v0.7 `ssd_model.py` read line by line:

- Loss per image: smooth-L1 (Huber, delta 1) over the four codes of every
  matched default box, plus softmax cross-entropy over the matched boxes
  and the 3 x matched hardest negatives (every negative whose loss is at
  least the k-th largest, as `_topk_mask`'s binary search selects), both
  divided by the image's matched boxes; the mean over images (their
  `reduce_mean` and CrossShardOptimizer's mean over replicas): the share of
  the global mean per image.
- Eval on the device: softmax scores, boxes decoded against the default
  boxes, per class the 200 best-scoring boxes, scores of 0.05 or less
  dropped, greedy NMS at IoU 0.5, then the 200 best over all classes; boxes
  in the original image's pixels as (x, y, w, h). Their TPU NMS is tiled;
  the greedy loop here keeps the same boxes (each box is kept unless a
  kept, better-scoring box of its class overlaps it by IoU >= 0.5), checked
  against their NumPy `decode_single` in the tests.
- COCO mAP on the host (models/common/coco_metric.py), over every image of the
  eval annotation file.
"""

import numpy as np
import tensorflow as tf

from input_pipeline import coco
from input_pipeline import records
from input_pipeline import ssd_boxes
from models.common import backbone_checkpoint
from models.common import coco_metric
from models.ssd import model as ssd_lib
from training import losses

# ssd_constants.py.
NEGS_PER_POSITIVE = 3
MAX_NUM_EVAL_BOXES = 200
MIN_SCORE = 0.05
OVERLAP_CRITERIA = 0.5


def detection_loss(class_logits, box_codes, classes, boxes, num_matched):
  """Google's `detection_loss` per image: [b] (box + class loss) / matched.

  Args:
    class_logits: [b, N, C]; box_codes: [b, N, 4] predictions.
    classes: [b, N] int32 targets (0 background); boxes: [b, N, 4] targets.
    num_matched: [b] matched default boxes.
  """
  positive = tf.cast(classes > 0, tf.float32)
  diff = tf.abs(box_codes - boxes)
  huber = tf.where(diff < 1.0, 0.5 * tf.square(diff), diff - 0.5)
  box_loss = tf.reduce_sum(tf.reduce_sum(huber, -1) * positive, -1)
  cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
      classes, class_logits)
  negative = cross_entropy * (1.0 - positive)
  k = tf.minimum(tf.cast(num_matched, tf.int32) * NEGS_PER_POSITIVE,
                 tf.shape(classes)[1])
  ranked = tf.sort(tf.stop_gradient(negative), axis=-1, direction='DESCENDING')
  kth = tf.gather(ranked, tf.maximum(k - 1, 0), batch_dims=1)
  hard = tf.cast(tf.stop_gradient(negative) >= kth[:, None], tf.float32)
  hard = tf.where((k > 0)[:, None], hard, 0.0)
  class_loss = tf.reduce_sum(cross_entropy * (positive + hard), -1)
  return (box_loss + class_loss) / tf.maximum(num_matched, 1.0)


def greedy_nms(boxes, valid, threshold: float):
  """Keeps, in score order, each valid box no kept box overlaps by IoU >=
  threshold. boxes [..., K, 4] sorted by score, valid [..., K] -> keep."""
  ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
  area = (ymax - ymin) * (xmax - xmin)
  height = tf.maximum(0.0, tf.minimum(ymax[..., :, None], ymax[..., None, :]) -
                      tf.maximum(ymin[..., :, None], ymin[..., None, :]))
  width = tf.maximum(0.0, tf.minimum(xmax[..., :, None], xmax[..., None, :]) -
                     tf.maximum(xmin[..., :, None], xmin[..., None, :]))
  inter = height * width
  union = area[..., :, None] + area[..., None, :] - inter
  # IoU >= threshold without a division: an INT8 model (tools/
  # quantize_tflite.py) quantizes a division too, and a union of
  # zero-area boxes rounds to a zero divisor there.
  suppresses = (inter >= threshold * union) & (inter > 0)  # [.., kept, cand.]
  count = boxes.shape[-2]

  def body(i, keep):
    hit = tf.reduce_any(keep & tf.gather(suppresses, i, axis=-1), axis=-1)
    take = tf.gather(valid, i, axis=-1) & ~hit
    return i + 1, keep | (tf.one_hot(i, count, on_value=True,
                                     off_value=False) & take[..., None])

  _, keep = tf.while_loop(lambda i, _: i < count, body,
                          (tf.constant(0), tf.zeros_like(valid)))
  return keep


def detect(class_logits, box_codes, anchors):
  """Detections of a batch: corner boxes [b, D, 4] (normalised), scores
  [b, D] (0: an empty slot), classes [b, D] (labels 1..K)."""
  scores = tf.nn.softmax(class_logits, axis=-1)[..., 1:]  # No background.
  decoded = ssd_boxes.decode(box_codes, anchors)
  top_scores, top_index = tf.math.top_k(
      tf.transpose(scores, [0, 2, 1]), MAX_NUM_EVAL_BOXES)  # [b, K, D]
  top_boxes = tf.gather(decoded, top_index, batch_dims=1)  # [b, K, D, 4]
  valid = top_scores > MIN_SCORE
  keep = greedy_nms(top_boxes, valid, OVERLAP_CRITERIA)
  kept_scores = tf.where(keep, top_scores, 0.0)
  batch, classes = tf.shape(kept_scores)[0], kept_scores.shape[1]
  flat_scores = tf.reshape(kept_scores, [batch, -1])
  best, where = tf.math.top_k(flat_scores, MAX_NUM_EVAL_BOXES)
  best_boxes = tf.gather(tf.reshape(top_boxes, [batch, -1, 4]), where,
                         batch_dims=1)
  del classes
  return best_boxes, best, where // MAX_NUM_EVAL_BOXES + 1


def pixel_xywh(boxes, raw_shape):
  """Normalised corner boxes [b, D, 4] -> (x, y, w, h) in the pixels of
  images of (height, width) raw_shape [b, 2], as COCO wants them."""
  height = tf.cast(raw_shape[:, 0:1], boxes.dtype)
  width = tf.cast(raw_shape[:, 1:2], boxes.dtype)
  ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
  return tf.stack([xmin * width, ymin * height, (xmax - xmin) * width,
                   (ymax - ymin) * height], axis=-1)


class SsdTask:
  """COCO detection with an SSD and box mAP. Implements training.task.Task
  and training.task.QuantizedServing."""

  mlperf_benchmark = 'ssd'
  spatial_feature = 'image'  # Split by SPATIAL_PARTITIONS.
  quality_name = 'COCO box mAP'
  quality_tag = 'mAP'
  eval_sum_names = ('examples',)
  eval_output_dtypes = {'image_id': tf.int32, 'boxes': tf.float32,
                        'scores': tf.float32, 'classes': tf.int32,
                        'mask': tf.float32}
  higher_is_better = True
  # In INT8 the class heads stay float: one int8 scale over every box's
  # logits, set by the background's (up to ~60), steps 0.3 a logit (+-15%
  # on a score); int8 there cost 2-3% of the mAP (docs/inference.md).
  float_outputs = ('class_logits',)

  def __init__(self, *, model, data: coco.CocoInput, target_map: float = 0.23,
               backbone_checkpoint: str = '', init_checkpoint: str = '',
               metric_processes: int = 4):
    """Args:
      model: builds the SSD (gin: `@models.ssd.model.SSD`, no call); its classes
        come from the data.
      data: the input pipeline.
      target_map: COCO box mAP that ends the run (MLPerf: 0.23).
      backbone_checkpoint: a checkpoint of this suite to start the
        pyramid's backbone from (a ResNet-34's, or a MobileNet-v1's for
        SSD-MobileNet; '' = random; MLPerf starts from an ImageNet-trained
        one).
      init_checkpoint: a checkpoint of this suite for the same SSD to start
        every variable from ('' = none): a fine-tune, such as the
        quantization-aware one of gin/ssd_mobilenet_qat.gin.
      metric_processes: host processes of the COCO evaluation.
    """
    if backbone_checkpoint and init_checkpoint:
      raise ValueError(
          'BACKBONE_CHECKPOINT and INIT_CHECKPOINT are both set: a fine-tune '
          'from INIT_CHECKPOINT already holds the backbone; unset '
          'BACKBONE_CHECKPOINT.')
    self._build_model = model
    self.data = data
    self.target_quality = target_map
    self.backbone_checkpoint = backbone_checkpoint
    self.init_checkpoint = init_checkpoint
    self.metric_processes = metric_processes
    self._anchors = ssd_boxes.default_boxes(data.geometry)
    self._bn_group_size = None
    self._partitions = 1
    self._metric = None
    # Slices padded to a multiple of these rows (input_pipeline/spatial.py):
    # the model's, known once it is built.
    self.spatial_row_multiple = None

  def build_model(self) -> ssd_lib.SSD:
    model = self._build_model(num_classes=self.data.num_classes,
                              geometry=self.data.geometry)
    if self.backbone_checkpoint:
      model.load_backbone(self.backbone_checkpoint)
    if self.init_checkpoint:
      backbone_checkpoint.load_model(model, self.init_checkpoint,
                                     what=type(self).mlperf_benchmark,
                                     flag='INIT_CHECKPOINT')
    self._bn_group_size = model.features.bn_sync.group_size
    self._partitions = model.spatial.partitions
    self.spatial_row_multiple = model.spatial.row_multiple
    return model

  def loss_share(self, model, batch):
    images = coco.apply_jitter(batch['image'], batch['jitter'])
    class_logits, box_codes, updates = model(model.normalize(images),
                                             training=True)
    per_image = detection_loss(class_logits, box_codes, batch['classes'],
                               batch['boxes'], batch['num_matched'])
    return losses.share_of_global_mean(per_image), updates

  def eval_sums(self, model, batch) -> dict:
    del model
    return {'examples': tf.reduce_sum(batch['mask'])}

  def eval_outputs(self, model, batch) -> dict:
    class_logits, box_codes, _ = model(model.normalize(batch['image']),
                                       training=False)
    boxes, scores, classes = detect(class_logits, box_codes, self._anchors)
    return {'image_id': batch['image_id'],
            'boxes': pixel_xywh(boxes, batch['raw_shape']), 'scores': scores,
            'classes': classes, 'mask': batch['mask']}

  def host_metric(self) -> coco_metric.CocoMetric:
    if self._metric is None:
      self._metric = coco_metric.CocoMetric(
          annotation_file=self.data.eval_annotations,
          category_ids=self.data.category_ids,
          processes=self.metric_processes)
    return self._metric

  @staticmethod
  def quality(metrics: dict) -> float:
    return float(metrics['AP'])

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    # Batch-norm groups count replicas (devices); under spatial
    # partitioning a data-parallel replica is a group of partitions.
    groups = (self._bn_group_size // self._partitions if self._bn_group_size
              else num_replicas)
    return {'model_bn_span': per_replica_batch_size * min(groups,
                                                          num_replicas),
            # The crop's 50 candidate windows a pass.
            'max_samples': 50}

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> float:
    """Whole epochs of whole steps, as Google's log counts them
    (cur_step // (118287 // 4096))."""
    steps = max(1, int(self.data.steps_per_epoch(global_batch_size)))
    return float(step // steps)

  def explain_input_error(self, error: Exception) -> str | None:
    return records.explain_data_loss(
        error, (self.data.train_files, self.data.eval_files))

  def serving_fn(self, model):
    """Images ([0, 1] floats) -> detections: `detections` [b, D x 7] in
    MLPerf Inference's SSD layout (per detection: 0, ymin, xmin, ymax,
    xmax normalised, score, label 1..K), and the same as `boxes`, `scores`,
    `classes`. The network then `postprocess` (training.task.
    QuantizedServing)."""
    network = self.network_fn(model)
    size = self.data.geometry.image_size

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, size, size, 3], tf.float32, name='images')])
    def serve(images):
      return self.postprocess(network(images))

    return serve

  def network_fn(self, model):
    """Images -> the network's `class_logits` and `box_codes`: the part an
    INT8 model quantizes (the class heads in float: `float_outputs`)."""
    size = self.data.geometry.image_size

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, size, size, 3], tf.float32, name='images')])
    def network(images):
      class_logits, box_codes, _ = model(model.normalize(images),
                                         training=False)
      return {'class_logits': class_logits, 'box_codes': box_codes}

    return network

  def postprocess(self, outputs: dict) -> dict:
    """Softmax, box decoding and NMS (`detect`) in float, as the TF
    object-detection API's INT8 SSDs keep TFLite_Detection_PostProcess in
    float: quantized scores lost a third of the mAP here."""
    boxes, scores, classes = detect(
        tf.convert_to_tensor(outputs['class_logits'], tf.float32),
        tf.convert_to_tensor(outputs['box_codes'], tf.float32), self._anchors)
    rows = tf.concat([tf.zeros_like(scores)[..., None], boxes,
                      scores[..., None],
                      tf.cast(classes, tf.float32)[..., None]], axis=-1)
    return {'detections': tf.reshape(rows, [tf.shape(rows)[0], -1]),
            'boxes': boxes, 'scores': scores, 'classes': classes}

  # Inference (inference/): LoadGen's responses carry each sample's
  # detections as MLPerf Inference's SSD-ResNet34 lays them out.
  inference_model = 'ssd-resnet34'
  inference_output = ('detections', 'float32')
  inference_references = ('image_id', 'raw_shape')
  inference_performance_samples = 64  # MLPerf Inference's for ssd-resnet34.
  inference_settings = {}  # LoadGen's mlperf.conf has the model.

  @staticmethod
  def inference_inputs(batch: dict) -> dict:
    return {'images': batch['image']}

  def inference_quality(self, responses: dict, references: dict) -> float:
    """COCO box mAP of the answered samples, as MLPerf Inference's
    accuracy-coco.py scores them: normalised boxes scaled by each image's
    size, labels mapped to category ids, COCOeval over the answered images'
    ids only."""
    category = np.asarray([0] + list(self.data.category_ids), np.float64)
    rows = []
    for index, flat in responses.items():
      d = np.asarray(flat, np.float64).reshape(-1, 7)
      d = d[d[:, 5] > 0]  # Empty slots.
      height, width = references['raw_shape'][index]
      ymin, xmin, ymax, xmax = d[:, 1], d[:, 2], d[:, 3], d[:, 4]
      rows.append(np.stack([
          np.full(len(d), float(references['image_id'][index])),
          xmin * width, ymin * height, (xmax - xmin) * width,
          (ymax - ymin) * height, d[:, 5], category[d[:, 6].astype(int)]],
                           axis=1))
    image_ids = sorted(int(references['image_id'][i]) for i in responses)
    gt = coco_metric.load_annotations(self.data.eval_annotations)
    detections = np.concatenate(rows) if rows else np.zeros([0, 7])
    return coco_metric.coco_map(gt, detections, image_ids=image_ids)['AP']
