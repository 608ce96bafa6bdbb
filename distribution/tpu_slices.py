"""Cloud TPU slice types and TPU VM images: the one table the launcher,
train.py and the notebook read. Update it here, with its sources.

Sources, read on 2026-12-01 (Google's pages as stored that day):
- TPU software versions, https://cloud.google.com/tpu/docs/runtimes: TF
  images are named `tpu-vm-tf-x.y.z[-pod][-{device_api}]`; `-pod` for a
  multi-host slice; from TF 2.15 a device API, `-pjrt` or `-se`, is required;
  the 2.18 images carry a hardware suffix (`-v5p-and-below`,
  `-v5e-and-v6`); the TF table ends at 2.18. The page also says the Cloud
  TPU API is no longer under active development (bug and security fixes
  only) and points new TPU generations at Compute Engine or GKE.
- Slice types: https://cloud.google.com/tpu/docs/supported-tpu-versions (v2:
  v2-8 ... v2-512; v3: v3-8 ... v3-2048, the largest public v3 slice: the
  4,096-chip v0.7 Multipod was Google-internal), https://cloud.google.com/
  tpu/docs/v4 (2 TensorCores a chip, one TensorFlow device a chip:
  megacore), https://cloud.google.com/tpu/docs/v5e (`v5litepod-N`, N chips,
  one TensorCore a chip, 8 chips a host), https://cloud.google.com/tpu/docs/
  v5p (`v5p-N`, N TensorCores, 2 a chip, up to v5p-12288),
  https://cloud.google.com/tpu/docs/v6e (`v6e-N`, N chips, one TensorCore a
  chip, 8 chips a host, 256-chip pods).
- Spot and queued-resource tiers and prices: https://cloud.google.com/tpu/
  docs/queued-resources, https://cloud.google.com/tpu/pricing (on-demand
  us-central1 list prices per chip-hour, used only for the plan's estimate).

What a "replica" is for TensorFlow: one TPU device. v2 and v3 expose each
TensorCore as a device (v3-32: 32 replicas); v4 and v5p fuse a chip's two
cores into one device (megacore: v4-32 has 16 chips, 16 replicas); v5e and
v6e chips have one core (v5litepod-8: 8 replicas).
"""

import dataclasses
import re

SOURCE_DATE = '2026-12-01'
RUNTIMES_PAGE = 'https://cloud.google.com/tpu/docs/runtimes'
PRICES_PAGE = 'https://cloud.google.com/tpu/pricing'


@dataclasses.dataclass(frozen=True)
class Generation:
  """One TPU generation as gcloud names its slices.

  Attributes:
    name: 'v3', 'v5e', ...
    prefix: the accelerator-type prefix gcloud takes ('v5litepod' for v5e).
    counts: what the number in the type counts, 'cores' or 'chips'.
    sizes: the documented slice sizes (in `counts`).
    cores_per_chip: TensorCores a chip.
    replicas_per_chip: TensorFlow TPU devices a chip.
    chips_per_host: chips on each host VM of a full host.
    image_hardware: the hardware suffix of the 2.18 TF images.
    usd_per_chip_hour: on-demand list price (us-central1), for estimates.
    internal_sizes: slices Google ran but never offered (MLPerf v0.7's
      v3-8192 Multipod): a config may name one; the launcher cannot create
      one.
  """
  name: str
  prefix: str
  counts: str
  sizes: tuple[int, ...]
  cores_per_chip: int
  replicas_per_chip: int
  chips_per_host: int
  image_hardware: str
  usd_per_chip_hour: float
  internal_sizes: tuple[int, ...] = ()


def _doubling(first: int, last: int) -> tuple[int, ...]:
  sizes, n = [], first
  while n <= last:
    sizes.append(n)
    n *= 2
  return tuple(sizes)


GENERATIONS = (
    Generation('v2', 'v2', 'cores', (8, 32, 128, 256, 512), 2, 2, 4,
               '-v5p-and-below', 1.125),
    Generation('v3', 'v3', 'cores', (8, 32, 64, 128, 256, 512, 1024, 2048),
               2, 2, 4, '-v5p-and-below', 2.00, internal_sizes=(4096, 8192)),
    Generation('v4', 'v4', 'cores', _doubling(8, 4096) + (1536,), 2, 1, 4,
               '-v5p-and-below', 3.22),
    Generation('v5e', 'v5litepod', 'chips', (1, 4, 8, 16, 32, 64, 128, 256),
               1, 1, 8, '-v5e-and-v6', 1.20),
    Generation('v5p', 'v5p', 'cores',
               _doubling(8, 8192) + (1536, 3072, 6144, 12288), 2, 1, 4,
               '-v5p-and-below', 4.20),
    Generation('v6e', 'v6e', 'chips', (1, 4, 8, 16, 32, 64, 128, 256), 1, 1,
               8, '-v5e-and-v6', 2.70),
)

# TensorFlow versions with a TPU VM image (the runtimes page), newest first.
TF_IMAGES = ('2.18.0', '2.17.1', '2.17.0', '2.16.2', '2.16.1', '2.15.1',
             '2.15.0')
# The newest TF with an image. requirements-tpu.txt installs tensorflow-tpu
# (2.20.0, the newest on PyPI) in a venv over it; the image supplies the OS,
# drivers and a matching libtpu setup.
DEFAULT_TF = TF_IMAGES[0]


