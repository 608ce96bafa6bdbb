"""The gcloud command lines the launcher prints and runs, and the documented
syntax every one of them is checked against (tests/tools/test_launch.py).

SYNTAX holds, per command, the positional arguments and the flags of its
gcloud reference page (read 2026-12-01; GA unless named `alpha`):
- https://cloud.google.com/sdk/gcloud/reference/compute/tpus/tpu-vm/create
- .../compute/tpus/tpu-vm/{delete,describe,ssh,scp}
- https://cloud.google.com/sdk/gcloud/reference/compute/tpus/queued-resources/create
  (GA tiers: --spot, --reserved, --guaranteed; --valid-until-duration)
- https://cloud.google.com/sdk/gcloud/reference/alpha/compute/tpus/queued-resources/create
  (--best-effort exists in the alpha group only)
- .../compute/tpus/queued-resources/{delete,describe}
- https://cloud.google.com/sdk/gcloud/reference/storage/cp
Global flags (every command): --project, --quiet, --format.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Syntax:
  positionals: int
  required: frozenset
  optional: frozenset
  page: str


_REF = 'https://cloud.google.com/sdk/gcloud/reference/'
GLOBAL_FLAGS = frozenset({'--project', '--quiet', '--format'})
_QR_CREATE_FLAGS = frozenset({
    '--node-id', '--node-count', '--node-prefix', '--async', '--data-disk',
    '--description', '--guaranteed', '--internal-ips', '--labels',
    '--metadata', '--metadata-from-file', '--network', '--range',
    '--reserved', '--scopes', '--service-account', '--shielded-secure-boot',
    '--spot', '--subnetwork', '--tags', '--valid-after-duration',
    '--valid-after-time', '--valid-until-duration', '--valid-until-time',
    '--boot-disk', '--topology', '--type'})
SYNTAX = {
    'compute tpus tpu-vm create': Syntax(
        1, frozenset({'--zone', '--accelerator-type', '--version'}),
        frozenset({'--async', '--boot-disk', '--data-disk', '--description',
                   '--internal-ips', '--labels', '--metadata',
                   '--metadata-from-file', '--network', '--preemptible',
                   '--range', '--reserved', '--scopes', '--service-account',
                   '--shielded-secure-boot', '--spot', '--subnetwork',
                   '--tags', '--topology', '--type'}),
        _REF + 'compute/tpus/tpu-vm/create'),
    'compute tpus tpu-vm delete': Syntax(
        1, frozenset({'--zone'}), frozenset({'--async'}),
        _REF + 'compute/tpus/tpu-vm/delete'),
    'compute tpus tpu-vm describe': Syntax(
        1, frozenset({'--zone'}), frozenset(),
        _REF + 'compute/tpus/tpu-vm/describe'),
    'compute tpus tpu-vm ssh': Syntax(
        1, frozenset({'--zone'}),
        frozenset({'--command', '--worker', '--batch-size', '--internal-ip',
                   '--ssh-flag', '--ssh-key-expire-after', '--strict-host-'
                   'key-checking', '--tunnel-through-iap', '--container',
                   '--dry-run', '--force-key-file-overwrite', '--plain',
                   '--output-directory'}),
        _REF + 'compute/tpus/tpu-vm/ssh'),
    'compute tpus tpu-vm scp': Syntax(
        2, frozenset({'--zone'}),
        frozenset({'--worker', '--batch-size', '--compress', '--internal-ip',
                   '--recurse', '--scp-flag', '--strict-host-key-checking',
                   '--tunnel-through-iap', '--dry-run',
                   '--force-key-file-overwrite', '--plain'}),
        _REF + 'compute/tpus/tpu-vm/scp'),
    'compute tpus queued-resources create': Syntax(
        1, frozenset({'--zone', '--runtime-version', '--accelerator-type'}),
        _QR_CREATE_FLAGS, _REF + 'compute/tpus/queued-resources/create'),
    'alpha compute tpus queued-resources create': Syntax(
        1, frozenset({'--zone', '--runtime-version', '--accelerator-type'}),
        _QR_CREATE_FLAGS | {'--best-effort', '--max-run-duration',
                            '--provisioning-model', '--reservation'},
        _REF + 'alpha/compute/tpus/queued-resources/create'),
    'compute tpus queued-resources delete': Syntax(
        1, frozenset({'--zone'}), frozenset({'--async', '--force'}),
        _REF + 'compute/tpus/queued-resources/delete'),
    'compute tpus queued-resources describe': Syntax(
        1, frozenset({'--zone'}), frozenset(),
        _REF + 'compute/tpus/queued-resources/describe'),
    'storage cp': Syntax(2, frozenset(), frozenset({'--recursive'}),
                         _REF + 'storage/cp'),
}


def command_of(argv: list[str]) -> tuple[str, list[str], list[str]]:
  """('compute tpus tpu-vm create', positionals, flag names) of a gcloud
  argv (flags always written --name=value or --name)."""
  if not argv or argv[0] != 'gcloud':
    raise ValueError(f'not a gcloud command: {argv[:1]}')
  words = [a for a in argv[1:] if not a.startswith('-')]
  flag_names = [a.split('=', 1)[0] for a in argv[1:] if a.startswith('-')]
  for n in range(len(words), 0, -1):
    name = ' '.join(words[:n])
    if name in SYNTAX:
      return name, words[n:], flag_names
  raise ValueError(f'gcloud {" ".join(words)}: not a command this launcher '
                   'uses.')


def check(argv: list[str]) -> None:
  """Raises ValueError unless `argv` fits its command's documented syntax:
  its positional count, its required flags, no flag the page lacks, every
  flag given its value with '=' where it takes one."""
  name, positionals, flag_names = command_of(argv)
  syntax = SYNTAX[name]
  if len(positionals) != syntax.positionals:
    raise ValueError(f'gcloud {name} takes {syntax.positionals} positional '
                     f'argument(s), got {positionals} ({syntax.page})')
  missing = syntax.required - set(flag_names)
  unknown = set(flag_names) - syntax.required - syntax.optional - GLOBAL_FLAGS
  if missing or unknown:
    raise ValueError(f'gcloud {name}: missing {sorted(missing)}, unknown '
                     f'{sorted(unknown)} ({syntax.page})')
  if len(set(flag_names)) != len(flag_names):
    raise ValueError(f'gcloud {name}: a flag given twice: {flag_names}')
