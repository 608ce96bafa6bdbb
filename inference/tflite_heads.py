"""The layers of a converted TFLite model that make given outputs: from
each output back through the ops after it to, and including, the
convolutions that compute it (a detector's class head: its convolutions,
reshapes and the concatenation). tools/quantize_tflite.py keeps them
float when a task asks (training.task.QuantizedServing.float_outputs).
"""

import numpy as np

# The ops a walk back from an output stops at (kept, their inputs not).
LAYER_OPS = ('CONV_2D', 'DEPTHWISE_CONV_2D', 'FULLY_CONNECTED')


def _interpreter(content: bytes):
  from ai_edge_litert import interpreter as litert  # With the INT8 tools.
  # Without XNNPACK, which rewrites the graph it delegates.
  interpreter = litert.Interpreter(
      model_content=content, experimental_op_resolver_type=(
          litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
  interpreter.allocate_tensors()
  return interpreter


def head_ops(content: bytes, signature: str, outputs) -> list[dict]:
  """The ops from each of `signature`'s `outputs` back to their layers
  (LAYER_OPS, included): [{'name': the op's output tensor name, 'op': its
  type, 'dtype': the output's numpy dtype}], output side first.

  Raises:
    ValueError: an output the signature lacks (its outputs named).
  """
  interpreter = _interpreter(content)
  details = interpreter.get_signature_runner(signature).get_output_details()
  missing = [o for o in outputs if o not in details]
  if missing:
    raise ValueError(f'The `{signature}` signature has no output '
                     f'{missing}; it has {sorted(details)}.')
  producer = {}
  for op in interpreter._get_ops_details():  # pylint: disable=protected-access
    for index in op['outputs']:
      producer[index] = op
  found, seen = [], set()
  stack = [details[o]['index'] for o in outputs]
  while stack:
    op = producer.get(stack.pop())
    if op is None or op['index'] in seen:
      continue  # A model input or a constant; or met before.
    seen.add(op['index'])
    tensor = interpreter._get_tensor_details(op['outputs'][0], 0)  # pylint: disable=protected-access
    found.append({'name': tensor['name'], 'op': op['op_name'],
                  'dtype': np.dtype(tensor['dtype'])})
    if op['op_name'] not in LAYER_OPS:
      stack.extend(i for i in op['inputs'] if i >= 0)
  return found
