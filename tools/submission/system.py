"""A system description (`systems/<system>.json`) for an MLPerf package.

Every field the ruleset's checker wants is written. Values come from, in
rising precedence: what this machine says of itself (a CPU system: the
processor, cores, memory, OS), what a TPU slice is (`tpu-v3-32`: hosts,
chips a host, the chip and its memory), what the runs logged (submitter,
division, status), the user's description file (JSON, any field), and flags.
A field no source fills is written empty, as Google's own v0.7 system files
leave the ones they did not state; the fields a results table shows must
carry a value (`MUST_FILL`), or the package is refused naming them.

No TensorFlow.
"""

import importlib.metadata
import json
import os
import platform

# mlperf_logging 4.1.68, system_desc_checker.check_system_desc: the fields a
# training system file must have (every training ruleset).
TRAINING_FIELDS = (
    'submitter', 'division', 'status', 'system_name', 'number_of_nodes',
    'host_processors_per_node', 'host_processor_model_name',
    'host_processor_core_count', 'host_processor_vcpu_count',
    'host_processor_frequency', 'host_processor_caches',
    'host_processor_interconnect', 'host_memory_capacity',
    'host_storage_type', 'host_storage_capacity', 'host_networking',
    'host_networking_topology', 'host_memory_configuration',
    'accelerators_per_node', 'accelerator_model_name',
    'accelerator_host_interconnect', 'accelerator_frequency',
    'accelerator_on-chip_memories', 'accelerator_memory_configuration',
    'accelerator_memory_capacity', 'accelerator_interconnect',
    'accelerator_interconnect_topology', 'cooling', 'hw_notes', 'framework',
    'other_software_stack', 'operating_system', 'sw_notes')

# MLPerf Inference v0.5's tools/submission/system_desc_id.json
# (mlcommons/inference, v0.5/tools/submission, commit 675557a5): its
# checker refuses any other field, so an inference file has exactly these.
INFERENCE_V05_FIELDS = tuple(
    f for f in TRAINING_FIELDS if f != 'host_processor_vcpu_count')

# What a results table shows: a package without them is refused.
MUST_FILL = ('submitter', 'division', 'status', 'system_name',
             'number_of_nodes', 'host_processors_per_node',
             'host_processor_model_name', 'accelerators_per_node',
             'accelerator_model_name', 'framework')

# The log's submission_status (training/mlperf_log.py) as the system file's
# status: the words rulesets 4.0 and later require (0.7 takes any).
STATUS = {'cloud': 'Available cloud', 'onprem': 'Available on-premise',
          'preview': 'Preview',
          'research': 'Research, Development, or Internal (RDI)'}

# HBM a chip and the interconnect of each generation. Sources (Google's
# Cloud TPU pages, read 2026-12-07 through the stored copies):
# cloud.google.com/tpu/docs/v5p ("HBM2e 95GB", "3D Torus"),
# cloud.google.com/tpu/docs/v5e ("HBM2 16 GB", "2D Torus"),
# cloud.google.com/tpu/docs/v6e, cloud.google.com/tpu/docs/v4 and
# cloud.google.com/tpu/docs/system-architecture-tpu-vm (v2 16 GiB, v3 32 GiB
# a chip; v2/v3 2D torus, v4 3D torus).
TPU_CHIPS = {
    'v2': ('16 GiB', '2-D toroidal mesh'),
    'v3': ('32 GiB', '2-D toroidal mesh'),
    'v4': ('32 GiB', '3-D torus'),
    'v5e': ('16 GB', '2-D torus'),
    'v5p': ('95 GB', '3-D torus'),
    'v6e': ('32 GB', '2-D torus'),
}


def _version(package: str) -> str:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return ''


def _cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor()


def _memory() -> str:
  try:
    with open('/proc/meminfo') as f:
      kib = int(f.readline().split()[1])
    return f'{kib / 2**20:.0f} GiB'
  except (OSError, ValueError, IndexError):
    return ''


def software() -> dict:
  """Framework and software stack of this environment (the runs' own when
  the package is made where they ran)."""
  tf = _version('tensorflow') or _version('tensorflow-tpu')
  stack = [f'Python {platform.python_version()}']
  for name in ('mlperf-logging', 'gin-config', 'mlcommons-loadgen'):
    if _version(name):
      stack.append(f'{name} {_version(name)}')
  return {'framework': f'TensorFlow {tf}' if tf else '',
          'other_software_stack': ', '.join(stack),
          'operating_system': platform.platform()}


def this_host() -> dict:
  """A CPU system of one node: this machine."""
  return {'number_of_nodes': '1', 'host_processors_per_node': '1',
          'host_processor_model_name': _cpu_model(),
          'host_processor_core_count': str(os.cpu_count() or ''),
          'host_processor_vcpu_count': str(os.cpu_count() or ''),
          'host_memory_capacity': _memory(),
          'accelerators_per_node': '0', 'accelerator_model_name': 'N/A',
          **software()}


def tpu_slice(accelerator: str) -> dict:
  """A Cloud TPU slice ('v3-32'): hosts, chips a host, the chip."""
  from distribution import tpu_slices
  s = tpu_slices.parse(accelerator, public=False)
  name = s.generation.name
  memory, topology = TPU_CHIPS.get(name, ('', ''))
  return {'number_of_nodes': str(s.hosts),
          'accelerators_per_node': str(s.chips // s.hosts),
          'accelerator_model_name': f'TPU {name}',
          'accelerator_memory_capacity': memory,
          'accelerator_interconnect_topology': topology,
          **software()}


def from_platform(platform_name: str) -> dict:
  """The facts a run's submission_platform gives: tpu-<slice> or a CPU."""
  if platform_name.startswith('tpu-'):
    return tpu_slice(platform_name[len('tpu-'):])
  return this_host()


def read_file(path: str) -> dict:
  """The user's description: a JSON object of fields.

  Raises:
    ValueError: not JSON, not an object, or a field the checkers do not know.
  """
  try:
    with open(path) as f:
      given = json.load(f)
  except FileNotFoundError:
    raise ValueError(f'--system_desc={path}: no such file.') from None
  except json.JSONDecodeError as e:
    raise ValueError(f'--system_desc={path} is not JSON ({e}).') from None
  if not isinstance(given, dict):
    raise ValueError(f'--system_desc={path} must hold one JSON object of '
                     'system fields.')
  unknown = sorted(set(given) - set(TRAINING_FIELDS))
  if unknown:
    raise ValueError(f'--system_desc={path}: unknown field(s) '
                     f'{", ".join(unknown)} (MLPerf\'s system fields: '
                     'docs/submitting.md).')
  return {k: str(v) for k, v in given.items()}


def build(*layers: dict, fields=TRAINING_FIELDS) -> dict:
  """The description: `layers` merged (later wins; empty values do not
  override), every field of `fields` present.

  Raises:
    ValueError: a MUST_FILL field is empty.
  """
  merged = {}
  for layer in layers:
    merged.update({k: v for k, v in layer.items() if v not in ('', None)})
  missing = [f for f in MUST_FILL if not merged.get(f)]
  if missing:
    raise ValueError(
        f'the system description lacks {", ".join(missing)}: give '
        f'{"them" if len(missing) > 1 else "it"} in --system_desc (a JSON '
        'file of fields) or the matching flag.')
  return {f: str(merged.get(f, '')) for f in fields}
