"""One worker of the 2-process MultiWorkerMirroredStrategy test.

  python tests/multi_worker_main.py DATA_DIR MODEL_DIR OUT.npz
TF_CONFIG must be set. Trains a short quickstart run and saves its weights.
"""

import sys

import numpy as np

from tests import helpers


def main(data_dir, model_dir, out):
  result = helpers.run_quick(data_dir, model_dir,
                             extra_files=['gin/hardware/multi_worker.gin'],
                             **{'train.train.train_steps': 6,
                                'train.train.checkpoint_every_steps': 2,
                                'train.train.eval_batch_size': 50})
  np.savez(out, count=result.evals[-1][3]['examples'], **{
      k.replace('/', '.'): v for k, v in helpers.weights(result.model).items()})


if __name__ == '__main__':
  main(*sys.argv[1:])
