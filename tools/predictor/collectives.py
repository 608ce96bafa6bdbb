"""Collectives on a slice's torus: how long an all-reduce (or weight-update
sharding's reduce-scatter and all-gather) of B bytes a chip takes.

The slice is a 2-D (v2, v3, v5e, v6e) or 3-D (v4, v5p) torus of chips; the
sum runs as the bandwidth-optimal multi-dimensional ring: a reduce-scatter
along each dimension in turn (dimension i carries B / (n_1 ... n_{i-1})
bytes, of which each chip sends (n_i - 1) / n_i), then all-gathers in
reverse. Each dimension's bidirectional ring uses its 2 links of the 2d a
chip has, i.e. 1/d of the chip's all-reduce bandwidth
(tools/predictor/hardware.py). A dimension without wraparound (a mesh: v4 and
v5p below 4 chips a side) runs its ring there and back: half the
bandwidth. The V100's NVLink ring is one dimension of 8.

Shapes: a slice's default topology is "the one most similar to a cube"
(https://cloud.google.com/tpu/docs/types-topologies, read 2026-12-03): the
most balanced grid of powers of two (v3-32 4x4, v4-128 4x4x4, v4-512
4x8x8; v4 sides are at most 4 or multiples of 4, a torus when they are
multiples of 4: https://cloud.google.com/tpu/docs/v4). The 4,096-chip v3
Multipod of MLPerf v0.7 was a 128x32 torus (Kumar et al., "Exploring the
limits of concurrency in ML training on Google TPUs", MLSys 2021,
arXiv:2011.03641, which also describes its 2-D gradient summation).

Latency: every step of a ring passes one link, HOP_SECONDS each. A small
sum (batch-norm statistics, a halo of rows) costs its hops alone: a
reduce-scatter then an all-gather along each dimension of the group's
chips, 2 (n - 1) hops for a side of n (`latency_seconds`). The figure is
the one public number for a TPU link: 1 us on TPU-v3 ("Link Latency is 1
us [as per TPU research team]", ASTRA-sim's validation on Google's TPU-v3,
https://astra-sim.github.io/astra-sim-docs/validation/hardware/
tpu-validation.html, read 2026-12-06). No page gives one for v4 and
later, or for NVLink: the model uses the same microsecond for every chip,
an assumption, not a figure.

Left out: any overlap of the sum with the backward pass (the suite sums
after the backward pass).
"""

import math

from tools.predictor import hardware

MULTIPOD_V3 = (128, 32)
HOP_SECONDS = 1e-6


def torus_shape(chip: hardware.Chip, chips: int) -> tuple[int, ...]:
  """The chip grid of a slice."""
  if chip.torus_dims == 0:
    return (chips,)
  if chip.name == 'v3' and chips == 4096:
    return MULTIPOD_V3
  shape = [1] * chip.torus_dims
  n, i = chips, 0
  while n > 1:  # Double the smallest side first: the most balanced shape.
    shape[shape.index(min(shape))] *= 2
    n //= 2
    i += 1
  if 2 ** i != chips:
    raise ValueError(f'{chips} chips is not a power of two: no {chip.name} '
                     'torus shape for it.')
  return tuple(sorted(shape, reverse=True))


def wraps(chip: hardware.Chip, side: int) -> bool:
  """Whether a side of the grid is a ring (torus) or a line (mesh)."""
  if chip.torus_dims == 3:
    return side >= 4
  return side > 2


def all_reduce_seconds(chip: hardware.Chip, chips: int,
                       bytes_per_chip: float) -> float:
  """Time to sum `bytes_per_chip` over the slice, every chip holding the sum
  (a reduce-scatter then an all-gather)."""
  return 2.0 * reduce_scatter_seconds(chip, chips, bytes_per_chip)


def reduce_scatter_seconds(chip: hardware.Chip, chips: int,
                           bytes_per_chip: float) -> float:
  """Time for each chip to end with its 1/chips of the sum (an all-gather
  of the shards takes as long)."""
  shape = torus_shape(chip, chips)
  dims = max(1, len(shape))
  per_dimension = chip.allreduce_bytes_per_s / dims
  seconds, data = 0.0, float(bytes_per_chip)
  for side in shape:
    if side == 1:
      continue
    bandwidth = per_dimension if wraps(chip, side) else per_dimension / 2
    seconds += (side - 1) / side * data / bandwidth
    data /= side
  return seconds


def latency_seconds(chip: hardware.Chip, chips: float) -> float:
  """The hops of a sum over a group of `chips` chips (the most balanced
  grid of them, rounded up to a power of two), HOP_SECONDS each: what a
  message too small for the bandwidth to matter costs. 0 within a chip."""
  if chips <= 1:
    return 0.0
  shape = torus_shape(chip, 2 ** math.ceil(math.log2(chips) - 1e-9))
  return 2 * sum(side - 1 for side in shape) * HOP_SECONDS


def describe(chip: hardware.Chip, chips: int) -> str:
  shape = torus_shape(chip, chips)
  kind = 'NVLink ring' if chip.torus_dims == 0 else (
      'torus' if all(wraps(chip, s) for s in shape if s > 1) else 'mesh')
  return f'{"x".join(map(str, shape))} {kind}'

