"""Builds Transformer TFRecords from parallel text: vocabulary, packed
training rows, eval records with their reference text.

  # WMT format: one sentence a line, two aligned files per split.
  python -m tools.build_translation_data --output_dir=gs://b/wmt \
      --train_source=train.en --train_target=train.de \
      --eval_source=newstest2014.en --eval_target=newstest2014.de
  # Or tab-separated pairs, one a line:
  python -m tools.build_translation_data --output_dir=data/mt \
      --train_tsv=train.tsv --eval_tsv=eval.tsv
  # The quickstart: German catalogs of installed pip packages.
  python -m tools.build_translation_data --quickstart \
      --output_dir=data/transformer_quickstart
  # GNMT's: pairs in length buckets, not packed rows.
  python -m tools.build_translation_data --quickstart --layout=pairs \
      --output_dir=data/gnmt_quickstart
  # The MLPerf GNMT reference's data from WMT16's raw text: Moses tokens,
  # its cleaning, a joint BPE of 32,000 merges (or its own bpe.32000 and
  # vocab.bpe.32000 with --bpe_codes and --vocab_file), length buckets.
  python -m tools.build_translation_data --vocab_format=bpe --layout=pairs \
      --train_source=train.en --train_target=train.de \
      --eval_source=newstest2014.en --eval_target=newstest2014.de \
      --max_length=48 --output_dir=gs://b/gnmt

Writes to output_dir (local or gs://):
  vocab.txt              the shared subword vocabulary (input_pipeline/
                         subwords.py), learnt from the training text with
                         tensorflow-text unless --vocab_file is given; with
                         --vocab_format=bpe the reserved ids, then the BPE
                         tokens (input_pipeline/bpe.py), and bpe_codes.txt
                         the BPE codes
  train-NNNNN-of-MMMMM   packed rows (input_pipeline/packing.py): pairs
                         whose source or target (with EOS) is longer than
                         --max_length are left out and counted
  train-L<length>-NNNNN-of-MMMMM
                         with --layout=pairs (GNMT) instead: one pair a
                         record, in files by length bucket
                         (input_pipeline/length_buckets.py)
  eval-NNNNN-of-MMMMM    one record a pair: `inputs` (source ids, EOS,
                         padding to eval_length) and `index`, the pair's
                         line in eval_references.txt
  eval_references.txt    the eval targets as given (BLEU's references)
  eval_sources.txt       the eval sources as given
  metadata.json          lengths and counts (input_pipeline/translation.py
                         reads it)

Bad input stops the build before anything is written: files of different
line counts (both counts named), bytes that are not UTF-8 (file and line), a
TSV line without exactly one tab, a vocabulary without the reserved ids.
Pairs with an empty side are left out and counted (the counts are printed
and kept in metadata.json). Every output file appears whole or not at all.
"""

import json
import os
import random
import sys
import zlib

from absl import app
from absl import flags
import numpy as np

from core import entry_point

from core import startup


