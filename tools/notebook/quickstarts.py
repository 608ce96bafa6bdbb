"""What each model's quickstart needs, as the notebooks run it: its gin
file, its requirements files, its data and how to build it, and which
steps after training apply (the compliance checker, the LoadGen, INT8).

The Makefile's `<model>_quickstart` targets say the same for a shell; this
table is the notebooks' (notebooks/quickstart.ipynb and the one a model
written from it by tools/write_notebooks.py). Standard library only at
import: the notebook's set-up cell reads it before anything is installed.
"""

import dataclasses
import importlib
import importlib.util
import os
import subprocess
import sys


@dataclasses.dataclass(frozen=True)
class Quickstart:
  """One model's quickstart.

  Attributes:
    name: the notebooks' MODEL value.
    title: the model's name for people.
    gin_file: the experiment file (its DATA_DIR is `data_dir`).
    requirements: the requirements files beyond requirements.txt.
    data_dir: the folder the Makefile builds its data in; '' for none
      (MiniGo plays its own games).
    marker: the file its builder writes last: present, the data is whole.
    builder: 'module:function' called with the folder, then `builder_args`.
    builder_args: keyword arguments of the builder.
    data_files: (macro, file name) pairs: macros bound to a file inside
      the data folder ((('VOCAB_FILE', 'vocab.txt'),)).
    modules: modules it imports that the core install leaves out (their
      requirements files: core/extras.py).
    training_benchmark: MLPerf Training v0.7 has it (the compliance
      checker applies to its log).
    serves: MLPerf Inference has it (the LoadGen step applies).
    calibration: the held-out folder INT8 calibrates on, inside the data
      folder; '' for no INT8 step.
    small_slice: the gin file of a small TPU slice, if the model has one
      (real data, a multi-host slice: tools.launch, not a notebook).
  """
  name: str
  title: str
  gin_file: str
  requirements: tuple[str, ...]
  data_dir: str
  marker: str = ''
  builder: str = ''
  builder_args: tuple[tuple[str, object], ...] = ()
  data_files: tuple[tuple[str, str], ...] = ()
  modules: tuple[str, ...] = ()
  training_benchmark: bool = True
  serves: bool = True
  calibration: str = ''
  small_slice: str = ''


INFERENCE = 'requirements-inference.txt'
QUICKSTARTS = {q.name: q for q in (
    Quickstart(
        'resnet', 'ResNet-50 v1.5', 'gin/resnet_quickstart.gin',
        (INFERENCE,), 'data/quickstart',
        'calibration/validation-00000-of-00001',
        'tools.build_quickstart_data:build', modules=('mlperf_loadgen',),
        small_slice='gin/resnet50_v3_32.gin'),
    Quickstart(
        'bert', 'BERT', 'gin/bert_quickstart.gin',
        ('requirements-bert.txt', INFERENCE), 'data/bert_quickstart',
        'vocab.txt', 'tools.build_bert_quickstart_data:build',
        data_files=(('VOCAB_FILE', 'vocab.txt'),),
        modules=('tensorflow_text', 'mlperf_loadgen'),
        small_slice='gin/bert_v3_32.gin'),
    Quickstart(
        'transformer', 'Transformer', 'gin/transformer_quickstart.gin',
        ('requirements-transformer.txt', INFERENCE),
        'data/transformer_quickstart', 'metadata.json',
        'tools.build_translation_data:quickstart',
        modules=('tensorflow_text', 'sacrebleu', 'mlperf_loadgen'),
        small_slice='gin/transformer_v3_32.gin'),
    Quickstart(
        'gnmt', 'GNMT', 'gin/gnmt_quickstart.gin',
        ('requirements-transformer.txt', INFERENCE), 'data/gnmt_quickstart',
        'metadata.json', 'tools.build_translation_data:quickstart',
        (('layout', 'pairs'),),
        modules=('tensorflow_text', 'sacrebleu', 'mlperf_loadgen'),
        small_slice='gin/gnmt_v4_16.gin'),
    Quickstart(
        'ssd', 'SSD300-ResNet34', 'gin/ssd_quickstart.gin',
        ('requirements-ssd.txt', INFERENCE), 'data/ssd_quickstart',
        'calibration/categories.json', 'tools.build_ssd_quickstart_data:build',
        (('calibration_canvases', 100),),
        modules=('pycocotools', 'mlperf_loadgen'),
        small_slice='gin/ssd_v4_16.gin'),
    Quickstart(
        'maskrcnn', 'Mask R-CNN', 'gin/maskrcnn_quickstart.gin',
        ('requirements-ssd.txt',), 'data/maskrcnn_quickstart',
        'categories.json', 'tools.build_ssd_quickstart_data:build',
        (('include_masks', True), ('calibration_canvases', 0)),
        modules=('pycocotools',), serves=False,
        small_slice='gin/maskrcnn_v4_16.gin'),
    Quickstart(
        'dlrm', 'DLRM', 'gin/dlrm_quickstart.gin',
        ('requirements-dlrm.txt', INFERENCE), 'data/dlrm_quickstart',
        'metadata.json', 'tools.build_dlrm_quickstart_data:build',
        modules=('mlperf_loadgen',)),
    Quickstart(
        'minigo', 'MiniGo', 'gin/minigo_quickstart.gin',
        ('requirements-minigo.txt',), '', modules=('pyspiel',),
        serves=False),
    Quickstart(
        'mobilenet', 'MobileNet-v1 (Inference v0.5)',
        'gin/mobilenet_quickstart.gin', (INFERENCE,), 'data/quickstart',
        'calibration/validation-00000-of-00001',
        'tools.build_quickstart_data:build',
        modules=('mlperf_loadgen', 'ai_edge_litert'),
        training_benchmark=False, calibration='calibration'),
    Quickstart(
        'ssd_mobilenet', 'SSD-MobileNet-v1 (Inference v0.5)',
        'gin/ssd_mobilenet_quickstart.gin', ('requirements-ssd.txt', INFERENCE),
        'data/ssd_quickstart', 'calibration/categories.json',
        'tools.build_ssd_quickstart_data:build', (('calibration_canvases', 100),),
        modules=('pycocotools', 'mlperf_loadgen', 'ai_edge_litert'),
        training_benchmark=False, calibration='calibration'),
)}


