"""Module paths that moved, for gin files written before the move.

On 2026-12-07 models/ went from one flat folder to one package a benchmark
family and models/common/ (docs/models.md, "Where each model lives"), so a
user's gin file may still `import models.resnet_task` or bind
`models.ssd.SSD.bn_momentum`. Gin would say "No module named ..." (a crash)
or "No configurable matching ..."; `moved` gives the name to write instead,
and core/config.py says it in one line. Class and function names did not
change: only the module before them.
"""

import importlib

MOVED_MODULES = {
    'models.layers': 'models.common.layers',
    'models.spatial': 'models.common.spatial',
    'models.named_checkpoint': 'models.common.named_checkpoint',
    'models.backbone_checkpoint': 'models.common.backbone_checkpoint',
    'models.resnet': 'models.common.resnet',
    'models.mobilenet': 'models.common.mobilenet',
    'models.host_pool': 'models.common.host_pool',
    'models.inference_v05': 'models.common.inference_v05',
    'models.coco_metric': 'models.common.coco_metric',
    'models.mask_paste': 'models.common.mask_paste',
    'models.bleu': 'models.common.bleu',
    'models.tokenized_bleu': 'models.common.tokenized_bleu',
    'models.translation_task': 'models.common.translation_task',
    'models.resnet_task': 'models.resnet.task',
    'models.mobilenet_task': 'models.resnet.mobilenet_task',
    'models.bert': 'models.bert.model',
    'models.bert_task': 'models.bert.task',
    'models.bert_checkpoint': 'models.bert.checkpoint',
    'models.transformer': 'models.transformer.model',
    'models.transformer_task': 'models.transformer.task',
    'models.beam_search': 'models.transformer.beam_search',
    'models.gnmt': 'models.gnmt.model',
    'models.gnmt_task': 'models.gnmt.task',
    'models.gnmt_beam_search': 'models.gnmt.beam_search',
    'models.ssd': 'models.ssd.model',
    'models.ssd_features': 'models.ssd.features',
    'models.ssd_task': 'models.ssd.task',
    'models.ssd_mobilenet_task': 'models.ssd.mobilenet_task',
    'models.maskrcnn': 'models.maskrcnn.model',
    'models.maskrcnn_task': 'models.maskrcnn.task',
    'models.maskrcnn_detections': 'models.maskrcnn.detections',
    'models.maskrcnn_losses': 'models.maskrcnn.losses',
    'models.proposals': 'models.maskrcnn.proposals',
    'models.roi_align': 'models.maskrcnn.roi_align',
    'models.roi_sampling': 'models.maskrcnn.roi_sampling',
    'models.mask_targets': 'models.maskrcnn.mask_targets',
    'models.detectron_boxes': 'models.maskrcnn.detectron_boxes',
    'models.dlrm': 'models.dlrm.model',
    'models.dlrm_task': 'models.dlrm.task',
    'models.roc_auc': 'models.dlrm.roc_auc',
    'models.minigo': 'models.minigo.model',
    'models.minigo_task': 'models.minigo.task',
    'models.minigo_data': 'models.minigo.data',
    'models.minigo_evaluation': 'models.minigo.evaluation',
    'models.minigo_games': 'models.minigo.games',
    'models.minigo_numpy': 'models.minigo.numpy_model',
    'models.go': 'models.minigo.go',
    'models.go_features': 'models.minigo.features',
    'models.mcts': 'models.minigo.mcts',
    'models.selfplay': 'models.minigo.selfplay',
    'models.uct_player': 'models.minigo.uct_player',
    'models.host_inference': 'models.minigo.host_inference',
}


def _exists(name: str) -> bool:
  """Whether `name` is a module of the suite, or an attribute path in one."""
  module, rest = name, []
  while module:
    try:
      found = importlib.import_module(module)
    except ImportError:
      module, _, last = module.rpartition('.')
      rest.insert(0, last)
      continue
    for attribute in rest:
      if not hasattr(found, attribute):
        return False
      found = getattr(found, attribute)
    return True
  return False


def moved(name: str) -> str | None:
  """The name that replaces `name` (a module, or a configurable in one)
  after the move, or None when no moved module starts it. `models.resnet`
  is both an old module (now models.common.resnet) and a new package (the
  ResNet-50 family): a name is moved only where the new name exists, so
  `models.resnet.ResNet` -> `models.common.resnet.ResNet` but a misspelt
  `models.resnet.task.ResNetTsk` is no moved name."""
  parts = name.split('.')
  for cut in range(len(parts), 0, -1):
    old = '.'.join(parts[:cut])
    if old in MOVED_MODULES:
      new = '.'.join([MOVED_MODULES[old], *parts[cut:]])
      return new if _exists(new) else None
  return None
