"""Shared fixtures: 4 logical CPU devices and the test data, once a session.

`make test` runs the suite in two pytest-xdist worker processes; the data
fixtures below are built once for both (`built_once`), not once a worker.
"""

import json
import os
import random
import shutil

import filelock
import pytest

NUM_CPU_DEVICES = 4
# The TPU VM environment's tests run in that environment's interpreter
# (`make tpu_check` sets TPU_VENV): not part of the main suite.
collect_ignore = [] if os.environ.get('TPU_VENV') else ['tpu_env']
# glibc malloc settings (mallopt(3)): keep up to 4 GiB freed at the top of
# the heap, grow it 256 MiB at a time. The Makefile exports the same for
# `make quickstart` and friends.
MALLOC_ENV = {'MALLOC_TRIM_THRESHOLD_': str(4 << 30),
              'MALLOC_TOP_PAD_': str(256 << 20)}


def pytest_configure(config):
  del config
  # Processes started from here on (the xdist workers: this hook runs in
  # the controller before it starts them; the runs the tests start) keep
  # freed memory instead of handing it back to the kernel after every step
  # and faulting it in again (docs/benchmarks-history.md, "glibc malloc": a
  # 2-replica ResNet-10 run's system time 7.4 s -> 3.0 s).
  for name, value in MALLOC_ENV.items():
    os.environ.setdefault(name, value)
  if os.environ.get('PYTEST_XDIST_WORKER'):
    # Several workers share the cores: one thread each for an op's inner
    # loops (TensorFlow's default, a thread per core in every process,
    # oversubscribes them and spins). Processes the tests start inherit it.
    os.environ.setdefault('TF_NUM_INTRAOP_THREADS', '1')
  from core import startup
  startup.import_tensorflow()  # As every entry point: without Keras.
  from distribution import strategy
  # Must happen before TensorFlow initialises; every test process gets 4.
  strategy.split_cpu(NUM_CPU_DEVICES)


# Modules to start first. Under `--dist worksteal` each worker begins with a
# contiguous half of the test list: the longest test (the Transformer's run
# to BLEU, about 5 minutes) then runs beside the other worker's tests from
# the start instead of alone at the end. Whole modules move, so their
# module-scoped fixtures are still built once.
LONGEST_FIRST = ('test_transformer_train.py',)


def pytest_collection_modifyitems(config, items):
  del config
  items.sort(key=lambda item: item.path.name not in LONGEST_FIRST)


def built_once(tmp_path_factory, name: str, build):
  """`build(folder)` run once for the whole session, even over several
  xdist workers (they share their base temp folder's parent); returns
  (folder, what build returned, through JSON).

  The first worker builds under a file lock; the others wait for it and
  read the result. A build that fails leaves no result, so the next worker
  that needs it tries again (and fails the same way, naming the cause).
  """
  root = tmp_path_factory.getbasetemp()
  if os.environ.get('PYTEST_XDIST_WORKER'):
    root = root.parent
  folder, result = root / name, root / f'{name}.json'
  with filelock.FileLock(str(root / f'{name}.lock')):
    if not result.exists():
      shutil.rmtree(folder, ignore_errors=True)
      folder.mkdir()
      value = build(folder)
      result.write_text(json.dumps(value))
  return str(folder), json.loads(result.read_text())


@pytest.fixture(scope='session')
def quickstart_data(tmp_path_factory):
  """The quickstart digits as TFRecords (train 4 files, validation 3 files)."""
  from tools import build_quickstart_data

  def build(out):
    build_quickstart_data.build(str(out))
    shutil.rmtree(out / 'images')
  return built_once(tmp_path_factory, 'quickstart', build)[0]


@pytest.fixture(scope='session')
def five_runs(quickstart_data, tmp_path_factory):
  """Model dirs of five real quickstart runs that reach the target (for
  scoring: tools.score and the launcher's end-to-end test)."""
  from tests import helpers

  def build(root):
    return [train(str(root / f'qs_{seed}'), seed) for seed in range(5)]

  def train(model_dir, seed):
    result = helpers.run_quick(
        quickstart_data, model_dir, SEED=seed, DETERMINISTIC=False,
        TARGET_ACCURACY=0.9,
        **{'TRAIN_STEPS': 0, 'STEPS_PER_LOOP': 11, 'EVAL_EVERY_STEPS': 22,
           'GLOBAL_BATCH_SIZE': 64, 'EVAL_BATCH_SIZE': 120,
           'training.mlperf_log.Submission.division': "'closed'"})
    assert result.status == 'success'
    assert os.path.exists(os.path.join(model_dir, 'time_to_accuracy.png'))
    return model_dir
  return built_once(tmp_path_factory, 'five_runs', build)[1]


@pytest.fixture(scope='session')
def bert_data(tmp_path_factory):
  """The BERT quickstart data: vocabulary, corpora and TFRecords."""
  from tools import build_bert_quickstart_data
  return built_once(tmp_path_factory, 'bert_quickstart',
                    lambda out: build_bert_quickstart_data.build(str(out)))


NUMBERS = ('zero one two three four five six seven eight nine ten eleven '
           'twelve thirteen fourteen fifteen sixteen seventeen eighteen '
           'nineteen').split()


