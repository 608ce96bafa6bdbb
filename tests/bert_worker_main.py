"""One process of the 2-process BERT tests (a mesh over processes, or
MultiWorkerMirroredStrategy).

  python -m tests.bert_worker_main OUT DATA_DIR MODEL_DIR [FILE.gin ...] \
      [NAME=VALUE ...]
TF_CONFIG must be set. Trains a short run of gin/bert_quickstart.gin (and
the extra gin files) on the
`sums_data` corpus and saves its step, quality and last eval's metrics to
OUT.json; the
weights are in MODEL_DIR's final checkpoint.
"""

import json
import sys

from tests import helpers


def main(out, data_dir, model_dir, *args):
  files = [a for a in args if a.endswith('.gin')]
  overrides = [a for a in args if not a.endswith('.gin')]
  result = helpers.run_gin(
      ['gin/bert_quickstart.gin', 'gin/hardware/multi_worker.gin', *files],
      helpers.sums_bindings(data_dir, model_dir, **{
          'DETERMINISTIC': True, 'TRAIN_STEPS': 4, 'STEPS_PER_LOOP': 2,
          'EVAL_EVERY_STEPS': 4, 'FIRST_EVAL_STEP': 4,
          **dict(o.split('=', 1) for o in overrides)}))
  with open(out + '.json', 'w') as f:
    json.dump({'quality': result.quality, 'step': result.step,
               'metrics': result.evals[-1][3] if result.evals else {}}, f)


if __name__ == '__main__':
  main(*sys.argv[1:])
