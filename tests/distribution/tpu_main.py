"""Resolves TPU names in a child process that the fake Cloud TPU reaches
(oauth2client reads its metadata variables when imported).

  python -m tests.distribution.tpu_main NAME [NAME ...]
Prints one JSON line per name: {"name", "workers"} or {"name", "error"}.
"""

import json
import sys

from core import startup

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
from distribution import tpu


def main(names):
  for name in names:
    try:
      resolver = tpu.resolve(name)
      out = {'name': name,
             'workers': resolver.cluster_spec().as_dict().get('worker', [])}
    except ValueError as e:
      out = {'name': name, 'error': str(e)}
    print(json.dumps(out), flush=True)


if __name__ == '__main__':
  main(sys.argv[1:])
