"""Converts Criteo Terabyte click logs (TSV) into DLRM's click records.

  python -m tools.convert_criteo --input='day_*.gz' --eval_input=eval.tsv \
      --output_dir=OUT [--vocab=frequency | --vocab=hash --table_sizes=...]

A Criteo line is 40 tab-separated fields: the label (0 or 1), 13 integer
counts and 26 categorical values as 8-digit hexadecimal; any field but the
label may be empty. Preprocessed as Google's v0.7 criteo_preprocess.py does
(mlcommons/training_results_v0.7, Google/benchmarks/dlrm/implementations/
dlrm-research-TF-tpu-v4-128):

- an empty field is "0" (FillMissing);
- a count: negative values become 0, then log(x + 1) (NegsToZeroLog);
- a category: int(value, 16) mod 40,000,000 (HexToIntModRange), then
  - `--vocab=frequency` (default, Google's): its row in the feature's
    vocabulary over every input line, train and eval (tft.
    compute_and_apply_vocabulary: most frequent first, ties the larger
    value first); each table has as many rows as the feature has distinct
    values (Google's run: 39,884,406 for the largest);
  - `--vocab=hash`: that value mod the feature's `--table_sizes` (one list
    of 26, or one size for all): one pass, bounded tables, collisions.

The records (input_pipeline/clicks.py): `OUT/train-*` from `--input`,
`OUT/eval-*` from `--eval_input`, lines dealt to the shards in turn (every
host an even share), and OUT/metadata.json. MLPerf v0.7 trains on days 0
to 22 and evaluates on 89,137,318 lines of day 23 (Google's log's
eval_samples); give those lines as `--eval_input`.

Bad input stops the run naming the file and the line: a line without 40
fields, a label other than 0 or 1, a count that is not an integer, a
category that is not hexadecimal, an empty file. `--on_bad_line=skip` leaves
such lines out and counts them. Nothing appears in OUT unless every shard
is complete (core/staged_files.py).

Scale, measured on this suite's 2-core machine: 48,000 lines a second
with `--vocab=hash` (Python parses 120,000 a second; writing the
tf.train.Examples takes the rest), 29,000 with `--vocab=frequency` (two
passes), one process. `--vocab=frequency` keeps a count of every distinct
value in memory (Criteo Terabyte: about 2e8 of them). For the whole
terabyte (4.4e9 lines), run `--vocab=hash` on each day file in its own
process (a day's shards in their own folder); the frequency vocabularies are
exactly Google's but need a machine with the memory for them.
"""

import collections
import dataclasses
import gzip
import math

from absl import app
from absl import flags

from core import entry_point

from core import startup

NUM_DENSE = 13
NUM_SPARSE = 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE
MAX_IND_RANGE = 40_000_000  # criteo_preprocess.py.
DENSE_FEATURES = tuple(f'int-feature-{i}' for i in range(1, 14))
SPARSE_FEATURES = tuple(f'categorical-feature-{i}' for i in range(14, 40))
VOCABS = ('frequency', 'hash')
ON_BAD_LINE = ('fail', 'skip')


class BadLine(ValueError):
  """A line that is not Criteo's format, named by file and line."""


def parse_line(line: str, where: str):
  """(label, 13 log counts, 26 category values mod 40M) of one line."""
  fields = line.rstrip('\r\n').split('\t')
  if len(fields) != NUM_FIELDS:
    raise BadLine(f'{where}: {len(fields)} fields; a Criteo line has '
                  f'{NUM_FIELDS} tab-separated (label, 13 counts, 26 '
                  'hexadecimal categories).')
  if fields[0] not in ('0', '1'):
    raise BadLine(f'{where}: the label is {fields[0]!r}, not 0 or 1.')
  dense = []
  for i, value in enumerate(fields[1:1 + NUM_DENSE]):
    try:
      count = int(value or '0')
    except ValueError:
      raise BadLine(f'{where}: {DENSE_FEATURES[i]} is {value!r}, not an '
                    'integer count.') from None
    dense.append(math.log(max(count, 0) + 1))
  sparse = []
  for i, value in enumerate(fields[1 + NUM_DENSE:]):
    try:
      sparse.append(int(value or '0', 16) % MAX_IND_RANGE)
    except ValueError:
      raise BadLine(f'{where}: {SPARSE_FEATURES[i]} is {value!r}, not '
                    'hexadecimal.') from None
  return int(fields[0]), dense, sparse


def _open(path: str):
  tf = startup.import_tensorflow()  # Here: --help answers at once.
  f = tf.io.gfile.GFile(path, 'rb')
  return gzip.open(f, 'rt') if path.endswith('.gz') else _Text(f)


class _Text:
  """GFile bytes as text lines."""

  def __init__(self, f):
    self.f = f

  def __iter__(self):
    for line in self.f:
      yield line.decode('utf-8', errors='replace')

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.f.close()


@dataclasses.dataclass
class Skipped:
  lines: int = 0
  first: str = ''  # The first skipped line's reason.

  def add(self, error: BadLine):
    self.lines += 1
    self.first = self.first or str(error)


def read(files: list[str], on_bad_line: str, skipped: Skipped):
  """Every good line of `files`, parsed, in order."""
  for path in files:
    empty = True
    with _open(path) as f:
      for number, line in enumerate(f, 1):
        empty = False
        try:
          yield parse_line(line, f'{path} line {number}')
        except BadLine as e:
          if on_bad_line == 'fail':
            raise
          skipped.add(e)
    if empty:
      raise BadLine(f'{path} is empty: no Criteo lines.')


