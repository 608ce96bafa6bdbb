"""One worker of the 2-process MultiWorkerMirroredStrategy test.

  python -m tests.multi_worker_main OUT.npz DATA_DIR MODEL_DIR GIN_FILE \
      [NAME=VALUE ...]
TF_CONFIG must be set. Trains a short run of GIN_FILE (e.g.
gin/resnet_quickstart.gin) and saves its weights, eval count and quality.
"""

import json
import sys

import numpy as np

from tests import helpers


def main(out, data_dir, model_dir, gin_file, *overrides):
  result = helpers.run_gin(
      [gin_file, 'gin/hardware/multi_worker.gin'],
      helpers.quick_bindings(data_dir, model_dir,
                             **{'TRAIN_STEPS': 6,
                                'CHECKPOINT_EVERY_STEPS': 2,
                                'EVAL_BATCH_SIZE': 50,
                                **dict(o.split('=', 1) for o in overrides)}))
  last_eval = result.evals[-1][3] if result.evals else {}
  np.savez(out, count=last_eval.get('examples', -1), **{
      k.replace('/', '.'): v for k, v in helpers.weights(result.model).items()})
  with open(out + '.json', 'w') as f:
    json.dump({'quality': result.quality, 'metrics': last_eval,
               'step': result.step, 'preempted': result.preempted}, f)


if __name__ == '__main__':
  main(*sys.argv[1:])
