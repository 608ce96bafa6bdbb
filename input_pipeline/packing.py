"""Packing translation pairs into fixed-length rows (no padding wasted).

A row holds several (source, target) pairs one after another, source ids in
`inputs` and target ids in `targets`, each sequence ending with EOS. Pair k
of a row (from 1) has segment id k in `*_segmentation` and positions 0, 1,
... in `*_position`; the row's tail is padding: id 0, segment 0. This is
tensor2tensor's packed format, which Google's v0.7 Transformer reads
(Lingvo's MlPerfInput: inputs, targets, inputs_segmentation,
inputs_position, targets_segmentation, targets_position).

Pairs are packed in their order, greedily: a pair goes into the open row if
both its sequences fit, else the row is closed and a new one opened.
"""

import dataclasses
from typing import Iterable, Iterator

import numpy as np

FEATURES = ('inputs', 'targets', 'inputs_segmentation', 'targets_segmentation',
            'inputs_position', 'targets_position')


@dataclasses.dataclass
class _Row:
  length: int
  inputs: list = dataclasses.field(default_factory=list)
  targets: list = dataclasses.field(default_factory=list)
  pairs: int = 0

  def fits(self, source, target) -> bool:
    return (len(self.inputs) + len(source) <= self.length and
            len(self.targets) + len(target) <= self.length)

  def add(self, source, target):
    self.pairs += 1
    self.inputs += [(t, self.pairs, p) for p, t in enumerate(source)]
    self.targets += [(t, self.pairs, p) for p, t in enumerate(target)]

  def arrays(self) -> dict:
    out = {}
    for side, items in (('inputs', self.inputs), ('targets', self.targets)):
      a = np.zeros([3, self.length], np.int64)
      if items:
        a[:, :len(items)] = np.asarray(items, np.int64).T
      out[side], out[f'{side}_segmentation'], out[f'{side}_position'] = a
    return out


def pack(pairs: Iterable[tuple], length: int) -> Iterator[dict]:
  """Rows of packed pairs.

  Args:
    pairs: (source ids, target ids), each already ending with EOS and at
      most `length` long.
    length: tokens a row.

  Yields:
    dicts of int64 arrays [length] named FEATURES.
  """
  row = _Row(length)
  for source, target in pairs:
    if len(source) > length or len(target) > length:
      raise ValueError(f'A pair of {len(source)} and {len(target)} tokens '
                       f'does not fit a packed row of {length}.')
    if not row.fits(source, target):
      yield row.arrays()
      row = _Row(length)
    row.add(source, target)
  if row.pairs:
    yield row.arrays()
