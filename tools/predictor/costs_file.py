"""tools/predictor/data/program_costs.json: XLA's counts of each config's steps,
measured once (`python -m tools.predict --measure --gin_file=...`) and read
by every prediction, so that predicting needs neither a compile nor jaxlib.

A config's entry is keyed by its gin files and the bindings that change its
program; the ones that only change the schedule or the slice (below) share
the entry: a step's cost is counted at chosen per-replica batches and
interpolated.
"""

import json
import os
import re

from tools.predictor import cost as cost_lib

PATH = os.path.join(cost_lib.ROOT, 'tools', 'predictor', 'data', 'program_costs.json')
SCHEDULE_MACROS = ('GLOBAL_BATCH_SIZE', 'EVAL_BATCH_SIZE', 'TRAIN_STEPS',
                   'TRAIN_EPOCHS', 'STEPS_PER_LOOP', 'EVAL_EVERY_STEPS',
                   'CHECKPOINT_EVERY_STEPS', 'ACCELERATOR', 'DATA_DIR',
                   'INIT_CHECKPOINT', 'BACKBONE_CHECKPOINT',
                   'WEIGHT_UPDATE_SHARDING')
_NAME = re.compile(r'^\s*([\w.]+)\s*=')


def key(gin_files: list[str], bindings: list[str]) -> str:
  program = [b.strip() for b in bindings
             if (_NAME.match(b) or [None, ''])[1] not in SCHEDULE_MACROS]
  return ' '.join(list(gin_files) + sorted(program))


def load(path: str = PATH) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def lookup(gin_files, bindings, path: str = PATH) -> cost_lib.ProgramCost:
  """The stored cost of a config.

  Raises:
    ValueError: naming the command that measures it.
  """
  entry = load(path).get(key(gin_files, bindings))
  if entry is None:
    files = ' '.join(f'--gin_file={f}' for f in gin_files)
    raise ValueError(
        f'No XLA cost of {key(gin_files, bindings)} in {os.path.relpath(path, cost_lib.ROOT)}: '
        f'measure it first (python -m tools.predict --measure {files} ...; '
        'about a minute a model on 2 cores).')
  return cost_lib.ProgramCost.from_json(entry)


def store(program: cost_lib.ProgramCost, path: str = PATH) -> None:
  table = load(path)
  table[key(program.config['gin_files'], program.config['bindings'])] = (
      program.to_json())
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(table, f, indent=1, sort_keys=True)
    f.write('\n')
  os.replace(tmp, path)