# The command line, parsed before the imports below: --help and flag errors
# answer at once, not after TensorFlow loads.
def define_flags():
  flags.DEFINE_string('output_dir', None, 'Where to write (local or gs://).')
  flags.DEFINE_bool('quickstart', False,
                    'Build the quickstart data from installed catalogs.')
  for split in ('train', 'eval'):
    flags.DEFINE_string(f'{split}_source', '', f'{split}: source sentences.')
    flags.DEFINE_string(f'{split}_target', '', f'{split}: target sentences.')
    flags.DEFINE_string(f'{split}_tsv', '', f'{split}: source<TAB>target.')
  flags.DEFINE_string('vocab_file', '', 'Use this vocabulary (else learn; '
                      "with --vocab_format=bpe, the reference's "
                      'vocab.bpe.32000).')
  flags.DEFINE_enum('vocab_format', 'subword', ['subword', 'bpe'],
                    "This suite's invertible subwords, or the MLPerf GNMT "
                    "reference's Moses tokens and joint BPE.")
  flags.DEFINE_integer('bpe_merges', 32000, 'BPE operations to learn.')
  flags.DEFINE_string('bpe_codes', '', "The reference's BPE codes "
                      '(bpe.32000) instead of learning them.')
  flags.DEFINE_string('source_lang', 'en', 'Moses tokenizer language, source.')
  flags.DEFINE_string('target_lang', 'de', 'Moses tokenizer language, target.')
  flags.DEFINE_integer('vocab_size', 33708, 'Pieces of a learnt vocabulary.')
  flags.DEFINE_integer('max_length', 80, 'Longest training sequence (ids).')
  flags.DEFINE_integer('packed_length', 256, 'Ids a packed training row.')
  flags.DEFINE_enum('layout', 'packed', ['packed', 'pairs'],
                    'Training records: packed rows (the Transformer) or one '
                    'pair a record in length buckets (GNMT).')
  flags.DEFINE_integer('eval_length', 0, 'Padded eval source length (0: auto).')
  flags.DEFINE_integer('eval_max_length', 0,
                       'Leave out longer eval pairs (0: keep all).')
  flags.DEFINE_integer('train_shards', 16, 'Training files.')
  flags.DEFINE_integer('eval_shards', 1, 'Eval files.')
  flags.DEFINE_integer('seed', 0, 'Packing order seed.')
  flags.mark_flag_as_required('output_dir')


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)

startup.import_tensorflow()  # First: TensorFlow without Keras.
# pylint: disable=wrong-import-position
import tensorflow as tf

from core import staged_files
from input_pipeline import length_buckets
from input_pipeline import packing
from input_pipeline import subwords


# -- Reading ---------------------------------------------------------------------


def read_lines(path: str) -> list[str]:
  """The file's lines (without line ends), strictly UTF-8.

  Raises:
    ValueError: naming the file and the line of the first bad byte.
  """
  with tf.io.gfile.GFile(path, 'rb') as f:
    raw = f.read()
  lines = raw.split(b'\n')
  if lines and lines[-1] == b'':
    lines.pop()
  out = []
  for number, line in enumerate(lines, 1):
    try:
      out.append(line.decode('utf-8').rstrip('\r'))
    except UnicodeDecodeError as e:
      raise ValueError(
          f'{path}, line {number}: byte {e.start} is not UTF-8 '
          f'({line[e.start:e.start + 4]!r}). Convert the file to UTF-8 '
          '(e.g. iconv -f latin1 -t utf-8).') from e
  return out


def read_parallel(source_path: str, target_path: str) -> list[tuple]:
  """Aligned pairs from two files, one sentence a line."""
  sources, targets = read_lines(source_path), read_lines(target_path)
  if len(sources) != len(targets):
    raise ValueError(
        f'{source_path} has {len(sources)} lines but {target_path} has '
        f'{len(targets)}: parallel files must be aligned line by line.')
  return list(zip(sources, targets))


def read_tsv(path: str) -> list[tuple]:
  """Pairs from `source<TAB>target` lines."""
  pairs = []
  for number, line in enumerate(read_lines(path), 1):
    fields = line.split('\t')
    if len(fields) != 2:
      raise ValueError(
          f'{path}, line {number}: {len(fields) - 1} tabs; a TSV line is '
          '"source<TAB>target" with exactly one tab.')
    pairs.append(tuple(fields))
  return pairs


def without_empty(pairs: list[tuple]) -> tuple[list[tuple], int]:
  """Pairs whose source and target both hold text, and how many did not."""
  kept = [(s, t) for s, t in pairs if s.strip() and t.strip()]
  return kept, len(pairs) - len(kept)


def held_out(pairs: list[tuple], every: int) -> tuple[list, list]:
  """(train, eval): about 1 pair in `every` held out, chosen by a hash of
  the source, so the split does not depend on order."""
  train, evaluation = [], []
  for pair in pairs:
    (evaluation if zlib.crc32(pair[0].encode()) % every == 0
     else train).append(pair)
  return train, evaluation


