"""XLA's cost analysis of an HLO module: `python -m tools.predictor.xla_cost FILE`
prints {"flops": ..., "bytes accessed": ..., "transcendentals": ...,
"kernels": ...} as JSON (`--flops_only FILE`: without "kernels", which
takes the module's compile).

XLA's HloCostAnalysis through jaxlib's client (requirements-predict.txt), in
a process of its own: TensorFlow and jaxlib each carry their own XLA, and
one process holds only one. TensorFlow writes the module
(tools/predictor/cost.py); the count is XLA's, per HLO instruction (a dot or
convolution counts 2 FLOPs per multiply-add), on the module as written.

"kernels" is how many kernels the step launches once XLA has fused it: the
module compiled by XLA's CPU compiler, whose entry computation then holds
one instruction per fusion, convolution, dot, copy, sort or call, besides
the parameters, constants, bitcasts and tuples that launch nothing; a
conditional adds its larger branch's. The
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
_NAME = re.compile(r'^\s+(?:ROOT )?%?[\w.\-]+ = ')
_OPCODE = re.compile(r'\s*([\w\-]+)\(')


def _opcode(line: str) -> str | None:
  """The opcode of an HLO instruction line (None for other lines). The
  result type before it may be a tuple, with spaces and nested brackets."""
  name = _NAME.match(line)
  if not name:
    return None
  rest = line[name.end():]
  if rest.startswith('('):  # A tuple type: skip to its closing parenthesis.
    depth = 0
    for i, char in enumerate(rest):
      depth += {'(': 1, ')': -1}.get(char, 0)
      if depth == 0:
        rest = rest[i + 1:]
        break
  else:
    rest = rest[len(rest.split(' ', 1)[0]):]
  op = _OPCODE.match(rest)
  return op.group(1) if op else None


_COMPUTATION = re.compile(r'^(ENTRY )?%?([\w.\-]+) .*\{$', re.M)
_BRANCHES = re.compile(
    r'(?:true_computation|false_computation)=%?([\w.\-]+)|'
    r'branch_computations=\{([^}]*)\}')


def _computations(text: str) -> tuple[dict, str]:
  """({name: its body's text}, the entry computation's name)."""
  bodies, entry = {}, None
  for match in _COMPUTATION.finditer(text):
    end = text.find('\n}', match.end())
    bodies[match.group(2)] = text[match.end():end if end >= 0 else None]
    if match.group(1):
      entry = match.group(2)
  if entry is None:
    raise ValueError('The compiled module has no ENTRY computation.')
  return bodies, entry


def kernels(optimized_hlo_text: str) -> int:
  """Kernels the entry computation of a compiled module launches; a
  conditional launches its larger branch's (as XLA's FLOP count takes the
  larger branch: Mask R-CNN's step is a conditional of its two image
  orientations). A while loop is one kernel here: its body is not looked
  into (its FLOPs are counted once: tools/predictor/cost.py)."""
  bodies, entry = _computations(optimized_hlo_text)

  def count(name: str) -> int:
    total = 0
    for line in bodies[name].splitlines():
      op = _opcode(line)
      if op is None or op in NOT_KERNELS:
        continue
      total += 1
      if op == 'conditional':
        branches = [b.strip().lstrip('%') for m in _BRANCHES.finditer(line)
                    for b in ((m.group(1),) if m.group(1) else
                              m.group(2).split(','))]
        total += max((count(b) for b in branches if b in bodies), default=0)
    return total

  return count(entry)


def main(argv) -> int:
  args = argv[1:]
  flops_only = args[:1] == ['--flops_only']
  if flops_only:
    args = args[1:]
  if len(args) != 1:
    print('usage: python -m tools.predictor.xla_cost [--flops_only] '
          'MODULE.hlo', file=sys.stderr)
    return 2
  try:
    from jaxlib import xla_client  # pylint: disable=import-outside-toplevel
  except ImportError:
    print('error: XLA\'s cost analysis needs jaxlib: pip install -r '
          'requirements-predict.txt', file=sys.stderr)
    return 2
  xla = xla_client._xla  # pylint: disable=protected-access
  with open(args[0]) as f:
    module = xla.hlo_module_from_text(f.read())
  client = xla_client.make_cpu_client()
  cost = xla.hlo_module_cost_analysis(client, module)
  out = {k: float(cost.get(k, 0.0)) for k in KEYS}
  if not flops_only:
    stablehlo = xla.mlir.hlo_to_stablehlo(
        module.as_serialized_hlo_module_proto())
    executable = client.compile_and_load(stablehlo, client.devices()[:1],
                                         xla_client.CompileOptions())
    out['kernels'] = kernels(executable.hlo_modules()[0].to_string())
  print(json.dumps(out))
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
