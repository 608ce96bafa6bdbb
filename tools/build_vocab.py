"""Learns a BERT WordPiece vocabulary from a text corpus (tensorflow-text).

  python -m tools.build_vocab --input_file=corpus.txt --vocab_file=vocab.txt \
      --vocab_size=8000

The corpus format is create_pretraining_data's: one sentence per line, blank
lines between documents. Lower-cased, as BERT uncased. The special tokens come
first: [PAD] [UNK] [CLS] [SEP] [MASK].
"""

from absl import app
from absl import flags

from core import entry_point

from core import startup


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_multi_string('input_file', None, 'Corpus files.')
  flags.DEFINE_string('vocab_file', None, 'Output vocabulary, a token a line.')
  flags.DEFINE_integer('vocab_size', 8000, 'Target vocabulary size.')
  flags.mark_flags_as_required(['input_file', 'vocab_file'])


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from core import staged_files

RESERVED_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')


def build_vocab(*, input_files: list[str], vocab_size: int) -> list[str]:
  """WordPiece vocabulary of about `vocab_size` tokens learnt from the files."""
  from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset
  lines = tf.data.TextLineDataset(input_files).filter(
      lambda line: tf.strings.length(tf.strings.strip(line)) > 0)
  return bert_vocab_from_dataset.bert_vocab_from_dataset(
      lines.batch(1000).prefetch(2), vocab_size=vocab_size,
      reserved_tokens=list(RESERVED_TOKENS),
      bert_tokenizer_params={'lower_case': True}, learn_params={})


def write_vocab(vocab: list[str], path: str) -> None:
  staged_files.write_text(path, '\n'.join(vocab) + '\n')


def main(argv):
  del argv
  vocab = build_vocab(input_files=FLAGS.input_file, vocab_size=FLAGS.vocab_size)
  write_vocab(vocab, FLAGS.vocab_file)
  print(f'{len(vocab)} tokens written to {FLAGS.vocab_file}')


if __name__ == '__main__':
  FLAGS = flags.FLAGS
  app.run(entry_point.tool_main(main))
