"""Cloud TPU slice types, zones, VM shapes and the software a run uses on
them: the one table the launcher, train.py and the notebook read. Update it
here, with its sources.

Sources (Google's pages as stored on the date beside each):
- TPU software versions, https://cloud.google.com/tpu/docs/runtimes (read
  2026-12-01): TF images are named `tpu-vm-tf-x.y.z[-pod][-{device_api}]`
  and the TF table ends at 2.18; "use the TPU software version that matches
  the TensorFlow version"; TPU v6e, v5e and v5p support TensorFlow 2.15 and
  later (PJRT); for frameworks installed with pip the base images are
  `tpu-ubuntu2204-base` (v4 and older), `v2-alpha-tpuv5` (v5p),
  `v2-alpha-tpuv5-lite` (v5e), `v2-alpha-tpuv6e` (v6e). The page also says
  the Cloud TPU API is no longer under active development and points new
  generations at Compute Engine or GKE.
- Google's own TensorFlow TPU tests (GoogleCloudPlatform/ml-auto-solutions
  @ 7eda193, 2026-08-21, read 2026-12-04: dags/solutions_team/
  solutionsteam_tf_release_supported.py and configs/tensorflow/common.py):
  TensorFlow's TPU build installed with pip (`tensorflow-tpu==X.Y.Z -f
  https://storage.googleapis.com/libtpu-tf-releases/index.html`) on the base
  images (`v2-alpha-tpuv5` for v2, v3, v4, v5p; `v2-alpha-tpuv5-lite`;
  `v2-alpha-tpuv6e`), v2-8 to v6e-4 and v4-32, v5e-16, v5p-32 pods. That is
  the pair this suite installs (tools/tpu_venv.py): TENSORFLOW_TPU below, with
  the libtpu it was built against, on the generation's base image.
- Zones: https://cloud.google.com/tpu/docs/regions-zones (read 2026-12-04,
  the stored copies of 2026: US, Europe, Asia). v3 pod slices (v3-32 to
  v3-2048) are offered in europe-west4-a only; the US zones have v3-8.
- Slice types: https://cloud.google.com/tpu/docs/supported-tpu-versions (v2:
  v2-8 ... v2-512; v3: v3-8 ... v3-2048, the largest public v3 slice: the
  4,096-chip v0.7 Multipod was Google-internal), https://cloud.google.com/
  tpu/docs/v4 (2 TensorCores a chip, one TensorFlow device a chip:
  megacore), https://cloud.google.com/tpu/docs/v5e (`v5litepod-N`, N chips,
  one TensorCore a chip; "each TPU VM in a v5e slice contains 1, 4 or 8
  chips"), https://cloud.google.com/tpu/docs/v5p (`v5p-N`, N TensorCores, 2
  a chip, up to v5p-12288), https://cloud.google.com/tpu/docs/v6e (read
  2026-12-04: `v6e-N`, N chips; its table gives the VMs: v6e-1, -4, -8 one
  VM, v6e-16 4 VMs, v6e-256 64 VMs, i.e. 4 chips a VM in multi-host slices,
  ct6e-standard-4t), https://cloud.google.com/kubernetes-engine/docs/
  concepts/plan-tpus (multi-host v5e node pools are ct5lp-hightpu-4t: 4
  chips a VM). v2, v3, v4 and v5p VMs hold 4 chips.
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
ZONES_DATE = '2026-12-04'
RUNTIMES_PAGE = 'https://cloud.google.com/tpu/docs/runtimes'
ZONES_PAGE = 'https://cloud.google.com/tpu/docs/regions-zones'
PRICES_PAGE = 'https://cloud.google.com/tpu/pricing'
GOOGLE_TF_TESTS = ('GoogleCloudPlatform/ml-auto-solutions dags/solutions_team/'
                   'configs/tensorflow/common.py')
# TensorFlow's TPU build that tools/tpu_venv.py installs (requirements-tpu.txt;
# a test holds the two equal): the newest on PyPI.
TENSORFLOW_TPU = '2.20.0'


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
    single_host_chips: the most chips a single-host slice has on its one
      VM (4; v5e and v6e: 8). Larger slices are multi-host, 4 chips a VM.
    image_hardware: the hardware suffix of the 2.18 TF images.
    base_image: the runtimes page's image for a framework installed with
      pip, the one the launcher creates (TensorFlow from tools/tpu_venv.py).
    zones: (sizes, zones) pairs from the regions-zones page; sizes () means
      every size.
    usd_per_chip_hour: on-demand list price (us-central1), for estimates.
    internal_sizes: slices Google ran but never offered (MLPerf v0.7's
      v3-8192 Multipod): a config may name one; the launcher cannot create
      one.
    tensorflow_note: what Google's pages say of TensorFlow on this
      generation beyond the runtimes page's support, printed by the launcher.
  """
  name: str
  prefix: str
  counts: str
  sizes: tuple[int, ...]
  cores_per_chip: int
  replicas_per_chip: int
  single_host_chips: int
  image_hardware: str
  base_image: str
  zones: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...]
  usd_per_chip_hour: float
  internal_sizes: tuple[int, ...] = ()
  tensorflow_note: str = ''


