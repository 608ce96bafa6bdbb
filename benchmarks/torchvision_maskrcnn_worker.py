"""torchvision's `maskrcnn_resnet50_fpn`, one training step timed on
request (run by benchmarks/versus_torchvision_maskrcnn.py in its own venv:
`make torch_venv`).

Set to Google's v0.7 recipe where torchvision has the knob: 91 classes, no
pre-trained weights, the stem and first stage frozen and frozen batch norms
(`trainable_backbone_layers=3`, torchvision's default and Detectron's),
RPN: 256 anchors an image, half positive at most, 2000 proposals a level
before NMS 0.7 and 1000 after; 512 RoIs an image, a quarter foreground;
box head of 1024, 28x28 masks. Its transform neither resizes (min_size and
max_size are the image's) nor pads beyond the image (a multiple of 32).
SGD momentum 0.9, weight decay 1e-4. Inputs: images and OBJECTS boxes an
image, each mask its whole box, seeded NumPy draws.
Protocol: prints `ready`, then for each `run` line on stdin times `--steps`
steps and prints the seconds.
"""

import argparse

import numpy as np
import torch
from torchvision.models import resnet
from torchvision.models.detection import backbone_utils
from torchvision.models.detection import mask_rcnn
from torchvision.ops import misc

import worker_protocol  # A sibling module: this runs as a script.


def synthetic(batch, height, width, objects=4, num_classes=91, seed=0):
  rng = np.random.default_rng(seed)
  images, targets = [], []
  for _ in range(batch):
    images.append(torch.from_numpy(rng.uniform(
        0, 1, (3, height, width)).astype(np.float32)))
    corners = np.sort(rng.uniform(size=(objects, 2, 2)), axis=1)
    boxes = np.stack([corners[:, 0, 1] * width, corners[:, 0, 0] * height,
                      corners[:, 1, 1] * width, corners[:, 1, 0] * height],
                     axis=1).astype(np.float32)
    masks = np.zeros((objects, height, width), np.uint8)
    for k, (x0, y0, x1, y1) in enumerate(boxes.astype(int)):
      masks[k, y0:y1 + 1, x0:x1 + 1] = 1
    targets.append({
        'boxes': torch.from_numpy(boxes),
        'labels': torch.from_numpy(rng.integers(1, num_classes, objects)),
        'masks': torch.from_numpy(masks)})
  return images, targets


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--batch', type=int, default=2)
  parser.add_argument('--steps', type=int, default=1)
  parser.add_argument('--height', type=int, default=384)
  parser.add_argument('--width', type=int, default=640)
  parser.add_argument('--dtype', default='float32')
  args = parser.parse_args()
  torch.manual_seed(0)
  # maskrcnn_resnet50_fpn's own construction, with the pre-trained case's
  # freezing (without weights it would train every layer and batch norm).
  backbone = backbone_utils._resnet_fpn_extractor(  # pylint: disable=protected-access
      resnet.resnet50(weights=None, norm_layer=misc.FrozenBatchNorm2d),
      trainable_layers=3)
  model = mask_rcnn.MaskRCNN(
      backbone, num_classes=91, min_size=args.height, max_size=args.width,
      rpn_pre_nms_top_n_train=2000, rpn_post_nms_top_n_train=1000,
      rpn_nms_thresh=0.7, rpn_batch_size_per_image=256,
      rpn_positive_fraction=0.5, box_batch_size_per_image=512,
      box_positive_fraction=0.25)
  model.train()
  opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad],
                        lr=0.02, momentum=0.9, weight_decay=1e-4)
  images, targets = synthetic(args.batch, args.height, args.width)
  autocast = args.dtype == 'bfloat16'

  def step():
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
      losses = model(images, targets)
      loss = sum(losses.values())
    opt.zero_grad()
    loss.backward()
    opt.step()

  step()  # Warm-up.
  worker_protocol.serve(lambda: [step() for _ in range(args.steps)])


if __name__ == '__main__':
  main()
