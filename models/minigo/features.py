"""MiniGo's `mlperf07` input features and the board's 8 symmetries.

Features (Google's v0.7 features.py, MLPERF07_FEATURES; 13 planes, each
[size, size], NHWC):
  0-7   the current board and the 3 before it (a pass repeats a board; before
        the first move, the oldest there is), each as two planes: the
        stones of the player to move, then the opponent's;
  8     ones if Black is to move, else zeros;
  9-11  stones whose group has exactly 1, 2 or 3 liberties;
  12    empty points where the player to move would capture (the last
        liberty of an opponent group).

Symmetries (symmetries.py): the dihedral group's 8 maps of a square, under
their names; a policy's pass entry is left in place.
"""

import numpy as np

from models.minigo import go

PLANES = 13

# Their names and maps (np.rot90 turns counter-clockwise).
SYMMETRIES = {
    'identity': lambda x: x,
    'rot90': np.rot90,
    'rot180': lambda x: np.rot90(x, 2),
    'rot270': lambda x: np.rot90(x, 3),
    'flip': lambda x: np.rot90(np.fliplr(x)),
    'fliprot90': np.flipud,
    'fliprot180': lambda x: np.rot90(np.flipud(x)),
    'fliprot270': np.fliplr,
}
INVERSES = {'identity': 'identity', 'rot90': 'rot270', 'rot180': 'rot180',
            'rot270': 'rot90', 'flip': 'flip', 'fliprot90': 'fliprot90',
            'fliprot180': 'fliprot180', 'fliprot270': 'fliprot270'}


def features(position: go.Position) -> np.ndarray:
  """[size, size, 13] uint8: the position's mlperf07 planes."""
  size, me = position.size, position.to_play
  boards = (position.board,) + position.history
  boards += (boards[-1],) * (go.HISTORY + 1 - len(boards))
  planes = []
  for board in boards[:go.HISTORY + 1]:
    planes += [board == me, board == -me]
  planes.append(np.full(size * size, me == go.BLACK))
  liberties = position.liberties()
  planes += [liberties == k for k in (1, 2, 3)]
  capture = np.zeros(size * size, bool)
  for colour, _, free in position.groups()[1].values():
    if colour == -me and len(free) == 1:  # An opponent group in atari.
      capture[next(iter(free))] = True
  planes.append(capture)
  return np.stack(planes, -1).reshape(size, size, PLANES).astype(np.uint8)


def apply_to_features(symmetry: str, x: np.ndarray) -> np.ndarray:
  """x [size, size, ...] under the symmetry."""
  return np.ascontiguousarray(SYMMETRIES[symmetry](x))


def apply_to_batch(symmetry: str, x: np.ndarray) -> np.ndarray:
  """x [batch, size, size, ...], each under the symmetry (as
  apply_to_features on each: the maps act on the first two axes, so the
  batch goes third while they act)."""
  moved = SYMMETRIES[symmetry](np.moveaxis(x, 0, 2))
  return np.ascontiguousarray(np.moveaxis(moved, 2, 0))


def apply_to_policy(symmetry: str, pi: np.ndarray) -> np.ndarray:
  """A [size * size + 1] policy under the symmetry (the pass unmoved)."""
  size = int(round((pi.shape[-1] - 1) ** 0.5))
  board = SYMMETRIES[symmetry](pi[:-1].reshape(size, size))
  return np.append(board.ravel(), pi[-1])
