"""One worker of the 2-process DLRM test.

  python -m tests.dlrm_worker_main OUT.npz DATA_DIR MODEL_DIR [NAME=VALUE ...]
TF_CONFIG must be set. Trains gin/dlrm_quickstart.gin briefly and saves the
final checkpoint's weights (tables whole, however the run sharded them),
the last evaluation's metrics and the quality.
"""

import json
import sys

import numpy as np

from tests import helpers
from tests import test_dlrm_train


def main(out, data_dir, model_dir, *overrides):
  result = helpers.run_gin(
      ['gin/dlrm_quickstart.gin', 'gin/hardware/multi_worker.gin'],
      test_dlrm_train.bindings(data_dir, model_dir, **dict(
          o.split('=', 1) for o in overrides)))
  tensors = helpers.checkpoint_tensors(model_dir)
  prefix, suffix = 'model/params/', '/.ATTRIBUTES/VARIABLE_VALUE'
  # A '/' in a checkpoint key's dict key is written '.S'.
  np.savez(out, **{k[len(prefix):-len(suffix)].replace('.S', '.'): v
                   for k, v in tensors.items() if k.startswith(prefix)})
  with open(out + '.json', 'w') as f:
    json.dump({'quality': result.quality, 'metrics': result.evals[-1][3],
               'step': result.step}, f)


if __name__ == '__main__':
  main(*sys.argv[1:])
