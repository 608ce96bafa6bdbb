"""Mask R-CNN as a task: Google's MLPerf v0.7 training and evaluation
graphs (mlcommons/training_results_v0.7, `Google/benchmarks/maskrcnn/
implementations/maskrcnn-research-TF-tpu-*/mask_rcnn_model.py`,
`mask_rcnn_architecture.py`) assembled from this suite's pieces.

Training, one orientation a batch (a tf.cond between the landscape and
portrait graphs, as theirs; one graph when the input is square):
pyramid -> RPN -> RPN loss on the host-made targets; proposals (2000 a
level, NMS 0.7, best 1000) -> 512 sampled RoIs (a quarter foreground) ->
box head, its targets Detectron-encoded with weights (10, 10, 5, 5), zero
for background -> box loss; the first 128 RoIs with foreground first (off a
TPU only as many as the foreground: Settings.roi_shapes) -> mask targets
from the 116x116 crops -> mask head -> the target class's mask -> mask
loss. The loss is the sum, each replica's own mean (their
CrossShardOptimizer averages the replicas' gradients). Under spatial
partitioning the group's members share the first stage and each takes
1/P of the stage-2 RoIs (their `use_spmd` sharding; docs/maskrcnn.md).

Evaluation: proposals (1000 a level, NMS 0.7, best 1000) -> box head ->
detections (best 1000 pairs, per class NMS 0.5, 100 an image) -> mask head
on the detected boxes -> the detected class's mask, sigmoid. The host
metric pastes the masks and scores COCO `bbox` and `segm` AP
(models/common/coco_metric.py); the run stops when both reach their targets.

A class is its COCO category id (input_pipeline/maskrcnn.py).
"""

import dataclasses

import tensorflow as tf

from input_pipeline import fpn_anchors
from input_pipeline import maskrcnn as input_lib
from input_pipeline import records
from models.common import coco_metric
from models.maskrcnn import detectron_boxes
from models.maskrcnn import mask_targets
from models.maskrcnn import model as maskrcnn_lib
from models.maskrcnn import detections as maskrcnn_detections
from models.maskrcnn import losses as maskrcnn_losses
from models.maskrcnn import proposals
from models.maskrcnn import roi_sampling
from models.common import backbone_checkpoint
from training import losses

BOX_AP_TARGET, MASK_AP_TARGET = 0.377, 0.339  # MLPerf v0.7.


@dataclasses.dataclass(frozen=True)
class Settings:
  """Google's mask_rcnn_params.py values the graphs read."""
  rpn_batch_size_per_im: int = 256
  rpn_pre_nms_topn: int = 2000
  rpn_post_nms_topn: int = 1000
  rpn_nms_threshold: float = 0.7
  rpn_min_size: float = 0.0
  batch_size_per_im: int = 512
  fg_fraction: float = 0.25
  fg_thresh: float = 0.5
  bg_thresh_hi: float = 0.5
  bg_thresh_lo: float = 0.0
  test_rpn_pre_nms_topn: int = 1000
  test_rpn_post_nms_topn: int = 1000
  test_nms: float = 0.5
  test_detections_per_image: int = 100
  rpn_box_loss_weight: float = 1.0
  fast_rcnn_box_loss_weight: float = 1.0
  mask_loss_weight: float = 1.0
  # 'fixed': Google's static shapes (XLA, a TPU): the mask head on 128 RoIs an
  # image, foreground first and background rows weighted 0, and RoIAlign by one
  # gather, the NMS tiled; 'dynamic': the mask head on as many RoIs as the
  # batch's most-foreground image has, RoIAlign by crops level by level
  # (models/maskrcnn/roi_align.py) and the NMS by TensorFlow's kernel
  # (proposals.greedy_nms) - the same losses and gradients, a fraction of a
  # CPU's work; 'auto': fixed on a TPU, dynamic elsewhere (the ROI_SHAPES
  # macro).
  roi_shapes: str = 'auto'


