"""Builds the BERT quickstart data from the Python documentation text.

  python -m tools.build_bert_quickstart_data --output_dir=data/bert_quickstart

The standard library ships its documentation topics as text in the
`pydoc_data` package, so nothing is downloaded. Each topic becomes a document
(one sentence a line, a blank line between topics), then: a WordPiece
vocabulary (tools/build_vocab.py), and pretraining TFRecords
(tools/create_pretraining_data.py): train-* from four topics in five,
eval-* from the rest.
"""

import os
import re

from absl import app
from absl import flags

from core import entry_point


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_string('output_dir', 'data/bert_quickstart', 'Where to write.')


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

from core import staged_files
from tools import build_vocab
from tools import create_pretraining_data

SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z(\"\'])')


def python_docs_corpus() -> list[list[str]]:
  """Topics of pydoc_data as documents of sentences."""
  from pydoc_data import topics
  documents = []
  for name in sorted(topics.topics):
    sentences = []
    for paragraph in re.split(r'\n\s*\n', topics.topics[name]):
      text = ' '.join(paragraph.split())
      if len(text) < 20:
        continue
      sentences.extend(s for s in SENTENCE_END.split(text) if s)
    if sentences:
      documents.append(sentences)
  return documents


def write_corpus(documents: list[list[str]], path: str) -> None:
  staged_files.write_text(path,
                          '\n\n'.join('\n'.join(d) for d in documents) + '\n')


def build(output_dir: str, *, vocab_size: int = 4000, max_seq_length: int = 64,
          max_predictions_per_seq: int = 10, dupe_factor: int = 5) -> dict:
  os.makedirs(output_dir, exist_ok=True)
  documents = python_docs_corpus()
  train_docs = [d for i, d in enumerate(documents) if i % 5]
  eval_docs = [d for i, d in enumerate(documents) if not i % 5]
  corpus = {split: os.path.join(output_dir, f'{split}_corpus.txt')
            for split in ('train', 'eval')}
  write_corpus(train_docs, corpus['train'])
  write_corpus(eval_docs, corpus['eval'])
  vocab_file = os.path.join(output_dir, 'vocab.txt')
  build_vocab.write_vocab(build_vocab.build_vocab(
      input_files=[corpus['train']], vocab_size=vocab_size), vocab_file)
  counts = {}
  for split, shards in (('train', 4), ('eval', 2)):
    counts[split] = create_pretraining_data.create(
        input_files=[corpus[split]], vocab_file=vocab_file,
        output_files=[os.path.join(output_dir, f'{split}-{i:05d}-of-{shards:05d}')
                      for i in range(shards)],
        max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        dupe_factor=dupe_factor if split == 'train' else 1)
  return counts


def main(argv):
  del argv
  print(build(FLAGS.output_dir))


if __name__ == '__main__':
  FLAGS = flags.FLAGS
  app.run(entry_point.tool_main(main))
