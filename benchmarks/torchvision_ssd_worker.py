"""torchvision's SSD300 with a ResNet-34 backbone, one training step timed on
request (run by benchmarks/versus_torchvision.py in its own venv:
`make torch_venv`).

Built as the MLCommons reference (single_stage_detector, ssd300.py) builds
it: torchvision's resnet34 up to layer3, layer3's first block at stride 1;
the reference's extra layers (1x1 then 3x3 convolutions, batch norm and
ReLU, stride 2 for three of them, 256/512, 256/512, 128/256, 128/256,
128/256 channels); torchvision's `SSD` (default boxes of SSD300: aspect
ratios 2 and 3, scales 0.07..1.05, steps 8..300; its matching, hard negative
mining 3:1 and smooth L1) and SGD momentum 0.9 with weight decay 5e-4.
Inputs are the same synthetic images and boxes as ours (seeded NumPy).
Protocol: prints `ready`, then for each `run` line on stdin times `--steps`
steps and prints the seconds.
"""

import argparse
import collections

import numpy as np
import torch
from torch import nn
import torchvision
from torchvision.models.detection import ssd as tv_ssd
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator

import worker_protocol  # A sibling module: this runs as a script.


class Backbone(nn.Module):
  """ResNet-34 to layer3 (stride 1) and the reference's extra layers."""

  def __init__(self):
    super().__init__()
    rn = torchvision.models.resnet34(weights=None)
    self.features = nn.Sequential(*list(rn.children())[:7])
    block = self.features[-1][0]
    block.conv1.stride = (1, 1)
    block.downsample[0].stride = (1, 1)
    channels = [256, 512, 512, 256, 256, 256]
    self.out_channels = channels
    extras = []
    for i, (cin, cout, mid) in enumerate(zip(channels[:-1], channels[1:],
                                             [256, 256, 128, 128, 128])):
      stride, pad = (2, 1) if i < 3 else (1, 0)
      extras.append(nn.Sequential(
          nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
          nn.ReLU(inplace=True),
          nn.Conv2d(mid, cout, 3, padding=pad, stride=stride, bias=False),
          nn.BatchNorm2d(cout), nn.ReLU(inplace=True)))
    self.extras = nn.ModuleList(extras)

  def forward(self, x):
    x = self.features(x)
    maps = [x]
    for layer in self.extras:
      x = layer(x)
      maps.append(x)
    return collections.OrderedDict((str(i), m) for i, m in enumerate(maps))


def build(num_classes=81):
  anchors = DefaultBoxGenerator(
      [[2], [2, 3], [2, 3], [2, 3], [2], [2]],
      scales=[0.07, 0.15, 0.33, 0.51, 0.69, 0.87, 1.05],
      steps=[8, 16, 32, 64, 100, 300])
  return tv_ssd.SSD(Backbone(), anchors, (300, 300), num_classes)


def synthetic(batch, objects=7, num_classes=81, seed=0):
  """The same draws as benchmarks/ssd_step.synthetic_objects."""
  rng = np.random.default_rng(seed)
  images = rng.uniform(0, 1, (batch, 300, 300, 3)).astype(np.float32)
  yx = rng.uniform(0, 0.7, (batch, objects, 2))
  hw = rng.uniform(0.05, 0.3, (batch, objects, 2))
  boxes = np.concatenate([yx, yx + hw], -1).astype(np.float32)
  labels = rng.integers(1, num_classes, (batch, objects))
  tensors = [torch.from_numpy(im).permute(2, 0, 1).contiguous()
             for im in images]
  targets = [{'boxes': torch.from_numpy(b[:, [1, 0, 3, 2]] * 300),
              'labels': torch.from_numpy(l)} for b, l in zip(boxes, labels)]
  return tensors, targets


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--batch', type=int, default=8)
  parser.add_argument('--steps', type=int, default=1)
  parser.add_argument('--dtype', default='float32')
  args = parser.parse_args()
  torch.manual_seed(0)
  model = build()
  model.train()
  opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9,
                        weight_decay=5e-4)
  images, targets = synthetic(args.batch)
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
