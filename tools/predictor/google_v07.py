"""Google's MLPerf v0.7 training results as one table: what the time-to-train
model (tools/predictor) is checked against and where its convergence points come
from.

  python -m tools.predictor.google_v07 --results=PATH/training_results_v0.7 \\
      --out=tools/predictor/data/google_v07_results.json

PATH is a checkout of github.com/mlcommons/training_results_v0.7 (its
`Google/results/<system>/<benchmark>/result_<i>.txt` logs and
`Google/systems/<system>.json` descriptions). For every folder: the system
(chips, generation, framework), the global batch, each run's time to train
(run_start to run_stop), status and how far it trained, the olympic mean of
the runs (MLPerf's score: fastest and slowest dropped, a run that did not
succeed counting as the slowest) and the logged hyper-parameters.

How far a run trained, in samples, because the logs count differently:
- BERT counts steps. The pod logs (TF and JAX) label each eval with the
  steps done; the TF2 logs (tpu-v3-32, gpu-v100-8) label it with the number
  of the eval block, each `epoch_count` steps long. Samples are steps times
  the global batch.
- The others count epochs of their training set, numbered from 0 in some
  logs and from 1 in others, an eval labelled by its block's last epoch in
  some and by the epochs done in others; the first eval follows the first
  block, whose epoch_count is the epochs done then, and that offset holds
  for every later eval.
- SSD evaluates beside training: an eval names the epoch of the checkpoint it
  scored while training has gone on (`epochs_at_stop` records how far).
- DLRM numbers its evals, one every 5% of its 4.2 billion clicks
  (DLRM_EVAL_SHARE).

How long a training step took, from the `block_start`/`block_stop` times
(`block_step_ms`): a block's time over the steps its `epoch_count` covers,
the median over the blocks between the first (which holds the start-up)
and the last (which may stop early). The Transformer's blocks time its
evals, not its training: it has none.
"""

import glob
import json
import os
import re
import statistics
import sys

from absl import app
from absl import flags

from core import entry_point
from training.time_to_accuracy import MLLOG_PREFIX

FLAGS = flags.FLAGS
SOURCE_REPO = 'mlcommons/training_results_v0.7'
# The training-set sizes the epochs count (MLPerf v0.7 reference datasets;
# train_samples in the logs agrees for all but BERT, which logs its budget).
# DLRM is not among them: its logs number 15-18 "epochs" of a set of 4.2
# billion clicks that the runs train on once at most. Its epoch_num counts
# evaluations, one every 5% of train_samples (run_and_time.sh
# --steps_between_evals: 3,793 steps of 55,296 on the v4-128, 6,400 of
# 32,768 on the v4-16; each within 0.02% of 5%).
TRAIN_SET = {'resnet': 1281167, 'ssd': 117266, 'maskrcnn': 117266,
             'transformer': 566340, 'gnmt': 3442299}
DLRM_EVAL_SHARE = 0.05
_SYSTEM = re.compile(r'^(?:tpu-(v\d)-(\d+)|gpu-v100-(\d+))-(.+)$')


def read_lines(path: str) -> list[dict]:
  with open(path, errors='replace') as f:
    return [json.loads(line.split(MLLOG_PREFIX, 1)[1]) for line in f
            if MLLOG_PREFIX in line]


def _first(lines: list[dict], key: str):
  return next((l.get('value') for l in lines if l['key'] == key), None)


def _quality(value) -> float:
  """An eval value: a number, or Mask R-CNN's {'BBOX': .., 'SEGM': ..}
  (both must reach their targets: the smaller one's margin decides)."""
  if isinstance(value, dict):
    return min(float(v) for v in value.values())
  return float(value)


def samples_per_count(benchmark: str, lines: list[dict]) -> float | None:
  """The samples one unit of the log's counts (an eval's epoch_num, a
  block's epoch_count) stands for: a step's batch for BERT, 5% of the
  clicks for DLRM, the training set for the others (None: not known)."""
  if benchmark == 'bert':
    return int(_first(lines, 'global_batch_size') or 0)
  if benchmark == 'dlrm':
    return DLRM_EVAL_SHARE * float(_first(lines, 'train_samples'))
  return TRAIN_SET.get(benchmark)