def _on_tpu() -> bool:
  return isinstance(tf.distribute.get_strategy(), (
      tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def split_levels(flat, sizes: dict, anchors_per_location: int, depth: int):
  """[B, N(, 4)] targets over every anchor -> {level: [B, H, W, A depth]}
  (their `unpack_labels`)."""
  out, start = {}, 0
  batch = tf.shape(flat)[0]
  for level, (h, w) in sizes.items():
    count = h * w * anchors_per_location
    part = flat[:, start:start + count]
    out[level] = tf.reshape(part, [batch, h, w, anchors_per_location * depth])
    start += count
  return out


def original_xywh(boxes, image_scale):
  """[B, D, 4] [ymin, xmin, ymax, xmax] on the network's image -> [x, y,
  w, h] in the original image's pixels (their
  `scale_detections_to_original_image_size`)."""
  scale = image_scale[:, None]
  ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
  return tf.stack([xmin * scale, ymin * scale, (xmax - xmin) * scale,
                   (ymax - ymin) * scale], axis=-1)


class MaskRcnnTask:
  """COCO instance segmentation with Mask R-CNN; box and mask AP.
  Implements training.task.Task, judged on two figures at once."""

  mlperf_benchmark = 'maskrcnn'
  # Split by SPATIAL_PARTITIONS: the flat image's pixel axis, whose P equal
  # parts are P bands of rows in either orientation.
  spatial_feature = 'image'
  spatial_row_multiple = None  # The height must divide.
  quality_tag = 'ap_over_target'
  eval_sum_names = ('examples',)
  eval_output_dtypes = {'image_id': tf.int32, 'boxes': tf.float32,
                        'scores': tf.float32, 'classes': tf.int32,
                        'masks': tf.float32, 'image_size': tf.int32,
                        'mask': tf.float32}
  higher_is_better = True
  target_quality = 1.0  # Both figures at their targets.

  def __init__(self, *, model, data: input_lib.MaskRcnnInput,
               target_box_ap: float = BOX_AP_TARGET,
               target_mask_ap: float = MASK_AP_TARGET,
               settings: Settings = Settings(), backbone_checkpoint: str = '',
               metric_processes: int = 4):
    """Args:
      model: builds the network (gin: `@models.maskrcnn.model.MaskRCNN`, no
        call); its classes come from the data.
      data: the input pipeline.
      target_box_ap, target_mask_ap: COCO AP that end the run together
        (MLPerf v0.7: 0.377 and 0.339).
      settings: the graphs' sampling, proposal and detection values.
      backbone_checkpoint: a ResNet checkpoint of this suite to start the
        backbone from, weights and moving statistics ('' = random; MLPerf
        starts from an ImageNet-trained ResNet-50).
      metric_processes: host processes of the COCO evaluation.
    """
    self._build_model = model
    self.data = data
    self.settings = settings
    self.backbone_checkpoint = backbone_checkpoint
    self.metric_processes = metric_processes
    self.mlperf_quality_target = {'BBOX': target_box_ap,
                                  'SEGM': target_mask_ap}
    self.quality_name = (f'COCO AP over target (the lower of box '
                         f'AP / {target_box_ap:g} and mask AP / '
                         f'{target_mask_ap:g})')
    self._metric = None
    self._partitions = 1
    self._collectives = False  # The training graph has cross-replica ops.

  # -- Model ------------------------------------------------------------------

  def build_model(self) -> maskrcnn_lib.MaskRCNN:
    model = self._build_model(
        num_classes=self.data.num_classes,
        anchors_per_location=self.data.geometry.anchors.anchors_per_location)
    if self.backbone_checkpoint:
      backbone_checkpoint.load_resnet(
          model, self.backbone_checkpoint,
          depth_binding='models.maskrcnn.model.MaskRCNN.depth (DEPTH)')
    self._partitions = model.spatial.partitions
    self._collectives = self._partitions > 1 or (
        bool(model.state) and model.backbone.bn_sync.group_size != 1)
    for landscape in (True, False):
      height = self.data.geometry.padded_size(landscape)[0]
      if height % self._partitions:
        raise ValueError(
            f'SPATIAL_PARTITIONS {self._partitions} does not divide the '
            f'Mask R-CNN input height {height} (Geometry.image_size '
            f'{self.data.geometry.image_size}, both orientations).')
    s = self.settings
    for name, rois in (('batch_size_per_im', s.batch_size_per_im),
                       ('batch_size_per_im x fg_fraction (mask RoIs)',
                        int(s.batch_size_per_im * s.fg_fraction))):
      if rois % self._partitions:
        raise ValueError(
            f'SPATIAL_PARTITIONS {self._partitions} does not divide the '
            f'{rois} stage-2 RoIs an image (models.maskrcnn.task.Settings.'
            f'{name}): each member of a group takes an equal share.')
    return model

  def _orientations(self, batch, graph, *, collectives: bool = False):
    """graph((height, width)) -> a list of tensors, for the batch's
    orientation: a tf.cond of the two graphs (Google's), or one graph when
    the input is square. tf.distribute's CPU and GPU strategies cannot run
    a collective (spatial partitioning's halos, synchronized batch norms)
    inside a tf.cond: there, with `collectives`, both graphs run and the
    batch's outputs are selected (twice the compute; a TPU keeps the
    cond)."""
    geometry = self.data.geometry
    land, port = geometry.padded_size(True), geometry.padded_size(False)
    if land == port:
      return graph(land)
    info = batch['image_info']
    landscape = info[0, 3] < info[0, 4]
    if collectives and not _on_tpu():
      return [tf.where(landscape, a, b)
              for a, b in zip(graph(land), graph(port))]
    return tf.cond(landscape, lambda: graph(land), lambda: graph(port))

  def _anchors(self, size):
    config = self.data.geometry.anchors
    return fpn_anchors.by_level(fpn_anchors.anchor_boxes(size, config), size,
                                config)

  def _images(self, model, batch, size, training: bool = False):
    """[B, H, W, 3] images (in training under spatial partitioning, this
    replica's H / P rows)."""
    rows = size[0] // self._partitions if training else size[0]
    return tf.cast(tf.reshape(batch['image'], [-1, rows, size[1], 3]),
                   model.dtype)

  # -- Training ---------------------------------------------------------------

  def train_losses(self, model, batch, size) -> tuple[dict, dict]:
    """({'total', 'rpn_score', 'rpn_box', 'class', 'box', 'mask'} losses
    of one orientation's graph, the backbone's new state)."""
    s = self.settings
    config = self.data.geometry.anchors
    info = batch['image_info']
    feats, updates = model.pyramid(
        self._images(model, batch, size, training=True), training=True)
    scores, deltas = model.rpn(feats)
    sizes = fpn_anchors.level_sizes(size, config)
    a = config.anchors_per_location
    rpn_total, rpn_score, rpn_box = maskrcnn_losses.rpn_loss(
        scores, deltas, split_levels(batch['rpn_score_targets'], sizes, a, 1),
        split_levels(batch['rpn_box_targets'], sizes, a, 4),
        batch_size_per_im=s.rpn_batch_size_per_im,
        box_weight=s.rpn_box_loss_weight)
    _, rois = proposals.propose(
        scores, deltas, self._anchors(size), info,
        pre_nms_topn=s.rpn_pre_nms_topn, post_nms_topn=s.rpn_post_nms_topn,
        nms_threshold=s.rpn_nms_threshold, min_size=s.rpn_min_size,
        fixed_shapes=self._fixed_shapes())
    box_targets, class_targets, rois, label_map = (
        roi_sampling.assign_and_sample(
            rois, batch['gt_boxes'], batch['gt_classes'], info[:, 2],
            batch['roi_seed'][0], batch_size_per_im=s.batch_size_per_im,
            fg_fraction=s.fg_fraction, fg_thresh=s.fg_thresh,
            bg_thresh_hi=s.bg_thresh_hi, bg_thresh_lo=s.bg_thresh_lo))
    # Stage 2 on this member's share of the RoIs (all of them unless
    # spatially partitioned: then the group's members, which hold the same
    # RoIs, each take 1/P, and the shares' losses add up to the whole's).
    share = model.spatial.share
    rois_k, classes_k, targets_k = (share(rois), share(class_targets),
                                    share(box_targets))
    class_out, box_out = model.box_head(feats, rois_k,
                                        roi_align=self._roi_align())
    encoded = detectron_boxes.encode(rois_k, targets_k,
                                     detectron_boxes.BOX_WEIGHTS)
    encoded = tf.where((classes_k > 0)[..., None], encoded, 0.0)
    _, class_loss, box_loss = maskrcnn_losses.fast_rcnn_loss(
        class_out, box_out, classes_k, encoded,
        box_weight=s.fast_rcnn_box_loss_weight,
        whole_class_targets=class_targets)
    fg_classes, fg_targets, fg_rois, fg_map = mask_targets.select_fg_for_masks(
        class_targets, box_targets, rois, label_map,
        self._mask_rois(class_targets))
    fg_rois_m, fg_classes_m = share(fg_rois), share(fg_classes)
    targets = mask_targets.get_mask_targets(
        fg_rois_m, share(fg_map), share(fg_targets), batch['gt_masks'],
        model.mask_resolution)
    masks = mask_targets.select_class_masks(
        model.mask_head(feats, fg_rois_m, roi_align=self._roi_align()),
        fg_classes_m)
    mask_loss = maskrcnn_losses.mask_loss(masks, targets, fg_classes_m,
                                          weight=s.mask_loss_weight,
                                          whole_class_targets=fg_classes)
    # Each member's loss share is averaged with the group's (they compute
    # the same first stage): the stage-2 shares count P times, so that
    # the group's mean is the whole's loss.
    p = float(self._partitions)
    class_loss, box_loss, mask_loss = (p * class_loss, p * box_loss,
                                       p * mask_loss)
    total = rpn_total + class_loss + box_loss + mask_loss
    return ({'total': total, 'rpn_score': rpn_score, 'rpn_box': rpn_box,
             'class': class_loss, 'box': box_loss, 'mask': mask_loss},
            updates)

  def _fixed_shapes(self) -> bool:
    """Settings.roi_shapes resolved: True for Google's static shapes."""
    shapes = self.settings.roi_shapes
    if shapes not in ('fixed', 'dynamic', 'auto'):
      raise ValueError(f"models.maskrcnn.task.Settings.roi_shapes (ROI_SHAPES)"
                       f" is {shapes!r}: 'fixed', 'dynamic' or 'auto'.")
    return shapes == 'fixed' or (shapes == 'auto' and _on_tpu())

  def _roi_align(self) -> str:
    return 'gather' if self._fixed_shapes() else 'crop'

  def _mask_rois(self, class_targets):
    """The mask head's RoIs an image (Settings.roi_shapes)."""
    s = self.settings
    most = int(s.batch_size_per_im * s.fg_fraction)
    if self._fixed_shapes():
      return most
    found = tf.reduce_max(tf.reduce_sum(tf.cast(class_targets > 0, tf.int32),
                                        axis=1))
    p = self._partitions  # A multiple of P: each member takes as many.
    return tf.clip_by_value((found + p - 1) // p * p, p, most)

  def loss_share(self, model, batch):
    names = sorted(model.state)

    def graph(size):
      # tf.cond returns tensors: the state travels as a list in name order.
      found, state = self.train_losses(model, batch, size)
      return [found['total']] + [state[n] for n in names]

    total, *state = self._orientations(batch, graph,
                                       collectives=self._collectives)
    return (losses.share_of_replica_mean(tf.reshape(total, [1])),
            dict(zip(names, state)))

  # -- Evaluation -------------------------------------------------------------

  def detect(self, model, batch, size) -> dict:
    """Detections and their masks of one orientation's graph: 'boxes' [B,
    D, 4] on the network's image, 'scores', 'classes' [B, D], 'masks' [B,
    D, 28, 28] probabilities."""
    s = self.settings
    info = batch['image_info']
    feats, _ = model.pyramid(self._images(model, batch, size), training=False)
    scores, deltas = model.rpn(feats)
    _, rois = proposals.propose(
        scores, deltas, self._anchors(size), info,
        pre_nms_topn=s.test_rpn_pre_nms_topn,
        post_nms_topn=s.test_rpn_post_nms_topn,
        nms_threshold=s.rpn_nms_threshold, min_size=s.rpn_min_size,
        fixed_shapes=self._fixed_shapes())
    class_out, box_out = model.box_head(feats, rois, roi_align=self._roi_align())
    detections = maskrcnn_detections.generate_detections(
        tf.nn.softmax(class_out), box_out, rois, info,
        tf.zeros([tf.shape(info)[0]]),
        num_detections=s.test_detections_per_image,
        pre_nms=s.test_rpn_post_nms_topn, nms_threshold=s.test_nms,
        fixed_shapes=self._fixed_shapes())
    boxes = detections[:, :, 1:5]
    classes = tf.cast(detections[:, :, 6], tf.int32)
    masks = tf.sigmoid(mask_targets.select_class_masks(
        model.mask_head(feats, boxes, roi_align=self._roi_align()), classes))
    return {'boxes': boxes, 'scores': detections[:, :, 5],
            'classes': classes, 'masks': masks}

  def eval_sums(self, model, batch) -> dict:
    del model
    return {'examples': tf.reduce_sum(batch['mask'])}

  def detect_original(self, model, batch) -> dict:
    """`detect` in the batch's orientation, `boxes` as [x, y, w, h] in the
    original image's pixels (their `predict`)."""
    keys = ('boxes', 'scores', 'classes', 'masks')

    def graph(size):
      found = self.detect(model, batch, size)
      return [found[k] for k in keys]

    out = dict(zip(keys, self._orientations(batch, graph)))
    out['boxes'] = original_xywh(out['boxes'], batch['image_info'][:, 2])
    return out

  def eval_outputs(self, model, batch) -> dict:
    out = self.detect_original(model, batch)
    info = batch['image_info']
    out['image_id'] = batch['image_id']
    out['image_size'] = tf.cast(info[:, 3:5], tf.int32)
    out['mask'] = batch['mask']
    return out

  def host_metric(self) -> coco_metric.CocoMetric:
    if self._metric is None:
      # A class is its category id: label k is category k.
      self._metric = coco_metric.CocoMetric(
          annotation_file=self.data.eval_annotations,
          category_ids=list(range(1, self.data.num_classes)),
          processes=self.metric_processes, iou_types=('bbox', 'segm'))
    return self._metric

  def mlperf_eval_accuracy(self, metrics: dict) -> dict:
    return {'BBOX': float(metrics['AP']), 'SEGM': float(metrics['segm_AP'])}

  def quality(self, metrics: dict) -> float:
    """The lower of the two figures' fractions of their targets."""
    t = self.mlperf_quality_target
    return min(float(metrics['AP']) / t['BBOX'],
               float(metrics['segm_AP']) / t['SEGM'])

  def quality_detail(self, metrics: dict) -> str:
    t = self.mlperf_quality_target
    return (f'box AP {metrics["AP"]:.4f} (target {t["BBOX"]:g}), mask AP '
            f'{metrics["segm_AP"]:.4f} (target {t["SEGM"]:g})')

  # -- MLPerf and errors ------------------------------------------------------

  def mlperf_params(self, *, per_replica_batch_size: int,
                    num_replicas: int) -> dict:
    del per_replica_batch_size, num_replicas
    geometry = self.data.geometry
    return {'min_image_size': geometry.short_side,
            'max_image_size': geometry.long_side_max,
            'num_image_candidates': self.settings.rpn_post_nms_topn}

  def mlperf_epoch_num(self, step: int, global_batch_size: int) -> float:
    """Whole epochs of whole steps (Google's step // (118287 // batch))."""
    steps = max(1, int(self.data.steps_per_epoch(global_batch_size)))
    return float(step // steps)

  def explain_input_error(self, error: Exception) -> str | None:
    return records.explain_data_loss(
        error, (self.data.train_files, self.data.eval_files))

  def serving_fn(self, model):
    """Prepared images (the eval pipeline's flat [b, H x W, 3], one
    orientation a batch) and their `image_info` -> detections in the
    original pixels: `boxes` [b, D, 4] (x, y, w, h), `scores`, `classes`
    (category ids), `masks` [b, D, 28, 28] probabilities (paste them with
    models/common/mask_paste.py)."""
    pixels = self.data.geometry.pixels

    @tf.function(autograph=False, input_signature=[
        tf.TensorSpec([None, pixels, 3], tf.float32, name='images'),
        tf.TensorSpec([None, 5], tf.float32, name='image_info')])
    def serve(images, image_info):
      return self.detect_original(model, {'image': images,
                                          'image_info': image_info})

    return serve