def list_inputs(patterns: str, flag: str) -> list[str]:
  tf = startup.import_tensorflow()  # Here: --help answers at once.
  files = []
  for pattern in [p for p in patterns.split(',') if p]:
    matched = sorted(tf.io.gfile.glob(pattern))
    if not matched:
      raise FileNotFoundError(f'--{flag}: no files match {pattern!r}.')
    files += matched
  if not files:
    raise FileNotFoundError(f'--{flag} names no files.')
  return files


def table_sizes(value: str) -> list[int]:
  sizes = [int(v) for v in value.split(',') if v.strip()]
  if len(sizes) == 1:
    sizes *= NUM_SPARSE
  if len(sizes) != NUM_SPARSE or min(sizes) < 1:
    raise ValueError(f'--table_sizes needs one size, or {NUM_SPARSE} '
                     f'positive sizes (one a categorical feature); got '
                     f'{value!r}.')
  return sizes


def convert(*, train_files: list[str], eval_files: list[str],
            output_dir: str, vocab: str = 'frequency', sizes=None,
            train_shards: int = 64, eval_shards: int = 16,
            on_bad_line: str = 'fail') -> dict:
  """Writes the records and metadata.json; returns the metadata."""
  startup.import_tensorflow()  # Quiet, without Keras, before click_records.
  from tools.formats import click_records  # pylint: disable=g-import-not-at-top
  if vocab not in VOCABS:
    raise ValueError(f'--vocab must be one of {VOCABS}, got {vocab!r}.')
  if on_bad_line not in ON_BAD_LINE:
    raise ValueError(f'--on_bad_line must be one of {ON_BAD_LINE}.')
  skipped = Skipped()
  if vocab == 'frequency':
    counts = [collections.Counter() for _ in range(NUM_SPARSE)]
    # Pass 1 over every line, as Google's vocab_gen_mode; its errors come
    # before anything is written.
    for _, _, sparse in read(train_files + eval_files, on_bad_line,
                             skipped):
      for counter, value in zip(counts, sparse):
        counter[value] += 1
    vocabularies = [click_records.frequency_vocabulary(c) for c in counts]
    sizes = [len(v) for v in vocabularies]
    rows = lambda sparse: [v[x] for v, x in zip(vocabularies, sparse)]
    skipped = Skipped()  # Pass 2 meets the same lines: count them once.
  else:
    if sizes is None:
      raise ValueError('--vocab=hash needs --table_sizes.')
    rows = lambda sparse: [x % n for x, n in zip(sparse, sizes)]
  written = {}
  for name, files, shards in (('train', train_files, train_shards),
                              ('eval', eval_files, eval_shards)):
    paths = click_records.shard_paths(output_dir, name, shards)
    count = 0
    with click_records.shard_writers(paths) as write:
      for label, dense, sparse in read(files, on_bad_line, skipped):
        write(count, label, dense, rows(sparse))
        count += 1
    written[name] = count
  metadata = dict(
      dense_features=DENSE_FEATURES, sparse_features=SPARSE_FEATURES,
      vocab_sizes=sizes, train_examples=written['train'],
      eval_examples=written['eval'], source='Criteo (tools.convert_criteo)',
      vocabulary=vocab, skipped_lines=skipped.lines)
  click_records.write_metadata(output_dir, **metadata)
  return {**metadata, 'first_skipped': skipped.first}


def main(argv):
  del argv
  f = flags.FLAGS
  # A bad line or a missing input raises ValueError or FileNotFoundError:
  # one line and exit 2 (entry_point.tool_main).
  sizes = table_sizes(f.table_sizes) if f.table_sizes else None
  metadata = convert(
      train_files=list_inputs(f.input, 'input'),
      eval_files=list_inputs(f.eval_input, 'eval_input'),
      output_dir=f.output_dir, vocab=f.vocab, sizes=sizes,
      train_shards=f.train_shards, eval_shards=f.eval_shards,
      on_bad_line=f.on_bad_line)
  print(f'{metadata["train_examples"]} training and '
        f'{metadata["eval_examples"]} eval lines in {f.output_dir}; tables '
        f'{metadata["vocab_sizes"]}')
  if metadata['skipped_lines']:
    print(f'skipped {metadata["skipped_lines"]} bad lines (the first: '
          f'{metadata["first_skipped"]})')


if __name__ == '__main__':
  flags.DEFINE_string('input', None, 'Training TSV files (globs, comma-'
                      'separated; .gz read as gzip).', required=True)
  flags.DEFINE_string('eval_input', None, 'Eval TSV files (globs).',
                      required=True)
  flags.DEFINE_string('output_dir', None, 'Where the records go.',
                      required=True)
  flags.DEFINE_enum('vocab', 'frequency', VOCABS,
                    'frequency: Google\'s vocabularies over all lines; hash: '
                    'values mod --table_sizes.')
  flags.DEFINE_string('table_sizes', '', 'With --vocab=hash: one size or 26.')
  flags.DEFINE_integer('train_shards', 64, 'Training record files.')
  flags.DEFINE_integer('eval_shards', 16, 'Eval record files.')
  flags.DEFINE_enum('on_bad_line', 'fail', ON_BAD_LINE,
                    'fail: stop naming the line; skip: leave it out, count it.')
  entry_point.parse_flags_early(lambda: None)
  app.run(entry_point.tool_main(main))
