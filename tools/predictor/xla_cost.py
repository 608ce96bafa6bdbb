"""XLA's cost analysis of an HLO module: `python -m tools.predictor.xla_cost FILE`
prints {"flops": ..., "bytes accessed": ..., "transcendentals": ...,
"kernels": ...} as JSON.

XLA's HloCostAnalysis through jaxlib's client (requirements-predict.txt), in
a process of its own: TensorFlow and jaxlib each carry their own XLA, and
one process holds only one. TensorFlow writes the module
(tools/predictor/cost.py); the count is XLA's, per HLO instruction (a dot or
convolution counts 2 FLOPs per multiply-add), on the module as written.

"kernels" is how many kernels the step launches once XLA has fused it: the
module compiled by XLA's CPU compiler, whose entry computation then holds
one instruction per fusion, convolution, dot, copy, sort or call, besides
the parameters, constants, bitcasts and tuples that launch nothing. The
TPU's compiler fuses with its own rules; the count stands for the TPU's
(tools/predictor/model.py: each kernel costs a fixed time a step).
"""

import json
import re
import sys

KEYS = ('flops', 'bytes accessed', 'transcendentals')
# Entry-computation instructions that launch no work.
NOT_KERNELS = frozenset({'parameter', 'constant', 'bitcast',
                         'get-tuple-element', 'tuple'})
_INSTRUCTION = re.compile(
    r'^\s+(?:ROOT )?%?[\w.\-]+ = \S+(?:\{[^}]*\})? ([\w\-]+)\(', re.M)


def kernels(optimized_hlo_text: str) -> int:
  """Kernels the entry computation of a compiled module launches."""
  start = optimized_hlo_text.find('\nENTRY')
  if start < 0:
    raise ValueError('The compiled module has no ENTRY computation.')
  entry = optimized_hlo_text[start:]
  end = entry.find('\n}')
  entry = entry[:end if end >= 0 else None]
  return sum(1 for op in _INSTRUCTION.findall(entry)
             if op not in NOT_KERNELS)


def main(argv) -> int:
  if len(argv) != 2:
    print('usage: python -m tools.predictor.xla_cost MODULE.hlo', file=sys.stderr)
    return 2
  try:
    from jaxlib import xla_client  # pylint: disable=import-outside-toplevel
  except ImportError:
    print('error: XLA\'s cost analysis needs jaxlib: pip install -r '
          'requirements-predict.txt', file=sys.stderr)
    return 2
  xla = xla_client._xla  # pylint: disable=protected-access
  with open(argv[1]) as f:
    module = xla.hlo_module_from_text(f.read())
  client = xla_client.make_cpu_client()
  cost = xla.hlo_module_cost_analysis(client, module)
  stablehlo = xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
  executable = client.compile_and_load(stablehlo, client.devices()[:1],
                                       xla_client.CompileOptions())
  out = {k: float(cost.get(k, 0.0)) for k in KEYS}
  out['kernels'] = kernels(executable.hlo_modules()[0].to_string())
  print(json.dumps(out))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
