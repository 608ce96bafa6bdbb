"""Shared fixtures: 4 logical CPU devices and the test data, once a session."""

import os
import random
import shutil

import pytest

NUM_CPU_DEVICES = 4


def pytest_configure(config):
  del config
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  from distribution import strategy
  # Must happen before TensorFlow initialises; every test process gets 4.
  strategy.split_cpu(NUM_CPU_DEVICES)


@pytest.fixture(scope='session')
def quickstart_data(tmp_path_factory):
  """The quickstart digits as TFRecords (train 4 files, validation 3 files)."""
  from tools import build_quickstart_data
  out = tmp_path_factory.mktemp('quickstart')
  build_quickstart_data.build(str(out))
  shutil.rmtree(out / 'images')
  return str(out)


@pytest.fixture(scope='session')
def five_runs(quickstart_data, tmp_path_factory):
  """Model dirs of five real quickstart runs that reach the target (for
  scoring: tools.score and the launcher's end-to-end test)."""
  from tests import helpers
  root = tmp_path_factory.mktemp('runs')
  dirs = []
  for seed in range(5):
    model_dir = str(root / f'qs_{seed}')
    result = helpers.run_quick(
        quickstart_data, model_dir, SEED=seed, DETERMINISTIC=False,
        TARGET_ACCURACY=0.9,
        **{'TRAIN_STEPS': 0, 'STEPS_PER_LOOP': 11, 'EVAL_EVERY_STEPS': 22,
           'GLOBAL_BATCH_SIZE': 64, 'EVAL_BATCH_SIZE': 120,
           'training.mlperf_log.Submission.division': "'closed'"})
    assert result.status == 'success'
    assert os.path.exists(os.path.join(model_dir, 'time_to_accuracy.png'))
    dirs.append(model_dir)
  return dirs


@pytest.fixture(scope='session')
def bert_data(tmp_path_factory):
  """The BERT quickstart data: vocabulary, corpora and TFRecords."""
  from tools import build_bert_quickstart_data
  out = tmp_path_factory.mktemp('bert_quickstart')
  counts = build_bert_quickstart_data.build(str(out))
  return str(out), counts


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
  out = tmp_path_factory.mktemp('sums')
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
  return str(out)


@pytest.fixture(scope='session')
def translation_data(tmp_path_factory):
  """The Transformer quickstart data: catalog pairs, vocabulary, TFRecords."""
  from tools import build_translation_data
  out = tmp_path_factory.mktemp('translation')
  metadata = build_translation_data.quickstart(str(out))
  return str(out), metadata


@pytest.fixture(scope='session')
def ssd_data(tmp_path_factory):
  """A small SSD set (tools.build_ssd_quickstart_data through
  tools.convert_coco): 40 training canvases, the eval canvases of 40
  held-out digits."""
  from tools import build_ssd_quickstart_data
  out = tmp_path_factory.mktemp('ssd_data')
  build_ssd_quickstart_data.build(str(out), train_canvases=40, eval_digits=40)
  return str(out)
