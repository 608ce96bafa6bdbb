"""Turns raw text into MLPerf BERT pretraining TFRecords (masked LM + NSP).

  python -m tools.create_pretraining_data --input_file=corpus.txt \
      --vocab_file=vocab.txt --output_file=out/part-0,out/part-1 \
      --max_seq_length=512 --max_predictions_per_seq=76 --dupe_factor=10 \
      --random_seed=12345

Input, as the reference uses it: one sentence per line, a blank line between
documents. The algorithm is google-research/bert's: segments of whole
sentences fill a target length (10% of instances get a shorter random one),
sentence B is the true continuation or, half the time, text from another
document (next_sentence_labels 1 = random); 15% of the tokens (at most
max_predictions_per_seq) are predicted, each replaced by [MASK] 80% of the
time, a random vocabulary token 10% and kept 10%. Tokens are WordPiece ids
from tensorflow-text's BertTokenizer (lower-cased). One seeded RNG drives
everything: the same inputs and seed give byte-identical files.

Features (exactly MLPerf BERT's): input_ids, input_mask, segment_ids (int64 x
max_seq_length), masked_lm_positions, masked_lm_ids (int64 x
max_predictions_per_seq), masked_lm_weights (float x max_predictions_per_seq),
next_sentence_labels (int64 x 1).

Handling of awkward text: empty documents are dropped; a sentence longer than
the sequence is cut (from the front or back at random, as the reference
does); bytes that are not UTF-8 are replaced by U+FFFD and each affected line
is reported with its file and line number.
"""

import dataclasses
import random
import time

from absl import app
from absl import flags
from absl import logging

from core import entry_point

from core import startup


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_multi_string('input_file', None, 'Text files.')
  flags.DEFINE_string('vocab_file', None, 'WordPiece vocabulary.')
  flags.DEFINE_string('output_file', None, 'Comma-separated output files.')
  flags.DEFINE_integer('max_seq_length', 128, 'Tokens an instance.')
  flags.DEFINE_integer('max_predictions_per_seq', 20, 'Masked LM slots.')
  flags.DEFINE_float('masked_lm_prob', 0.15, 'Fraction of tokens masked.')
  flags.DEFINE_float('short_seq_prob', 0.1, 'Share of shorter instances.')
  flags.DEFINE_integer('dupe_factor', 10, 'Passes over the data.')
  flags.DEFINE_integer('random_seed', 12345, 'Seed of all randomness.')
  flags.mark_flags_as_required(['input_file', 'vocab_file', 'output_file'])


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from core import staged_files

REQUIRED_TOKENS = ('[CLS]', '[SEP]', '[MASK]', '[UNK]')


@dataclasses.dataclass
class Instance:
  tokens: list[int]
  segment_ids: list[int]
  masked_lm_positions: list[int]
  masked_lm_labels: list[int]
  is_random_next: bool


def load_vocab(path: str) -> list[str]:
  """Vocabulary tokens in id order.

  Raises:
    ValueError: naming the file and the special tokens it lacks.
  """
  with tf.io.gfile.GFile(path) as f:
    vocab = [line.rstrip('\n') for line in f]
  missing = [t for t in REQUIRED_TOKENS if t not in vocab]
  if missing:
    raise ValueError(f'Vocabulary {path} lacks {missing}: BERT needs '
                     f'{list(REQUIRED_TOKENS)}. Build one with '
                     'tools/build_vocab.py.')
  return vocab


def read_documents(input_files: list[str], vocab_file: str):
  """Documents as lists of sentences, each a list of WordPiece ids.

  Returns:
    (documents, number of sentences read).
  """
  import tensorflow_text as text  # Registers the tokenizer ops.
  raw_docs = [[]]
  for path in input_files:
    with tf.io.gfile.GFile(path, 'rb') as f:
      data = f.read()
    for number, raw in enumerate(data.split(b'\n'), start=1):
      try:
        line = raw.decode('utf-8')
      except UnicodeDecodeError:
        line = raw.decode('utf-8', errors='replace')
        logging.warning('%s line %d is not valid UTF-8; bad bytes replaced '
                        'by U+FFFD.', path, number)
      line = line.strip()
      if line:
        raw_docs[-1].append(line)
      elif raw_docs[-1]:
        raw_docs.append([])
    if raw_docs[-1]:
      raw_docs.append([])  # A file ends its last document.
  raw_docs = [d for d in raw_docs if d]
  sentences = [s for d in raw_docs for s in d]
  tokenizer = text.BertTokenizer(vocab_file, lower_case=True,
                                 token_out_type=tf.int64)
  ids = []
  for start in range(0, len(sentences), 4096):
    batch = tokenizer.tokenize(sentences[start:start + 4096]).merge_dims(1, 2)
    ids.extend(batch.to_list())
  documents, i = [], 0
  for d in raw_docs:
    doc = [s for s in ids[i:i + len(d)] if s]
    i += len(d)
    if doc:
      documents.append(doc)
  return documents, len(sentences)


def truncate_pair(a: list[int], b: list[int], max_tokens: int,
                  rng: random.Random) -> None:
  """Cuts the longer of a and b, at a random end, until they fit."""
  while len(a) + len(b) > max_tokens:
    longer = a if len(a) > len(b) else b
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def mask_tokens(tokens: list[int], *, special: set[int], mask_id: int,
                vocab_size: int, masked_lm_prob: float,
                max_predictions: int, rng: random.Random):
  """The 80/10/10 masked-LM corruption. Returns (tokens, positions, labels)."""
  candidates = [i for i, t in enumerate(tokens) if t not in special]
  rng.shuffle(candidates)
  count = min(max_predictions, max(1, int(round(len(tokens) *
                                                masked_lm_prob))))
  output = list(tokens)
  chosen = sorted(candidates[:count])
  for i in candidates[:count]:
    if rng.random() < 0.8:
      output[i] = mask_id
    elif rng.random() < 0.5:
      pass  # Keep the original token.
    else:
      output[i] = rng.randint(0, vocab_size - 1)
  return output, chosen, [tokens[i] for i in chosen]