# -- Writing ---------------------------------------------------------------------


def _example(features: dict) -> bytes:
  return tf.train.Example(features=tf.train.Features(feature={
      k: tf.train.Feature(int64_list=tf.train.Int64List(
          value=np.atleast_1d(v).tolist())) for k, v in features.items()
  })).SerializeToString()


def shard_names(output_dir: str, split: str, shards: int) -> list[str]:
  return [os.path.join(output_dir, f'{split}-{i:05d}-of-{shards:05d}')
          for i in range(shards)]


def write_shards(records: list[bytes], paths: list[str]) -> None:
  """Records dealt round-robin over `paths`, all appearing at once."""
  with staged_files.staged(paths) as temporaries:
    writers = [tf.io.TFRecordWriter(p) for p in temporaries]
    for i, record in enumerate(records):
      writers[i % len(writers)].write(record)
    for w in writers:
      w.close()


def encode_pairs(vocab, pairs, chunk: int = 20000) -> list[tuple]:
  """(source ids + EOS, target ids + EOS) of each pair."""
  out = []
  eos = np.asarray([subwords.EOS_ID], np.int64)
  for start in range(0, len(pairs), chunk):
    part = pairs[start:start + chunk]
    ids = vocab.encode_batch([s for s, _ in part] + [t for _, t in part])
    n = len(part)
    out += [(np.concatenate([ids[i], eos]), np.concatenate([ids[n + i], eos]))
            for i in range(n)]
  return out