def trained(benchmark: str, lines: list[dict]) -> dict:
  """How far one run trained at its last eval (the one that reached the
  target for a successful run), in the log's unit and in samples."""
  blocks, evals, at_stop = [], [], None
  for line in lines:
    meta = line.get('metadata', {})
    if line['key'] == 'block_start':
      blocks.append((float(meta['first_epoch_num']),
                     float(meta.get('epoch_count', 1))))
    elif line['key'] == 'eval_accuracy':
      evals.append((float(meta['epoch_num']), list(blocks)))
    elif line['key'] == 'run_stop' and at_stop is None:
      at_stop = list(blocks)
  if not evals:
    return {'epoch_num': None, 'samples_at_target': None}
  epoch_num, before = evals[-1]
  out = {'epoch_num': epoch_num}
  per_count = samples_per_count(benchmark, lines)
  if benchmark == 'bert':
    # TF2 logs number an eval by the blocks before it; pod logs by steps.
    by_block = epoch_num == len(before)
    steps = sum(c for _, c in before) if by_block else epoch_num
    out.update(unit='steps', steps_at_target=steps,
               samples_at_target=steps * per_count)
    return out
  if benchmark == 'dlrm':
    out.update(unit='evals', samples_at_target=epoch_num * per_count)
    return out
  # Epochs done at the first eval are its block's epoch_count whether the
  # log numbers epochs from 0 or from 1 and labels an eval by its block's
  # last epoch or by the epochs done: that offset holds for every eval.
  first_epoch, first_blocks = evals[0]
  offset = (first_blocks[0][1] - first_epoch
            if len(first_blocks) == 1 else 0.0)
  epochs = epoch_num + offset
  out.update(unit='epochs', epochs_at_target=epochs,
             samples_at_target=(epochs * per_count
                                if per_count is not None else None))
  if benchmark == 'ssd':
    # SSD's eval runs beside training, which goes on meanwhile.
    out['epochs_at_stop'] = max([epochs] + [
        f + c - (1 if blocks[0][0] >= 1 else 0) for f, c in at_stop or []])
  return out


def block_step_ms(benchmark: str, lines: list[dict]) -> float | None:
  """The median time of a training step in the blocks between the first
  and the last (None: fewer than three blocks, or the Transformer's)."""
  if benchmark == 'transformer':
    return None  # Its blocks time the eval.
  batch = int(_first(lines, 'global_batch_size') or 0)
  starts = [l for l in lines if l['key'] == 'block_start']
  stops = [l for l in lines if l['key'] == 'block_stop']
  if len(starts) < 3 or len(stops) < 3 or not batch:
    return None
  per_count = samples_per_count(benchmark, lines)
  if per_count is None:
    return None
  per_step = []
  for start, stop in list(zip(starts, stops))[1:-1]:
    steps = float(start['metadata'].get('epoch_count', 1)) * (
        per_count / batch)
    per_step.append((stop['time_ms'] - start['time_ms']) / steps)
  return statistics.median(per_step)


def read_run(path: str, lines: list[dict]) -> dict:
  """One result_<i>.txt, from its MLLOG lines."""
  if not lines:
    raise ValueError(f'{path} holds no MLPerf log lines.')
  times = {l['key']: l['time_ms'] for l in lines
           if l['key'] in ('run_start', 'run_stop')}
  stop = next((l for l in lines if l['key'] == 'run_stop'), None)
  benchmark = _first(lines, 'submission_benchmark')
  evals = [l for l in lines if l['key'] == 'eval_accuracy']
  run = {'name': os.path.basename(path)[:-len('.txt')],
         'status': (stop or {}).get('metadata', {}).get('status'),
         'minutes': ((times['run_stop'] - times['run_start']) / 60000.0
                     if len(times) == 2 else None),
         'last_quality': _quality(evals[-1]['value']) if evals else None,
         'evals': len(evals),
         'block_step_ms': block_step_ms(benchmark, lines)}
  run.update(trained(benchmark, lines))
  return run