def instances_from_document(documents, index: int, *, max_seq_length: int,
                            short_seq_prob: float, rng: random.Random,
                            ids: dict, vocab_size: int, masked_lm_prob: float,
                            max_predictions: int) -> list[Instance]:
  """NSP pairs from one document (google-research/bert's procedure)."""
  document = documents[index]
  max_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP].
  target = max_tokens
  if rng.random() < short_seq_prob:
    target = rng.randint(2, max_tokens)
  instances, chunk, length, i = [], [], 0, 0
  special = {ids['[CLS]'], ids['[SEP]']}
  while i < len(document):
    chunk.append(document[i])
    length += len(document[i])
    if i == len(document) - 1 or length >= target:
      a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
      tokens_a = [t for s in chunk[:a_end] for t in s]
      tokens_b = []
      if len(chunk) == 1 or rng.random() < 0.5:
        is_random_next = True
        for _ in range(10):
          other = rng.randint(0, len(documents) - 1)
          if other != index:
            break
        random_doc = documents[other]
        for sentence in random_doc[rng.randint(0, len(random_doc) - 1):]:
          tokens_b.extend(sentence)
          if len(tokens_b) >= target - len(tokens_a):
            break
        i -= len(chunk) - a_end  # Unused sentences start the next chunk.
      else:
        is_random_next = False
        tokens_b = [t for s in chunk[a_end:] for t in s]
      truncate_pair(tokens_a, tokens_b, max_tokens, rng)
      if tokens_a and tokens_b:
        tokens = ([ids['[CLS]']] + tokens_a + [ids['[SEP]']] + tokens_b +
                  [ids['[SEP]']])
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        tokens, positions, labels = mask_tokens(
            tokens, special=special, mask_id=ids['[MASK]'],
            vocab_size=vocab_size, masked_lm_prob=masked_lm_prob,
            max_predictions=max_predictions, rng=rng)
        instances.append(Instance(tokens, segment_ids, positions, labels,
                                  is_random_next))
      chunk, length = [], 0
    i += 1
  return instances


def to_example(instance: Instance, max_seq_length: int,
               max_predictions: int) -> tf.train.Example:
  pad = max_seq_length - len(instance.tokens)
  pad_lm = max_predictions - len(instance.masked_lm_positions)

  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  return tf.train.Example(features=tf.train.Features(feature={
      'input_ids': ints(instance.tokens + [0] * pad),
      'input_mask': ints([1] * len(instance.tokens) + [0] * pad),
      'segment_ids': ints(instance.segment_ids + [0] * pad),
      'masked_lm_positions': ints(instance.masked_lm_positions + [0] * pad_lm),
      'masked_lm_ids': ints(instance.masked_lm_labels + [0] * pad_lm),
      'masked_lm_weights': tf.train.Feature(float_list=tf.train.FloatList(
          value=[1.0] * len(instance.masked_lm_labels) + [0.0] * pad_lm)),
      'next_sentence_labels': ints([int(instance.is_random_next)]),
  }))


def create(*, input_files: list[str], vocab_file: str,
           output_files: list[str], max_seq_length: int = 128,
           max_predictions_per_seq: int = 20, masked_lm_prob: float = 0.15,
           short_seq_prob: float = 0.1, dupe_factor: int = 10,
           random_seed: int = 12345) -> dict:
  """Writes the TFRecords; returns counts (documents, sentences, instances)."""
  vocab = load_vocab(vocab_file)
  ids = {t: vocab.index(t) for t in REQUIRED_TOKENS}
  documents, num_sentences = read_documents(input_files, vocab_file)
  if not documents:
    raise ValueError(f'No text in {input_files}: expected one sentence a '
                     'line, blank lines between documents.')
  rng = random.Random(random_seed)
  rng.shuffle(documents)
  instances = []
  for _ in range(dupe_factor):
    for index in range(len(documents)):
      instances.extend(instances_from_document(
          documents, index, max_seq_length=max_seq_length,
          short_seq_prob=short_seq_prob, rng=rng, ids=ids,
          vocab_size=len(vocab), masked_lm_prob=masked_lm_prob,
          max_predictions=max_predictions_per_seq))
  rng.shuffle(instances)
  # Under temporary names until every file is complete.
  with staged_files.staged(output_files) as temporaries:
    writers = [tf.io.TFRecordWriter(p) for p in temporaries]
    try:
      for i, instance in enumerate(instances):
        writers[i % len(writers)].write(to_example(
            instance, max_seq_length, max_predictions_per_seq
        ).SerializeToString())
    finally:
      for w in writers:
        w.close()
  return {'documents': len(documents), 'sentences': num_sentences,
          'instances': len(instances)}


def main(argv):
  del argv
  start = time.perf_counter()
  counts = create(
      input_files=FLAGS.input_file, vocab_file=FLAGS.vocab_file,
      output_files=FLAGS.output_file.split(','),
      max_seq_length=FLAGS.max_seq_length,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
      dupe_factor=FLAGS.dupe_factor, random_seed=FLAGS.random_seed)
  elapsed = time.perf_counter() - start
  print(f'{counts}; {counts["sentences"] * FLAGS.dupe_factor / elapsed:.0f} '
        f'sentences/s (x dupe_factor) in {elapsed:.1f} s')


if __name__ == '__main__':
  FLAGS = flags.FLAGS
  app.run(entry_point.tool_main(main))
