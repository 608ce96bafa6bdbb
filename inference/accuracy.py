"""Reads LoadGen's mlperf_log_accuracy.json back into per-sample responses;
the quality gate of a served model against its FP32 one."""

import dataclasses
import json

import numpy as np

from models.common import inference_v05

# Today's closed-division accuracy: 99% of the reference model's.
CURRENT_QUALITY_GATE = 0.99


def read_responses(path: str, dtype: str) -> dict:
  """qsl_idx -> response array; a sample answered twice must agree.

  Raises:
    ValueError: if one sample has two different responses.
  """
  with open(path) as f:
    entries = json.load(f)
  responses = {}
  for e in entries:
    value = np.frombuffer(bytes.fromhex(e['data']), dtype=dtype)
    index = int(e['qsl_idx'])
    if index in responses and not np.array_equal(responses[index], value):
      raise ValueError(f'{path}: sample {index} answered differently twice.')
    responses[index] = value
  return responses


def quality_gate(model: str, settings: str) -> float:
  """The fraction of FP32's quality a served model must keep: v0.5's for
  its benchmark, or today's rules'."""
  if settings == 'v0.5':
    return inference_v05.quality_gate(model)
  return CURRENT_QUALITY_GATE


@dataclasses.dataclass
class QualityGate:
  """A served model's quality against the FP32 model's."""
  quality: float
  reference: float
  gate: float

  @property
  def passed(self) -> bool:
    return self.quality >= self.gate * self.reference

  @property
  def ratio(self) -> float:
    return self.quality / self.reference if self.reference else 0.0

  def __str__(self):
    return (f'quality gate: {self.quality:.4f} is {self.ratio:.2%} of the '
            f'FP32 SavedModel\'s {self.reference:.4f} (gate '
            f'{self.gate:.0%}): {"PASSED" if self.passed else "FAILED"}')