def _doubling(first: int, last: int) -> tuple[int, ...]:
  sizes, n = [], first
  while n <= last:
    sizes.append(n)
    n *= 2
  return tuple(sizes)


# VMs of a multi-host slice hold 4 chips in every generation (v2-v5p: every
# VM; v5e and v6e: the pages above).
MULTI_HOST_CHIPS_PER_VM = 4

# Zones (regions-zones page, read ZONES_DATE). Sizes () means every size of
# the generation; a zone listed "single tenant" on the page is included.
_V2_ZONES = (((8,), ('us-central1-b', 'us-central1-c', 'europe-west4-a',
                     'asia-east1-c')),
             ((32, 128, 256, 512), ('us-central1-a', 'europe-west4-a')))
_V3_ZONES = (((8,), ('us-central1-a', 'us-central1-b', 'europe-west4-a')),
             ((32, 64, 128, 256, 512, 1024, 2048), ('europe-west4-a',)))
_V4_ZONES = (((), ('us-central2-b',)),)
_V5E_ZONES = (((), ('us-central1-a', 'us-south1-a', 'us-west1-c',
                    'us-west4-a', 'us-east5-a', 'us-east5-b', 'us-east5-c',
                    'europe-west4-b', 'asia-southeast1-b')),)
_V5P_ZONES = (((), ('us-central1-a', 'us-east5-a', 'us-east5-b',
                    'us-east5-c', 'us-south1-a', 'europe-west4-b')),)
_V6E_ZONES = (((), ('us-central1-b', 'us-east1-d', 'us-east5-a', 'us-east5-b',
                    'us-east5-c', 'us-east4-a', 'us-east4-b', 'us-west1-c',
                    'europe-west4-a', 'asia-northeast1-b')),)

GENERATIONS = (
    Generation('v2', 'v2', 'cores', (8, 32, 128, 256, 512), 2, 2, 4,
               '-v5p-and-below', 'tpu-ubuntu2204-base', _V2_ZONES, 1.125),
    Generation('v3', 'v3', 'cores', (8, 32, 64, 128, 256, 512, 1024, 2048),
               2, 2, 4, '-v5p-and-below', 'tpu-ubuntu2204-base', _V3_ZONES,
               2.00, internal_sizes=(4096, 8192)),
    Generation('v4', 'v4', 'cores', _doubling(8, 4096) + (1536,), 2, 1, 4,
               '-v5p-and-below', 'tpu-ubuntu2204-base', _V4_ZONES, 3.22),
    Generation('v5e', 'v5litepod', 'chips', (1, 4, 8, 16, 32, 64, 128, 256),
               1, 1, 8, '-v5e-and-v6', 'v2-alpha-tpuv5-lite', _V5E_ZONES,
               1.20),
    Generation('v5p', 'v5p', 'cores',
               _doubling(8, 8192) + (1536, 3072, 6144, 12288), 2, 1, 4,
               '-v5p-and-below', 'v2-alpha-tpuv5', _V5P_ZONES, 4.20),
    Generation('v6e', 'v6e', 'chips', (1, 4, 8, 16, 32, 64, 128, 256), 1, 1,
               8, '-v5e-and-v6', 'v2-alpha-tpuv6e', _V6E_ZONES, 2.70,
               tensorflow_note=(
                   'v6e: the runtimes page lists TensorFlow 2.15+ for v6e, '
                   'but Google\'s v6e training guides cover JAX and PyTorch '
                   'only (https://cloud.google.com/tpu/docs/v6e, read '
                   '2026-12-04); its TensorFlow runs are Google\'s release '
                   'tests on a v6e-4.')),
)

