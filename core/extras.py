"""The requirements file that installs a module the core install leaves out.

requirements.txt is the runtime and the ResNet quickstart; each model, the
LoadGen harness and Google Cloud's clients have their own file (the
Makefile's quickstart targets install them). A run or a tool
(core/entry_point.tool_main) that reaches a module of one of them without
it installed gets one line naming the file to install, instead of a
traceback.
"""

import re

from core import config

# Top-level module -> (requirements file, the make target that installs it).
EXTRAS = {
    'tensorflow_text': ('requirements-bert.txt or requirements-transformer.txt',
                        'make bert_quickstart or make transformer_quickstart'),
    'sacrebleu': ('requirements-transformer.txt', 'make transformer_quickstart'),
    'polib': ('requirements-transformer.txt', 'make transformer_quickstart'),
    'pycocotools': ('requirements-ssd.txt', 'make ssd_quickstart'),
    'recbole': ('requirements-dlrm.txt (pip install --no-deps)',
                'make dlrm_quickstart'),
    'mlperf_loadgen': ('requirements-inference.txt', 'make venv'),
    'ai_edge_litert': ('requirements-inference.txt', 'make venv'),
    'onnxruntime': ('requirements-inference.txt', 'make venv'),
    'tf2onnx': ('requirements-inference.txt', 'make venv'),
    'google': ('requirements-cloud.txt', 'make venv'),
    'googleapiclient': ('requirements-cloud.txt', 'make venv'),
    'oauth2client': ('requirements-cloud.txt', 'make venv'),
    'pyspiel': ('requirements-minigo.txt', 'make minigo_quickstart'),
}


def explain(error: ImportError) -> str | None:
  """One line for a module of an optional requirements file, else None."""
  name = getattr(error, 'name', None) or ''
  if not name:
    found = re.search(r"No module named '([\w.]+)'|import of ([\w.]+) halted",
                      str(error))
    name = next((g for g in found.groups() if g), '') if found else ''
  top = name.split('.')[0]
  if top not in EXTRAS:
    return None
  file, target = EXTRAS[top]
  where = re.search(r'In file "([^"]+)", line \d+\s+import ([\w.]+)',
                    str(error))
  via = (f' ({config.shown_path(where[1])} imports {where[2]}, which needs '
         'it)' if where else '')
  return (f'{name} is not installed{via}: pip install -r {file} ({target} '
          'does it too).')