@dataclasses.dataclass(frozen=True)
class Slice:
  """A slice of one generation, e.g. v3-32."""
  generation: Generation
  size: int

  @property
  def accelerator(self) -> str:
    return f'{self.generation.prefix}-{self.size}'

  @property
  def chips(self) -> int:
    g = self.generation
    return self.size // g.cores_per_chip if g.counts == 'cores' else self.size

  @property
  def hosts(self) -> int:
    return max(1, self.chips // self.generation.chips_per_host)

  @property
  def replicas(self) -> int:
    return self.chips * self.generation.replicas_per_chip

  @property
  def platform(self) -> str:
    """The MLPerf submission_platform of a run on this slice."""
    return f'tpu-{self.accelerator}'

  def image(self, tf_version: str = DEFAULT_TF) -> str:
    """The documented TF image for this slice (runtimes page)."""
    if tf_version not in TF_IMAGES:
      raise ValueError(
          f'TensorFlow {tf_version} has no TPU VM image; Google documents '
          f'{", ".join(TF_IMAGES)} ({RUNTIMES_PAGE}, read {SOURCE_DATE}).')
    pod = '-pod' if self.hosts > 1 else ''
    hardware = self.generation.image_hardware if tf_version.startswith(
        '2.18') else ''
    return f'tpu-vm-tf-{tf_version}{pod}-pjrt{hardware}'

  def usd_per_hour(self) -> float:
    return self.chips * self.generation.usd_per_chip_hour


_TYPE = re.compile(r'^([a-z0-9]+?)-(\d+)$')


def parse(accelerator: str, *, public: bool = True) -> Slice:
  """The Slice gcloud's `--accelerator-type=accelerator` names (with
  `public=False` also the internal slices Google's results name).

  Raises:
    ValueError: one line naming the type and the public sizes of its
      generation.
  """
  match = _TYPE.match(accelerator or '')
  by_prefix = {g.prefix: g for g in GENERATIONS}
  if not match or match.group(1) not in by_prefix:
    raise ValueError(
        f'--accelerator={accelerator!r} is not a Cloud TPU type: expected '
        f'one of {", ".join(g.prefix + "-N" for g in GENERATIONS)} (v5e is '
        "'v5litepod-N'), e.g. v3-32, v4-32, v5litepod-8.")
  generation, size = by_prefix[match.group(1)], int(match.group(2))
  if size not in generation.sizes and (
      public or size not in generation.internal_sizes):
    sizes = ', '.join(f'{generation.prefix}-{s}'
                      for s in sorted(generation.sizes))
    extra = (' The 4,096-chip v3 Multipod (v3-8192) of MLPerf v0.7 was '
             'Google-internal; public v3 slices end at v3-2048.'
             if generation.name == 'v3' and size > 2048 else '')
    raise ValueError(f'--accelerator={accelerator}: {generation.name} '
                     f'slices are {sizes}.{extra}')
  return Slice(generation, size)


_IMAGE = re.compile(
    r'^tpu-vm-tf-(\d+\.\d+\.\d+)(-pod)?(-pjrt|-se)?(-v5p-and-below|'
    r'-v5e-and-v6)?$')
BASE_IMAGES = ('tpu-ubuntu2204-base', 'v2-alpha-tpuv5-lite', 'v2-alpha-tpuv5',
               'v2-alpha-tpuv6e')


def check_image(image: str, tpu_slice: Slice) -> None:
  """A user's --runtime must be a documented name that fits the slice.

  Raises:
    ValueError: one line saying what does not fit and the image to use.
  """
  if image in BASE_IMAGES:
    return
  want = tpu_slice.image()
  match = _IMAGE.match(image)
  if not match:
    raise ValueError(
        f'--runtime={image} is not a TPU VM image name: TensorFlow images '
        'read tpu-vm-tf-X.Y.Z[-pod][-pjrt|-se][-hardware] ({RUNTIMES_PAGE}); '
        f'for {tpu_slice.accelerator}: {want}.'.replace(
            '{RUNTIMES_PAGE}', RUNTIMES_PAGE))
  version, pod, api, hardware = match.groups()
  problems = []
  if version not in TF_IMAGES:
    problems.append(f'TensorFlow {version} has no image (newest: '
                    f'{DEFAULT_TF})')
  if bool(pod) != (tpu_slice.hosts > 1):
    problems.append(
        f'{tpu_slice.accelerator} has {tpu_slice.hosts} host'
        f'{"s" if tpu_slice.hosts > 1 else ""}, so the image '
        f'{"needs" if tpu_slice.hosts > 1 else "must not have"} -pod')
  major_minor = tuple(int(x) for x in version.split('.')[:2])
  if major_minor >= (2, 15) and not api:
    problems.append('TF 2.15 and later images need -pjrt or -se')
  if version.startswith('2.18') and hardware != (
      tpu_slice.generation.image_hardware):
    problems.append(f'2.18 images for {tpu_slice.generation.name} end in '
                    f'{tpu_slice.generation.image_hardware}')
  if problems:
    raise ValueError(f'--runtime={image} does not fit '
                     f'{tpu_slice.accelerator}: {"; ".join(problems)}. Use '
                     f'{want}.')