def olympic(runs: list[dict]) -> tuple[float | None, list[str]]:
  """MLPerf's score of a folder (minutes) and the runs it drops: sorted by
  time with a failed run as the slowest, one dropped at each end; more
  than one failed run: no score."""
  failed = [r for r in runs if r['status'] != 'success' or r['minutes'] is None]
  passing = sorted((r for r in runs if r not in failed),
                   key=lambda r: r['minutes'])
  if len(failed) > 1 or len(passing) < 2:
    return None, [r['name'] for r in failed]
  kept = passing[1:] if failed else passing[1:-1]
  dropped = [passing[0]['name']] + [r['name'] for r in failed] + (
      [] if failed else [passing[-1]['name']])
  return statistics.fmean(r['minutes'] for r in kept), dropped


def describe_system(name: str, description: dict) -> dict:
  """chips, generation and framework of a system folder's name
  (tpu-v3-8192-TF: 8,192 TensorCores = 4,096 chips)."""
  match = _SYSTEM.match(name)
  if not match:
    raise ValueError(f'{name}: not a Google v0.7 system name.')
  generation, cores, gpus, framework = match.groups()
  tpu = cores is not None
  chips = int(cores) // 2 if tpu else int(gpus)
  listed = int(description['number_of_nodes']) * int(
      description['accelerators_per_node'])
  if listed != chips:
    raise ValueError(f'{name}: the name says {chips} chips, its system '
                     f'description {listed}.')
  return {'system': name,
          'accelerator': (f'{generation}-{cores}' if tpu
                          else f'v100-{gpus}'),
          'generation': generation if tpu else 'v100',
          'chips': chips,
          'framework': framework,
          'system_name': description.get('system_name')}


def extract(root: str, commit: str = '') -> dict:
  """The table of every Google/results folder under a checkout's root."""
  results = os.path.join(root, 'Google', 'results')
  folders = sorted(glob.glob(os.path.join(results, '*', '*')))
  if not folders:
    raise ValueError(f'{results} holds no <system>/<benchmark> folders: '
                     f'give a checkout of github.com/{SOURCE_REPO}.')
  table = []
  for folder in folders:
    system, benchmark = folder.split(os.sep)[-2:]
    with open(os.path.join(root, 'Google', 'systems', system + '.json')) as f:
      row = describe_system(system, json.load(f))
    paths = sorted(glob.glob(os.path.join(folder, 'result_*.txt')),
                   key=lambda p: int(re.findall(r'\d+', os.path.basename(p))[0]))
    logs = [read_lines(p) for p in paths]
    runs = [read_run(p, lines) for p, lines in zip(paths, logs)]
    lines = logs[0]
    score, dropped = olympic(runs)
    hyper = {l['key']: l['value'] for l in lines
             if l['key'].startswith('opt_') or l['key'] in (
                 'max_sequence_length', 'eval_samples', 'train_samples')}
    row.update(benchmark=benchmark,
               global_batch_size=int(_first(lines, 'global_batch_size') or 0),
               runs=runs, score_minutes=score, dropped=dropped,
               hyperparameters=hyper)
    table.append(row)
  return {'source': {'repository': f'https://github.com/{SOURCE_REPO}',
                     'path': 'Google/results, Google/systems',
                     'commit': commit},
          'folders': table}


def define_flags():
  flags.DEFINE_string('results', None, 'A checkout of '
                      f'github.com/{SOURCE_REPO}.', required=True)
  flags.DEFINE_string('out', 'tools/predictor/data/google_v07_results.json',
                      'The JSON table to write.')
  flags.DEFINE_string('commit', '', "The checkout's commit, recorded as the "
                      "table's source.")


def main(argv):
  del argv
  try:
    table = extract(FLAGS.results, FLAGS.commit)
  except (ValueError, OSError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
  tmp = FLAGS.out + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(table, f, indent=1, sort_keys=True)
    f.write('\n')
  os.replace(tmp, FLAGS.out)
  for row in table['folders']:
    score = (f'{row["score_minutes"]:.2f} min' if row['score_minutes']
             is not None else 'no score')
    print(f'{row["system"]:18s} {row["benchmark"]:12s} '
          f'{len(row["runs"]):2d} runs  {score}')
  print(f'wrote {FLAGS.out}')
  return 0


if __name__ == '__main__':
  define_flags()
  entry_point.parse_flags_early(lambda: None)
  app.run(entry_point.tool_main(main))
