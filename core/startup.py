"""What a process does before TensorFlow loads: one call, first thing, in
every entry point (train.py, inference/run.py, the tools, the worker
programs of the tests).

`import tensorflow` also imports all of Keras 3 when it is installed (it
is: TensorFlow's wheel requires it), and Keras imports scikit-learn: 2.5 of
the 6.5 CPU seconds an import takes on these machines
(docs/benchmarks-history.md, "Start-up"). This suite never uses Keras, and every
run, worker, tool and test process pays it. `import_tensorflow` imports
TensorFlow with Keras held back; Keras still loads the moment something
asks for it (`tf.keras`, `import keras`, tensorflow-text).

It also keeps TensorFlow's native start-up noise off the terminal: the
C++ INFO and WARNING lines (oneDNN, "Could not find cuda drivers",
cpu_feature_guard, absl's pre-init banner) and the error-level
`failed call to cuInit` of a machine without a GPU, printed while
TensorFlow loads and finds its devices, and every later native INFO or
WARNING line (TF_CPP_MIN_LOG_LEVEL=2, e.g. "TFRecordDataset `buffer_size` is
unspecified") and the Python INFO lines of TensorFlow's files (e.g.
"Sharding callback duration" at every save). Native errors
after start-up, and every warning and error of ours, still print.
`--verbose` on the command line, MLPERF_VERBOSE=1 or TF_CPP_MIN_LOG_LEVEL=0
brings all of these lines back (another TF_CPP_MIN_LOG_LEVEL of the user's
is kept; the start-up noise still goes).

On a TPU VM it sets, before TensorFlow loads, the PJRT variables Google's
own TensorFlow TPU tests set for a process that drives its VM's TPU
(`tpu_environment`), so train.py, the tools, the job runner's runs and the
notebook all use the TPU the same way.
"""

import contextlib
import glob
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import re
import sys
import tempfile

from core import storage

VERBOSE_VARIABLE = 'MLPERF_VERBOSE'
# A TPU VM's device files (as distribution/tpu.py DEVICE_FILES).
TPU_DEVICE_FILES = ('/dev/accel*', '/dev/vfio/[0-9]*')
# The native lines of TensorFlow's start-up that carry nothing for a user:
# absl's banner, INFO/WARNING lines in absl's format (I1203 07:24:24.5 123
# file.cc:12] ...) and the CPU feature note's continuation, and the CUDA
# probe's errors on a machine without a GPU.
_START_UP_NOISE = re.compile(
    r'(WARNING: All log messages before absl::InitializeLog\(\)'
    r'|[IW]\d{4} [\d:.]+ +\d+ \S+:\d+\] '
    r'|E\d{4} [\d:.]+ +\d+ cuda_\w+\.cc:\d+\] '
    r'|To enable the following instructions: )')


_TENSORFLOW_FILES = f'{os.sep}tensorflow{os.sep}'


def _drop_tensorflow_info(record: logging.LogRecord) -> bool:
  """False for an INFO (or DEBUG) record logged from TensorFlow's files."""
  return (record.levelno >= logging.WARNING or
          _TENSORFLOW_FILES not in record.pathname)


def verbose(argv=None, environ=None) -> bool:
  """Whether the user asked for TensorFlow's native log lines."""
  argv = sys.argv if argv is None else argv
  environ = os.environ if environ is None else environ
  if environ.get(VERBOSE_VARIABLE, '').lower() in ('1', 'true', 'yes'):
    return True
  return any(a in ('--verbose', '--verbose=true', '--verbose=1')
             for a in argv[1:])


def start_up_noise(line: str) -> bool:
  """Whether a native stderr line of TensorFlow's start-up is noise."""
  return bool(_START_UP_NOISE.match(line))


@contextlib.contextmanager
def _native_stderr_filtered():
  """Runs the body with file descriptor 2 in a file, then writes what the
  body printed to stderr except the start-up noise (an exception's
  traceback included)."""
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError):  # No usable stderr: nothing to filter.
    yield
    return
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      try:
        sys.stderr.flush()
      except ValueError:
        pass
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      kept = [line for line in
              captured.read().decode('utf-8', 'replace').splitlines(True)
              if not start_up_noise(line)]
      if kept:
        sys.stderr.write(''.join(kept))
        sys.stderr.flush()


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


# What Google's own TensorFlow TPU tests export for a run that drives its
# VM's own TPU through PJRT (GoogleCloudPlatform/ml-auto-solutions
# dags/solutions_team/configs/tensorflow/common.py, export_env_variables,
# @ 7eda193, read 2026-12-04; the same on every generation their release DAG
# runs: v2, v3, v4, v5e, v5p, v6e): the TPU as a pluggable device through
# its C API, from the libtpu that pip installed beside TensorFlow. Worker 0
# of a multi-host slice, which drives the slice by name, sets
# TPU_LOAD_LIBRARY=0 instead (theirs: `if is_pod`), and gets neither.
PJRT_VARIABLES = ('NEXT_PLUGGABLE_DEVICE_USE_C_API',
                  'TF_PLUGGABLE_DEVICE_LIBRARY_PATH')


def libtpu_path() -> str | None:
  """libtpu.so of the installed `libtpu` package, found without importing
  it (its import sets TPU_LIBRARY_PATH), or None."""
  spec = importlib.util.find_spec('libtpu')
  if spec is None or not spec.submodule_search_locations:
    return None
  path = os.path.join(list(spec.submodule_search_locations)[0], 'libtpu.so')
  return path if os.path.exists(path) else None


def tpu_environment(environ=None, devices=TPU_DEVICE_FILES) -> dict:
  """The PJRT variables a process on a TPU VM sets before TensorFlow loads
  (none already set is replaced): {} off a TPU VM, with
  TPU_LOAD_LIBRARY=0, or without a pip libtpu."""
  environ = os.environ if environ is None else environ
  if environ.get('TPU_LOAD_LIBRARY') == '0' or not any(
      glob.glob(p) for p in devices):
    return {}
  library = libtpu_path()
  if not library:
    return {}
  wanted = dict(zip(PJRT_VARIABLES, ('true', library)))
  return {k: v for k, v in wanted.items() if k not in environ}


def import_tensorflow():
  """Imports TensorFlow without loading Keras and without its start-up
  noise, and returns it. A no-op when TensorFlow is already imported."""
  if 'tensorflow' in sys.modules:
    return sys.modules['tensorflow']
  os.environ.update(tpu_environment())  # On a TPU VM only.
  # TensorFlow's GCS client reads its retry settings once, as it loads.
  storage.StorageOptions().apply()
  quiet = not verbose() and os.environ.get('TF_CPP_MIN_LOG_LEVEL') != '0'
  if quiet:
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  finder = _HoldBackKeras()
  sys.meta_path.insert(0, finder)
  try:
    with (_native_stderr_filtered() if quiet else contextlib.nullcontext()):
      import tensorflow  # pylint: disable=import-outside-toplevel
      # The device probe (cuInit) prints its error here, not at import. Not
      # on a TPU VM: there the first listing starts the TPU runtime, which
      # the strategy does when it is ready (and TPU builds probe no CUDA).
      if not any(glob.glob(p) for p in TPU_DEVICE_FILES):
        tensorflow.config.list_physical_devices()
  finally:
    sys.meta_path.remove(finder)
  if quiet:
    # TensorFlow's own Python INFO lines ("Sharding callback duration" at
    # every checkpoint save) go through absl's logger and its own; a filter
    # (which absl's --verbosity does not reset) drops those of its files.
    for name in ('absl', 'tensorflow'):
      logging.getLogger(name).addFilter(_drop_tensorflow_info)
  return tensorflow
