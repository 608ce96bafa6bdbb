"""Accelerators as their makers publish them: the only hardware numbers the
time-to-train model uses. Every number has its page beside it; read on
2026-12-03 (the pages as stored that day).

| gen  | bf16 TFLOP/s a chip | HBM          | ICI (bidirectional, a chip) | topology | pod   |
|------|---------------------|--------------|-----------------------------|----------|-------|
| v2   | 46                  | 16 GiB, 700 GB/s | 4 links x 496 Gbit/s     | 2-D torus | 256 |
| v3   | 123                 | 32 GiB, 900 GB/s | all-reduce 340 TB/s a pod | 2-D torus | 1,024 |
| v4   | 275                 | 32 GiB, 1,200 GB/s | all-reduce 1.1 PB/s a pod | 3-D torus | 4,096 |
| v5e  | 197                 | 16 GB, 819 GB/s | 400 GB/s (all-reduce 51.2 TB/s a pod) | 2-D torus | 256 |
| v5p  | 459                 | 95 GB, 2,765 GB/s | 4,800 Gbit/s            | 3-D torus | 8,960 |
| v6e  | 918                 | 32 GB, 1,638 GB/s | 800 GB/s (all-reduce 102.4 TB/s a pod) | 2-D torus | 256 |
| V100 | 125 (fp16 Tensor Cores) | 16 GB, 900 GB/s | NVLink 300 GB/s      | NVLink hybrid cube mesh (DGX-1) | 8 |

Sources:
- v2: https://cloud.google.com/tpu/docs/v2 gives no numbers and points to
  Jouppi et al., "A Domain-Specific Supercomputer for Training Deep Neural
  Networks", CACM 63(7), 2020 (https://dl.acm.org/doi/pdf/10.1145/3360307),
  Table 3: the v2 and v3 figures (v3's agree with the v3 page) and the ICI
  link rates (496 Gbit/s v2, 656 Gbit/s v3, four links a chip).
- v3: https://cloud.google.com/tpu/docs/v3 (peak, HBM, 2D torus, 1,024-chip
  pod, all-reduce bandwidth 340 TB/s a pod).
- v4: https://cloud.google.com/tpu/docs/v4 (peak, HBM, 4,096-chip pod, 3D
  mesh or torus, all-reduce bandwidth 1.1 PB/s a pod).
- v5e: https://cloud.google.com/tpu/docs/v5e (peak, HBM, bidirectional ICI
  400 GB/s a chip, 4 ICI ports, 8 chips and 224 vCPUs a host
  (ct5lp-hightpu-8t), 2D torus, all-reduce 51.2 TB/s a pod).
- v5p: https://cloud.google.com/tpu/docs/v5p (peak, HBM, 8,960-chip pod, 3D
  torus, interchip interconnect 4,800 Gbit/s).
- v6e: https://cloud.google.com/tpu/docs/v6e (peak, HBM, bidirectional ICI
  800 GB/s a chip, 8 chips a host, 2D torus, all-reduce 102.4 TB/s a pod).
- V100: NVIDIA's Tesla V100 datasheet (https://images.nvidia.com/content/
  technologies/volta/pdf/tesla-volta-v100-datasheet-letter-fnl-web.pdf: SXM2,
  125 Tensor TFLOPS, 900 GB/s HBM2, 300 GB/s NVLink) and
  https://developer.nvidia.com/programming-tensor-cores-cuda-9-0 (125 Tensor
  TFLOPS).

The pages' all-reduce bandwidth of a pod, divided by its chips, is the
interconnect of a chip in one direction where a page gives both (v5e:
51.2 TB/s / 256 = 200 GB/s, half its bidirectional 400 GB/s and the 1,600
Gbit/s "interchip interconnect BW" its page gave before; v6e: 400 GB/s
against 800; v3: 332 GB/s against the paper's 4 x 656 Gbit/s = 328 GB/s).
The model's all-reduce bandwidth a chip is that pod figure / chips where
there is one, else the one-direction link total (v2: 4 x 496 Gbit/s; v5p:
4,800 Gbit/s, a number of the same kind as v5e's 1,600; V100: half the
300 GB/s bidirectional NVLink).
Host vCPUs are on the pages only for v5e; elsewhere the host's input rate is
a measured number of the config (tools/predictor/model.py), not a spec.
"""

import dataclasses

READ_ON = '2026-12-03'
GB = 1e9


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator chip and the network its slices are built of.

  Attributes:
    name: 'v3', 'v4', ..., 'v100'.
    peak_flops: dense bf16 (fp16 on the V100) FLOP/s of one chip.
    hbm_bytes: memory of one chip.
    hbm_bytes_per_s: its bandwidth.
    allreduce_bytes_per_s: all-reduce bandwidth of one chip (see the module
      docstring for where it comes from).
    torus_dims: dimensions of the slice's torus (2 or 3); 0 for the V100's
      NVLink mesh.
    pod_chips: the largest slice the generation's page names.
    chips_per_host: chips on one host VM.
    sources: the pages each number comes from.
  """
  name: str
  peak_flops: float
  hbm_bytes: float
  hbm_bytes_per_s: float
  allreduce_bytes_per_s: float
  torus_dims: int
  pod_chips: int
  chips_per_host: int
  sources: tuple[str, ...]


PAPER = 'https://dl.acm.org/doi/pdf/10.1145/3360307'
CHIPS = {c.name: c for c in (
    Chip('v2', 46e12, 16 * 2**30, 700 * GB, 4 * 496e9 / 8, 2, 256, 4,
         ('https://cloud.google.com/tpu/docs/v2', PAPER)),
    Chip('v3', 123e12, 32 * 2**30, 900 * GB, 340e12 / 1024, 2, 1024, 4,
         ('https://cloud.google.com/tpu/docs/v3', PAPER)),
    Chip('v4', 275e12, 32 * 2**30, 1200 * GB, 1.1e15 / 4096, 3, 4096, 4,
         ('https://cloud.google.com/tpu/docs/v4',)),
    Chip('v5e', 197e12, 16 * GB, 819 * GB, 51.2e12 / 256, 2, 256, 8,
         ('https://cloud.google.com/tpu/docs/v5e',)),
    Chip('v5p', 459e12, 95 * GB, 2765 * GB, 4800e9 / 8, 3, 8960, 4,
         ('https://cloud.google.com/tpu/docs/v5p',)),
    Chip('v6e', 918e12, 32 * GB, 1638 * GB, 102.4e12 / 256, 2, 256, 8,
         ('https://cloud.google.com/tpu/docs/v6e',)),
    Chip('v100', 125e12, 16 * GB, 900 * GB, 300 * GB / 2, 0, 8, 8,
         ('https://images.nvidia.com/content/technologies/volta/pdf/'
          'tesla-volta-v100-datasheet-letter-fnl-web.pdf',
          'https://developer.nvidia.com/programming-tensor-cores-cuda-9-0')),
)}


def chip(name: str) -> Chip:
  """The chip of a generation.

  Raises:
    ValueError: naming the generations the table has.
  """
  if name not in CHIPS:
    raise ValueError(f'No public specification of {name!r} in the '
                     f'time-to-train model; it has {", ".join(CHIPS)} '
                     '(tools/predictor/hardware.py, with their sources).')
  return CHIPS[name]
