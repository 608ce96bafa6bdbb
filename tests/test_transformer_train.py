"""The Transformer through the runtime: BLEU computed beside training, the
MLPerf log."""

import os
import re

import pytest
import tensorflow as tf

from input_pipeline import subwords
from input_pipeline.translation import TranslationInput
from models.common import bleu
from models.transformer import task as transformer_task
from tests import helpers


def bindings(data_dir, model_dir, **overrides):
  values = {
      'DATA_DIR': repr(data_dir), 'train.train.model_dir': repr(model_dir),
      'TRAIN_STEPS': 150, 'STEPS_PER_LOOP': 50, 'EVAL_EVERY_STEPS': 50,
      'FIRST_EVAL_STEP': 100,
      # Targets have at most 48 ids: 10 steps past the source's padded
      # length are enough, and decoding time grows with that length.
      'models.transformer.task.TransformerTask.extra_decode_length': 10,
      # Beam search as MLPerf's, 2 wide instead of 4: half the decoding.
      'BEAM_SIZE': 2,
      'EVAL_BATCH_SIZE': 256, 'CHECKPOINT_EVERY_STEPS': 0,
      'TARGET_BLEU': 0.25, 'DETERMINISTIC': True,
  }
  values.update(overrides)
  return [f'{k} = {v}' for k, v in values.items()]


@pytest.mark.slow
def test_two_replica_run_reaches_bleu_and_passes_the_checker(
    translation_data, tmp_path):
  data_dir, metadata = translation_data
  model_dir = str(tmp_path / 'run')
  result = helpers.run_gin(
      ['gin/transformer_quickstart.gin', 'gin/hardware/cpu_mirrored.gin'],
      bindings(data_dir, model_dir, CPU_REPLICAS=2))
  assert result.status == 'success', result.evals
  eval_step, _, quality, metrics = result.evals[-1]
  assert metrics['examples'] == metrics['translated'] == metadata['eval_pairs']
  # BLEU ran in a host thread while training went on (the model file's
  # ASYNC_EVAL; here step 100's, 0.23, beside steps 100-150, and step
  # 150's, 0.35, after the last loop); the weights it scored were kept in
  # their checkpoint.
  assert eval_step <= result.step
  log = os.path.join(model_dir, 'mlperf.log')
  checked = helpers.run_checker(log, '0.7.0', str(tmp_path))
  assert checked.returncode == 0, checked.stdout + checked.stderr
  text = open(log).read()
  for key in (r'"submission_benchmark", "value": "transformer"',
              r'"max_sequence_length", "value": 48, "metadata": {[^}]*'
              r'"method": "discard"', r'"opt_adam_epsilon", "value": 1e-09'):
    assert re.search(key, text), key

  # The runtime's BLEU is sacrebleu's on the same translations, decoded here
  # on one device from the weights of the eval's step, pair by pair in
  # index order.
  tf.train.Checkpoint(model=result.model).read(os.path.join(
      model_dir, 'checkpoints', f'ckpt-{eval_step}')).expect_partial()
  task = transformer_task.TransformerTask(
      model=None, data=TranslationInput(data_dir=data_dir),
      extra_decode_length=10, beam_size=2)
  vocab = subwords.SubwordVocab.load(os.path.join(data_dir, 'vocab.txt'))
  dataset = task.data.eval_dataset(
      tf.distribute.InputContext(), global_batch_size=256,
      steps=task.data.eval_steps(num_pipelines=1, global_batch_size=256))
  translate = tf.function(lambda x: task.translate(result.model, x))
  texts = {}
  for batch in dataset:
    ids = translate(batch['inputs']).numpy()
    for index, row in zip(batch['index'].numpy(), ids):
      if index >= 0:
        texts[int(index)] = vocab.decode(row)
  assert quality == pytest.approx(bleu.mlperf_bleu(
      [texts[i] for i in range(len(texts))], task.data.references()),
                                  abs=1e-6)