@pytest.fixture(scope='session')
def sums_data(tmp_path_factory):
  """A BERT corpus whose masked words are learnable: counting runs in words.

  MLPerf's 0.7.0 rules accept a BERT log only with a masked-LM accuracy of at
  least 0.712, even in the open division; a tiny model reaches that in
  seconds on this text, not on the Python documentation.
  """
  from tools import build_vocab
  from tools import create_pretraining_data

  def build(out):
    rng = random.Random(0)
    documents = []
    for _ in range(60):
      sentences = []
      for _ in range(12):
        start, length = rng.randint(0, 12), rng.randint(4, 8)
        sentences.append(' '.join(NUMBERS[start:start + length]) + ' .')
      documents.append(sentences)
    corpus = out / 'corpus.txt'
    corpus.write_text('\n\n'.join('\n'.join(d) for d in documents) + '\n')
    vocab = str(out / 'vocab.txt')
    build_vocab.write_vocab(build_vocab.build_vocab(
        input_files=[str(corpus)], vocab_size=200), vocab)
    for split, dupe, shards in (('train', 5, 2), ('eval', 1, 3)):
      create_pretraining_data.create(
          input_files=[str(corpus)], vocab_file=vocab,
          output_files=[str(out / f'{split}-{i}') for i in range(shards)],
          max_seq_length=32, max_predictions_per_seq=5, dupe_factor=dupe,
          random_seed=1 if split == 'train' else 2)
  return built_once(tmp_path_factory, 'sums', build)[0]


@pytest.fixture(scope='session')
def bert_run(sums_data, tmp_path_factory):
  """One deterministic 2-replica BERT run on the counting corpus to its
  target (0.75: at step 240 with twice sums_bindings' learning rate, at 360
  without), for the two suites that need a trained BERT:
  tests/test_bert_train.py checks the run and its MLPerf log,
  tests/inference/ exports its final checkpoint. {'model_dir', 'bindings',
  'status', 'evals'} (evals as lists: step, epoch, quality, sums)."""
  from tests import helpers

  def build(root):
    model_dir = str(root / 'run')
    bindings = helpers.sums_bindings(
        sums_data, model_dir, CPU_REPLICAS=2, DETERMINISTIC=True,
        **{'training.schedules.WarmupPolynomialDecay.base': 0.02})
    result = helpers.run_gin(
        ['gin/bert_quickstart.gin', 'gin/hardware/cpu_mirrored.gin'],
        bindings)
    return {'model_dir': model_dir, 'bindings': bindings,
            'status': result.status, 'evals': result.evals}
  return built_once(tmp_path_factory, 'bert_run', build)[1]


@pytest.fixture(scope='session')
def translation_data(tmp_path_factory):
  """The Transformer quickstart data: catalog pairs, vocabulary, TFRecords;
  1 pair in 60 held out (about 250; the quickstart's 1 in 20 makes every
  beam-search eval three times as long), 2,022 pieces instead of the
  quickstart's 5,416 (twice the training steps a second; BLEU 0.25 by step
  150 all the same)."""
  from tools import build_translation_data
  return built_once(tmp_path_factory, 'translation',
                    lambda out: build_translation_data.quickstart(
                        str(out), eval_every=60, vocab_size=2000))


@pytest.fixture(scope='session')
def gnmt_data(tmp_path_factory):
  """translation_data's pairs for GNMT: one a record, in length buckets."""
  from tools import build_translation_data
  return built_once(tmp_path_factory, 'gnmt_pairs',
                    lambda out: build_translation_data.quickstart(
                        str(out), eval_every=60, vocab_size=2000,
                        layout='pairs'))


@pytest.fixture(scope='session')
def ssd_data(tmp_path_factory):
  """A small SSD set (tools.build_ssd_quickstart_data through
  tools.convert_coco): 40 training canvases, the eval canvases of 40
  held-out digits, 8 of the training canvases as INT8 calibration."""
  from tools import build_ssd_quickstart_data

  def build(out):
    build_ssd_quickstart_data.build(str(out), train_canvases=40,
                                    eval_digits=40, calibration_canvases=8)
  return built_once(tmp_path_factory, 'ssd_data', build)[0]


@pytest.fixture(scope='session')
def tiny_maskrcnn_data(tmp_path_factory):
  """Three random images with two or three masked objects each, in COCO's
  format through tools.convert_coco (tests/input_pipeline/
  test_maskrcnn_input.py's), as Mask R-CNN records with categories.json."""
  from tests.input_pipeline import test_maskrcnn_input as records

  def build(out):
    return records.build(out)[0]
  return built_once(tmp_path_factory, 'tiny_maskrcnn', build)[1]


@pytest.fixture(scope='session')
def dlrm_data(tmp_path_factory):
  """The DLRM quickstart's records (MovieLens-100k from the recbole
  wheel, tools.build_dlrm_quickstart_data): 65,570 training and 7,285 eval
  impressions, about 8 s to build."""
  from tools import build_dlrm_quickstart_data

  def build(out):
    return build_dlrm_quickstart_data.build(
        str(out), build_dlrm_quickstart_data.movielens_source())
  return built_once(tmp_path_factory, 'dlrm_data', build)[0]
