"""Reads LoadGen's mlperf_log_accuracy.json back into per-sample responses."""

import json

import numpy as np


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
