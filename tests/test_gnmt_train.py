"""GNMT through the runtime: two replicas on bucketed pairs, beam-search
BLEU in the loop, an MLPerf log the 0.7.0 checker passes for `gnmt`."""

import os
import random
import re

import pytest

from tests import helpers

ENGLISH = ('one two three four five six seven eight nine ten red green blue '
           'black white').split()
GERMAN = ('eins zwei drei vier fünf sechs sieben acht neun zehn rot grün '
          'blau schwarz weiß').split()


@pytest.fixture(scope='module')
def word_pairs(tmp_path_factory):
  """Sequences of 1 to 20 English words and their German word for word:
  real German a small GNMT learns in a few hundred steps, in the three
  length buckets of a 30-id limit (18, 24, 30: each bucket is a branch of
  every compiled step, and compiling is most of this test's time; 48's six
  took it from 70 s to 120 s alone)."""
  from tools import build_translation_data
  rng = random.Random(0)
  pairs = []
  for _ in range(3000):
    words = [rng.randrange(len(ENGLISH)) for _ in range(rng.randint(1, 20))]
    pairs.append((' '.join(ENGLISH[w] for w in words),
                  ' '.join(GERMAN[w] for w in words)))
  out = str(tmp_path_factory.mktemp('word_pairs'))
  metadata = build_translation_data.build(
      output_dir=out, train_pairs=pairs[100:], eval_pairs=pairs[:100],
      vocab_size=100, max_length=30, train_shards=2, layout='pairs')
  return out, metadata


@pytest.mark.slow
def test_two_replicas_train_evaluate_and_log_for_the_checker(word_pairs,
                                                             tmp_path):
  # Reaching MLPerf's 0.24 takes GNMT thousands of steps even here (the
  # quickstart: 0.26 at step 2000), so this run stops at its step budget;
  # the checker must pass every rule but the quality one, which the
  # quickstart's log passes (docs/gnmt.md).
  data_dir, metadata = word_pairs
  assert sum(1 for _, n in metadata['buckets'] if n) >= 3
  model_dir = str(tmp_path / 'run')
  result = helpers.run_gin(
      ['gin/gnmt_quickstart.gin', 'gin/hardware/cpu_mirrored.gin'],
      [f'DATA_DIR = {data_dir!r}', f'train.train.model_dir = {model_dir!r}',
       'CPU_REPLICAS = 2', 'UNITS = 32', 'GLOBAL_BATCH_SIZE = 16',
       'TRAIN_STEPS = 100', 'STEPS_PER_LOOP = 50', 'EVAL_EVERY_STEPS = 100',
       'BEAM_SIZE = 2', 'MAX_DECODE_LENGTH = 30', 'DECAY_START_STEP = 1000',
       'CHECKPOINT_EVERY_STEPS = 0', 'DETERMINISTIC = True'])
  assert result.status == 'aborted' and result.step == 100
  assert result.evals[-1][0] == 100
  assert result.evals[-1][3]['translated'] == metadata['eval_pairs']
  log = os.path.join(model_dir, 'mlperf.log')
  checked = helpers.run_checker(log, '0.7.0', str(tmp_path))
  output = checked.stdout + checked.stderr
  failures = [line for line in output.splitlines() if 'ERROR' in line]
  assert failures and all('eval_accuracy' in f or 'ATLEAST_ONE' in f or
                          'FAILED' in f for f in failures), output
  text = open(log).read()
  for key in (r'"submission_benchmark", "value": "gnmt"',
              r'"opt_learning_rate_alt_warmup_func", "value": "t2t"',
              r'"opt_learning_rate_alt_decay_func", "value": "True"',
              r'"opt_learning_rate_remain_steps", "value": 1000',
              r'"max_sequence_length", "value": 30, "metadata": {[^}]*'
              r'"method": "discard"',
              r'"key": "eval_accuracy", "value": [0-9.e-]+, "metadata": '
              r'{[^}]*"epoch_num": '):
    assert re.search(key, text), key
