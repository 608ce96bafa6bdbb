"""What a process does before TensorFlow loads: one call, first thing, in
every entry point (train.py, inference/run.py, the tools, the worker
programs of the tests).

`import tensorflow` also imports all of Keras 3 when it is installed (it
is: TensorFlow's wheel requires it), and Keras imports scikit-learn: 2.5 of
the 6.5 CPU seconds an import takes on these machines
(docs/benchmarks.md, "Start-up"). This suite never uses Keras, and every
run, worker, tool and test process pays it. `import_tensorflow` imports
TensorFlow with Keras held back; Keras still loads the moment something
asks for it (`tf.keras`, `import keras`, tensorflow-text).
"""

import importlib.abc
import importlib.machinery
import sys


class _Refuse(importlib.abc.Loader):
  """Fails the load of the module it is the loader of."""

  def create_module(self, spec):
    raise ImportError(f'{spec.name} is held back while TensorFlow imports')

  def exec_module(self, module):
    del module


class _HoldBackKeras(importlib.abc.MetaPathFinder):
  """Finds Keras where it is (TensorFlow reads its location to route
  `tensorflow.keras`) but refuses to load it: TensorFlow's eager import of
  it is in a try that expects an ImportError when Keras is missing."""

  def find_spec(self, name, path=None, target=None):
    del target
    if name != 'keras':
      return None
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is not None:
      spec.loader = _Refuse()
    return spec


def import_tensorflow():
  """Imports TensorFlow without loading Keras, and returns it. A no-op when
  TensorFlow is already imported."""
  if 'tensorflow' not in sys.modules:
    finder = _HoldBackKeras()
    sys.meta_path.insert(0, finder)
    try:
      import tensorflow  # pylint: disable=import-outside-toplevel,unused-import
    finally:
      sys.meta_path.remove(finder)
  return sys.modules['tensorflow']
