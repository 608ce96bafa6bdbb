"""XLA's cost analysis of an HLO module: `python -m tools.ttt.xla_cost FILE`
prints {"flops": ..., "bytes accessed": ..., "transcendentals": ...} as JSON.

XLA's HloCostAnalysis through jaxlib's client (requirements-predict.txt), in
a process of its own: TensorFlow and jaxlib each carry their own XLA, and
one process holds only one. TensorFlow writes the module
(tools/ttt/cost.py); the count is XLA's, per HLO instruction (a dot or
convolution counts 2 FLOPs per multiply-add), on the module as written.
"""

import json
import sys

KEYS = ('flops', 'bytes accessed', 'transcendentals')


def main(argv) -> int:
  if len(argv) != 2:
    print('usage: python -m tools.ttt.xla_cost MODULE.hlo', file=sys.stderr)
    return 2
  try:
    from jaxlib import xla_client  # pylint: disable=import-outside-toplevel
  except ImportError:
    print('error: XLA\'s cost analysis needs jaxlib: pip install -r '
          'requirements-predict.txt', file=sys.stderr)
    return 2
  with open(argv[1]) as f:
    module = xla_client._xla.hlo_module_from_text(f.read())  # pylint: disable=protected-access
  cost = xla_client._xla.hlo_module_cost_analysis(  # pylint: disable=protected-access
      xla_client.make_cpu_client(), module)
  print(json.dumps({k: float(cost.get(k, 0.0)) for k in KEYS}))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