def build(*, output_dir: str, train_pairs: list[tuple],
          eval_pairs: list[tuple], vocab_file: str = '',
          vocab_size: int = 33708, max_length: int = 80,
          packed_length: int = 256, eval_length: int = 0,
          eval_max_length: int = 0, train_shards: int = 16,
          eval_shards: int = 1, seed: int = 0,
          layout: str = 'packed', vocab_format: str = 'subword',
          bpe_merges: int = 32000, bpe_codes_file: str = '',
          source_lang: str = 'en', target_lang: str = 'de') -> dict:
  """Writes the data set; returns what metadata.json holds.

  Args:
    output_dir: where to write (local or gs://).
    train_pairs, eval_pairs: (source, target) text pairs.
    vocab_file: an existing vocabulary; '' learns one of about vocab_size
      pieces from the training pairs (both sides).
    vocab_size: the learnt vocabulary's target size (MLPerf: 33,708).
    max_length: longest training source or target in ids with EOS (MLPerf
      v0.7: 80, longer pairs discarded).
    packed_length: ids a packed training row (Google's v0.7: 256).
    eval_length: eval sources' padded length; 0: the longest eval source
      (with EOS) rounded up to a multiple of 8.
    eval_max_length: leave out (and count) eval pairs whose source or
      target is longer, in ids with EOS; 0 keeps every eval pair (MLPerf
      translates all of newstest2014). Decoding time grows with the longest
      eval source.
    train_shards, eval_shards: files per split (one or more per host).
    seed: the order in which training pairs are packed (or written).
    layout: 'packed' (rows of packed pairs: the Transformer's) or 'pairs'
      (GNMT's: a record a pair, `inputs` and `targets` each padded to
      max_length, in files by length bucket, `train-L<length>-*`;
      input_pipeline/length_buckets.py).
    vocab_format: 'subword' (this suite's invertible WordPiece,
      input_pipeline/subwords.py) or 'bpe' (the MLPerf GNMT reference's
      Moses tokens, cleaning and joint BPE: tools/formats/reference_bpe.py,
      input_pipeline/bpe.py); with 'bpe', vocab_file is the reference's
      vocab.bpe.32000 (else get_vocab's over the training text).
    bpe_merges: BPE operations learnt (the reference: 32,000).
    bpe_codes_file: the reference's BPE codes (bpe.32000) instead of
      learning them.
    source_lang, target_lang: the Moses tokenizer's languages ('bpe').
  """
  if layout not in ('packed', 'pairs'):
    raise ValueError(f"--layout must be 'packed' or 'pairs', got {layout!r}.")
  if vocab_format not in ('subword', 'bpe'):
    raise ValueError(f"--vocab_format must be 'subword' or 'bpe', got "
                     f'{vocab_format!r}.')
  train_pairs, empty_train = without_empty(train_pairs)
  eval_pairs, empty_eval = without_empty(eval_pairs)
  if not train_pairs or not eval_pairs:
    raise ValueError(f'No training ({len(train_pairs)}) or eval '
                     f'({len(eval_pairs)}) pairs with text on both sides.')
  extra = {}
  if vocab_format == 'bpe':
    from tools.formats import reference_bpe
    prepared = reference_bpe.prepare(
        train_pairs, eval_pairs, merges=bpe_merges,
        codes='\n'.join(read_lines(bpe_codes_file)) + '\n'
        if bpe_codes_file else '',
        vocab_tokens=read_lines(vocab_file) if vocab_file else (),
        source_lang=source_lang, target_lang=target_lang)
    vocab, train_text, eval_text = (prepared.vocab, prepared.train,
                                    prepared.eval)
    extra = {'vocab_format': 'bpe', 'target_lang': target_lang,
             'train_pairs_cleaned_out': prepared.dropped_by_clean +
             prepared.dropped_by_latin1}
  else:
    if vocab_file:
      vocab = subwords.SubwordVocab.load(vocab_file)
    else:
      vocab = subwords.learn((t for pair in train_pairs for t in pair),
                             vocab_size=vocab_size)
    train_text, eval_text = train_pairs, eval_pairs
  train_ids = encode_pairs(vocab, train_text)
  kept = [p for p in train_ids
          if len(p[0]) <= max_length and len(p[1]) <= max_length]
  random.Random(seed).shuffle(kept)
  if layout == 'packed':
    rows = [_example(row) for row in packing.pack(kept, packed_length)]
  else:
    lengths = length_buckets.bucket_lengths(max_length)
    by_bucket = [[] for _ in lengths]
    for s, t in kept:
      by_bucket[length_buckets.bucket_of(len(s), len(t), lengths)].append(
          _example({'inputs': np.pad(s, (0, max_length - len(s))),
                    'targets': np.pad(t, (0, max_length - len(t)))}))

  eval_ids = encode_pairs(vocab, eval_text)
  eval_too_long = 0
  if eval_max_length:
    fits = [max(len(s), len(t)) <= eval_max_length for s, t in eval_ids]
    eval_too_long = fits.count(False)
    eval_ids = [p for p, f in zip(eval_ids, fits) if f]
    eval_pairs = [p for p, f in zip(eval_pairs, fits) if f]
  longest = max(len(s) for s, _ in eval_ids)
  if eval_length and longest > eval_length:
    raise ValueError(
        f'An eval source has {longest} ids with EOS, more than --eval_length '
        f'({eval_length}); every eval pair is translated, none dropped: '
        'raise --eval_length or leave it 0.')
  eval_length = eval_length or -(-longest // 8) * 8
  eval_records = [
      _example({'inputs': np.pad(s, (0, eval_length - len(s))), 'index': i})
      for i, (s, _) in enumerate(eval_ids)]

  metadata = {
      'vocab_size': len(vocab), 'max_length': max_length,
      'eval_length': eval_length, 'train_pairs': len(kept),
      'train_pairs_too_long': len(train_ids) - len(kept),
      'train_pairs_empty': empty_train, 'eval_pairs': len(eval_records),
      'eval_pairs_empty': empty_eval, 'eval_pairs_too_long': eval_too_long,
      'train_tokens': int(sum(len(s) + len(t) for s, t in kept)),
      'layout': layout, **extra,
  }
  tf.io.gfile.makedirs(output_dir)
  if layout == 'packed':
    metadata.update(packed_length=packed_length, train_rows=len(rows))
    write_shards(rows, shard_names(output_dir, 'train', train_shards))
  else:
    metadata['buckets'] = [[l, len(b)] for l, b in zip(lengths, by_bucket)]
    for length, bucket in zip(lengths, by_bucket):
      if bucket:
        write_shards(bucket, shard_names(
            output_dir, f'train-L{length}', min(train_shards, len(bucket))))
  write_shards(eval_records, shard_names(output_dir, 'eval', eval_shards))
  staged_files.write_text(os.path.join(output_dir, 'eval_references.txt'),
                          ''.join(t + '\n' for _, t in eval_pairs))
  staged_files.write_text(os.path.join(output_dir, 'eval_sources.txt'),
                          ''.join(s + '\n' for s, _ in eval_pairs))
  staged_files.write_text(os.path.join(output_dir, 'vocab.txt'),
                          '\n'.join(vocab.pieces) + '\n')
  if vocab_format == 'bpe':  # To segment new text as the records were.
    staged_files.write_text(os.path.join(output_dir, 'bpe_codes.txt'),
                            prepared.codes)
  # Last: its presence says the rest is complete.
  staged_files.write_text(os.path.join(output_dir, 'metadata.json'),
                          json.dumps(metadata, indent=1) + '\n')
  return metadata


def quickstart(output_dir: str, eval_every: int = 20,
               vocab_size: int = 4000, layout: str = 'packed',
               vocab_format: str = 'subword', bpe_merges: int = 4000) -> dict:
  """The CPU quickstart's data: catalog pairs, 1 in `eval_every` held out
  (those of at most 48 ids a side: the few long messages would set every
  eval batch's decoding length), a vocabulary of about `vocab_size`
  pieces."""
  from tools.formats import gettext_pairs
  train, evaluation = held_out(gettext_pairs.catalog_pairs(),
                               every=eval_every)
  return build(output_dir=output_dir, train_pairs=train,
               eval_pairs=evaluation, vocab_size=vocab_size, max_length=48,
               packed_length=64, eval_max_length=48, train_shards=4,
               eval_shards=2, layout=layout, vocab_format=vocab_format,
               bpe_merges=bpe_merges)


def main(argv):
  del argv
  f = FLAGS
  if f.quickstart:
    print(json.dumps(quickstart(
        f.output_dir, layout=f.layout, vocab_format=f.vocab_format,
        **({'bpe_merges': f.bpe_merges} if f['bpe_merges'].present else {}))))
    return
  def pairs(source, target, tsv, split):
    if tsv and not (source or target):
      return read_tsv(tsv)
    if source and target and not tsv:
      return read_parallel(source, target)
    raise ValueError(f'Give --{split}_source and --{split}_target, or '
                     f'--{split}_tsv (one or the other).')
  train = pairs(f.train_source, f.train_target, f.train_tsv, 'train')
  evaluation = pairs(f.eval_source, f.eval_target, f.eval_tsv, 'eval')
  print(json.dumps(build(
      output_dir=f.output_dir, train_pairs=train, eval_pairs=evaluation,
      vocab_file=f.vocab_file, vocab_size=f.vocab_size,
      max_length=f.max_length, packed_length=f.packed_length,
      eval_length=f.eval_length, eval_max_length=f.eval_max_length,
      train_shards=f.train_shards,
      eval_shards=f.eval_shards, seed=f.seed, layout=f.layout,
      vocab_format=f.vocab_format, bpe_merges=f.bpe_merges,
      bpe_codes_file=f.bpe_codes, source_lang=f.source_lang,
      target_lang=f.target_lang)))


def run(argv):
  """Bad input is one line on stderr and exit code 2."""
  try:
    main(argv)
  except (ValueError, FileNotFoundError) as e:
    print(f'error: {str(e).splitlines()[0]}', file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  FLAGS = flags.FLAGS
  app.run(entry_point.tool_main(run))