# TensorFlow versions with a TPU VM image (the runtimes page), newest first.
# None is TENSORFLOW_TPU: a `tpu-vm-tf-` image carries its own TensorFlow,
# which the suite's venv would not match (the launcher creates the base
# image instead; --noinstall runs an image's own TensorFlow as is).
TF_IMAGES = ('2.18.0', '2.17.1', '2.17.0', '2.16.2', '2.16.1', '2.15.1',
             '2.15.0')
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
    """TPU VMs (the workers gcloud's --worker=all reaches)."""
    if self.chips <= self.generation.single_host_chips:
      return 1
    return self.chips // MULTI_HOST_CHIPS_PER_VM

  @property
  def zones(self) -> tuple[str, ...]:
    """The zones Google's regions-zones page offers this slice in."""
    for sizes, zones in self.generation.zones:
      if not sizes or self.size in sizes:
        return zones
    return ()

  def check_zone(self, zone: str) -> None:
    """Raises ValueError (one line) for a zone that does not offer it."""
    if zone not in self.zones:
      raise ValueError(
          f'--zone={zone} does not offer {self.accelerator}: Google offers it '
          f'in {", ".join(self.zones) or "no zone"} ({ZONES_PAGE}, read '
          f'{ZONES_DATE}).')

  @property
  def base_image(self) -> str:
    """The image the launcher creates: the runtimes page's base image for
    the generation, with TensorFlow's TPU build installed by pip."""
    return self.generation.base_image

  @property
  def replicas(self) -> int:
    return self.chips * self.generation.replicas_per_chip

  @property
  def platform(self) -> str:
    """The MLPerf submission_platform of a run on this slice."""
    return f'tpu-{self.accelerator}'

  def image(self, tf_version: str = DEFAULT_TF) -> str:
    """The documented TF image of `tf_version` for this slice (runtimes
    page): for --noinstall, which runs the image's own TensorFlow."""
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
               'v2-alpha-tpuv6e')  # The runtimes page's, for pip installs.


def check_image(image: str, tpu_slice: Slice, install: bool = True) -> None:
  """A user's --runtime must be a documented name that fits the slice and
  the TensorFlow the run will use (Google: the TPU software version matches
  the TensorFlow version).

  Args:
    install: whether tools/tpu_venv.py installs TENSORFLOW_TPU on it (the
      launcher's default) or the image's own TensorFlow runs (--noinstall).

  Raises:
    ValueError: one line saying what does not fit and the image to use.
  """
  base = tpu_slice.base_image
  if image in BASE_IMAGES:
    if not install:
      raise ValueError(
          f'--runtime={image} --noinstall: a base image has no TensorFlow; '
          f'let the launcher install tensorflow-tpu {TENSORFLOW_TPU} (drop '
          f'--noinstall), or pick a TensorFlow image ({tpu_slice.image()}).')
    return
  match = _IMAGE.match(image)
  if not match:
    raise ValueError(
        f'--runtime={image} is not a TPU VM image name: TensorFlow images '
        f'read tpu-vm-tf-X.Y.Z[-pod][-pjrt|-se][-hardware], base images '
        f'{", ".join(BASE_IMAGES)} ({RUNTIMES_PAGE}); for '
        f'{tpu_slice.accelerator}: {base}.')
  version, pod, api, hardware = match.groups()
  if install:
    raise ValueError(
        f'--runtime={image} carries TensorFlow {version}, but the suite '
        f'installs tensorflow-tpu {TENSORFLOW_TPU} (tools/tpu_venv.py) and '
        'Google says to run the TPU software that matches the TensorFlow '
        f'version ({RUNTIMES_PAGE}): use {base} (the default), or '
        '--noinstall to run the image\'s own TensorFlow.')
  want = tpu_slice.image()
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