def get(name: str) -> Quickstart:
  """The quickstart called `name`.

  Raises:
    ValueError: one line listing the names.
  """
  if name not in QUICKSTARTS:
    raise ValueError(f'MODEL = {name!r} is not a quickstart: set it to one '
                     f'of {", ".join(QUICKSTARTS)} in the parameters cell.')
  return QUICKSTARTS[name]


def install_commands(quickstart: Quickstart, *, tpu: bool,
                     cloud: bool) -> list[list[str]]:
  """The commands that install what `quickstart` needs into this Python:
  on a TPU VM the suite's TPU environment (tools/tpu_venv.py: every model's
  packages); elsewhere requirements.txt and the model's own files. DLRM's
  wheel is downloaded, never installed (the Makefile's dlrm target)."""
  python = sys.executable
  if tpu:
    return [[python, 'tools/tpu_venv.py', f'--python={python}']]
  files = ['requirements.txt']
  files += [f for f in quickstart.requirements
            if f != 'requirements-dlrm.txt']
  files += ['requirements-cloud.txt'] if cloud else []
  commands = [[python, '-m', 'pip', 'install', '-q'] +
              [a for f in files for a in ('-r', f)]]
  if 'requirements-dlrm.txt' in quickstart.requirements:
    commands.append([python, '-m', 'pip', 'download', '-q', '--no-deps',
                     '-d', os.path.join(sys.prefix, 'wheels'),
                     '-r', 'requirements-dlrm.txt'])
  return commands


def install(quickstart: Quickstart, *, tpu: bool, cloud: bool) -> None:
  """Runs install_commands (pip's own output shows in the cell)."""
  for command in install_commands(quickstart, tpu=tpu, cloud=cloud):
    subprocess.run(command, check=True)


def check_packages(quickstart: Quickstart) -> None:
  """Raises ImportError for the first module of `quickstart` this Python
  lacks (core/extras.py turns it into the line naming the file)."""
  for module in quickstart.modules:
    if importlib.util.find_spec(module) is None:
      raise ModuleNotFoundError(f"No module named '{module}'", name=module)


def data_folder(quickstart: Quickstart, data_dir: str) -> tuple[str, bool]:
  """(the data folder to train on, whether it must be built first).

  Raises:
    FileNotFoundError: a given folder that does not exist or lacks the
      quickstart's data.
  """
  if not quickstart.data_dir:
    return '', False
  if not data_dir:
    folder = quickstart.data_dir
    return folder, not os.path.exists(os.path.join(folder, quickstart.marker))
  if '://' not in data_dir and not os.path.isdir(data_dir):
    raise FileNotFoundError(
        f"DATA_DIR = {data_dir!r}: no such folder. Leave DATA_DIR = '' to "
        f'build the {quickstart.title} quickstart data in '
        f'{quickstart.data_dir}, or give the folder that holds it.')
  if '://' not in data_dir and not os.path.exists(
      os.path.join(data_dir, quickstart.marker)):
    raise FileNotFoundError(
        f'DATA_DIR = {data_dir!r} has no {quickstart.marker}: it is not '
        f"{quickstart.title}'s quickstart data (or was left half-built). "
        f"Leave DATA_DIR = '' to build it in {quickstart.data_dir}.")
  return data_dir, False


def build_data(quickstart: Quickstart, folder: str) -> None:
  """Builds the quickstart's data into `folder` with its builder."""
  module, function = quickstart.builder.split(':')
  getattr(importlib.import_module(module), function)(
      folder, **dict(quickstart.builder_args))


def data_bindings(quickstart: Quickstart, folder: str) -> list[str]:
  """The gin bindings that point a run at `folder`."""
  if not quickstart.data_dir:
    return []
  return [f'DATA_DIR = {folder!r}'] + [
      f'{macro} = {os.path.join(folder, name)!r}'
      for macro, name in quickstart.data_files]
