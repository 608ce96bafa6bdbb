"""input_pipeline/go_examples.py: Google's record format, written whole,
read back, and the training symmetry applied alike to features and
policy."""

import numpy as np
import pytest
import tensorflow as tf

from input_pipeline import go_examples
from models.minigo import go
from models.minigo import features as go_features


def _examples(count, size=5):
  rng = np.random.default_rng(0)
  position, out = go.Position(size), []
  for _ in range(count):
    legal = np.flatnonzero(position.legal_moves())
    pi = np.zeros(size * size + 1, np.float32)
    pi[legal] = rng.dirichlet(np.ones(len(legal)))
    out.append((go_features.features(position), pi,
                float(rng.choice([-1, 1]))))
    position = position.play(int(rng.choice(legal[:-1])))
  return out


def test_records_round_trip_in_googles_format(tmp_path):
  examples = _examples(6)
  path = str(tmp_path / 'game.tfrecord.zz')
  assert go_examples.write(path, examples) == 6
  assert [p.name for p in tmp_path.iterdir()] == ['game.tfrecord.zz']
  read = [go_examples.parse(r, 5) for r in go_examples.dataset([path])]
  for (x, pi, outcome), got in zip(examples, read):
    np.testing.assert_array_equal(got['x'].numpy(), x)
    np.testing.assert_array_equal(got['pi'].numpy(), pi)
    assert got['outcome'].numpy() == outcome
  # Their reader's view of a record: 'x' and 'pi' raw bytes, ZLIB.
  raw = next(iter(tf.data.TFRecordDataset([path], compression_type='ZLIB')))
  example = tf.train.Example.FromString(raw.numpy())
  assert example.features.feature['x'].bytes_list.value[0] == (
      examples[0][0].tobytes())
  # A failed write leaves nothing behind.
  with pytest.raises(TypeError):
    go_examples.write(str(tmp_path / 'bad.zz'), iter(
        [examples[0], (None, None, None)]))
  assert sorted(p.name for p in tmp_path.iterdir()) == ['game.tfrecord.zz']


def test_the_training_symmetry_moves_policy_with_features():
  (x, pi, outcome), = _examples(1)[-1:]
  # One stone, one policy point, on the same square.
  x = np.zeros_like(x)
  x[0, 1, 0] = 1
  pi = np.zeros_like(pi)
  pi[0 * 5 + 1], pi[-1] = 0.75, 0.25
  seen = set()
  for s in range(40):
    got = go_examples.random_symmetry(
        {'x': tf.constant(x), 'pi': tf.constant(pi),
         'outcome': tf.constant(outcome)}, [s, 1])
    gx, gpi = got['x'].numpy(), got['pi'].numpy()
    (r, c), = zip(*np.nonzero(gx[..., 0]))
    assert gpi[r * 5 + c] == 0.75 and gpi[-1] == 0.25
    assert gpi.sum() == pytest.approx(1.0)
    seen.add((int(r), int(c)))
  # The 8 images of (0, 1) on a 5x5 board are 8 distinct squares.
  assert len(seen) == 8
