"""TensorFlow's error text as one line a user can read.

TensorFlow's messages carry its internals: `{{function_node
__wrapped__IteratorGetNext_output_types_1_device_/job:localhost/...}}`
before the cause and `[Op:IteratorGetNext] name:` after it. One-line errors
show the cause without them, cut at a word; the whole text stays in the
exception chain, which `--verbose` prints.
"""

import re

_DECORATIONS = re.compile(r'\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]( name:.*)?')


def one_line(error: BaseException, limit: int = 200) -> str:
  """The first line of `error`'s message without TensorFlow's decorations,
  at most about `limit` characters, cut at a word."""
  message = getattr(error, 'message', None) or str(error)
  line = (message.strip().splitlines() or [''])[0]
  line = _DECORATIONS.sub('', line).strip()
  if len(line) > limit:
    line = line[:limit].rsplit(' ', 1)[0] + ' ...'
  return line or type(error).__name__
