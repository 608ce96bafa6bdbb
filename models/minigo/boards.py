"""The rules of Go over a batch of games at once, as arrays.

The same rules as go.py's Position (captures, no suicide, simple ko,
positional superko by Zobrist hash, area scoring, two passes end the game;
its hashes and its `mlperf07` features too), held as arrays with the games
along the first axis, as the pgx Go environments lay them out: every rule
is a few NumPy operations over all the games, not a Python loop over
stones. Self-play searches many games at once (selfplay.py); this is their
positions, many at a time.

Groups are connected components found by label propagation: each stone
starts with its own point as label, takes the smallest label among its
same-coloured neighbours, then the label of its label (pointer jumping),
until nothing changes (a few rounds: the jumps halve the distances).
Liberties are the distinct (group, empty point) pairs of neighbours.

Points are flat indices row by row and the pass is size * size, as go.py.
"""

import dataclasses

import numpy as np

from models.minigo import go

_EDGE_COLOUR = 2  # Beyond the board: no colour a stone or empty point has.


def components(key: np.ndarray, active: np.ndarray, size: int) -> np.ndarray:
  """[games, points] int32: for each active point the smallest point of its
  component (neighbours join when both are active and their keys are
  equal); `points` (one past the board) on the others."""
  games, points = key.shape
  table = go.neighbour_table(size)  # [points, 4]; `points` past an edge.
  pad_key = np.concatenate([key, np.full((games, 1), _EDGE_COLOUR, key.dtype)],
                           1)
  joined = ((pad_key[:, table] == key[:, :, None])
            & np.append(active, np.zeros((games, 1), bool), 1)[:, table]
            & active[:, :, None])
  neighbour = np.where(joined, table, points).reshape(games, -1)
  label = np.where(active, np.arange(points, dtype=np.int32),
                   points).astype(np.int32)
  sentinel = np.full((games, 1), points, np.int32)
  while True:
    padded = np.concatenate([label, sentinel], 1)
    near = np.take_along_axis(padded, neighbour, 1).reshape(games, points, 4)
    smaller = np.minimum(label, near.min(-1))
    jumped = np.take_along_axis(np.concatenate([smaller, sentinel], 1),
                                smaller, 1)
    if np.array_equal(jumped, label):
      return label
    label = jumped


def _distinct(labels: np.ndarray, points: int) -> np.ndarray:
  """[..., 4] bool: each neighbour's label counted once (not `points`, and
  not equal to an earlier neighbour's)."""
  first = labels != points
  for j in range(1, 4):
    for k in range(j):
      first[..., j] &= labels[..., j] != labels[..., k]
  return first


@dataclasses.dataclass(frozen=True)
class Boards:
  """A batch of positions, games along the first axis. Immutable: `play`
  returns new Boards.

  Attributes:
    size: the board's side (every game's).
    board: [games, size * size] int8: BLACK 1, WHITE -1, EMPTY 0.
    history: [games, go.HISTORY, size * size] int8: the boards before the
      last moves, newest first (a pass repeats one; before the first moves,
      the oldest there is), for the features.
    to_play: [games] int8.
    ko: [games] int32: the point simple ko forbids, -1 none.
    passes: [games] int32: passes in a row.
    n: [games] int32: moves played.
    hash: [games] uint64: the stones' Zobrist hash (go.zobrist's keys).
    seen: [games, T] uint64: the hashes of each game's earlier
      arrangements, its first `seen_count` entries valid (superko's).
    seen_count: [games] int32.
    komi: the komi.
    superko: positional superko (go.py's module docstring).
    groups: [games, size * size] int32, `labels()` when known (play
      derives its positions' from these instead of finding them again).
  """
  size: int
  board: np.ndarray
  history: np.ndarray
  to_play: np.ndarray
  ko: np.ndarray
  passes: np.ndarray
  n: np.ndarray
  hash: np.ndarray
  seen: np.ndarray
  seen_count: np.ndarray
  komi: float = go.KOMI
  superko: bool = True
  groups: np.ndarray | None = None

  @classmethod
  def empty(cls, size: int, games: int, *, komi: float = go.KOMI,
            superko: bool = True) -> 'Boards':
    points = size * size
    return cls(size=size, board=np.zeros((games, points), np.int8),
               history=np.zeros((games, go.HISTORY, points), np.int8),
               to_play=np.full(games, go.BLACK, np.int8),
               ko=np.full(games, -1, np.int32),
               passes=np.zeros(games, np.int32), n=np.zeros(games, np.int32),
               hash=np.zeros(games, np.uint64),
               seen=np.zeros((games, 0), np.uint64),
               seen_count=np.zeros(games, np.int32), komi=komi,
               superko=superko)

  @classmethod
  def from_positions(cls, positions) -> 'Boards':
    """The batch of go.Positions of one size, komi and superko rule."""
    first = positions[0]
    size = first.size
    history = []
    for p in positions:
      boards = list(p.history) or [p.board]
      boards += [boards[-1]] * (go.HISTORY - len(boards))
      history.append(np.stack(boards[:go.HISTORY]))
    seen = [sorted(p.seen) if p.superko else [] for p in positions]
    width = max(map(len, seen), default=0)
    return cls(
        size=size, board=np.stack([p.board for p in positions]),
        history=np.stack(history).astype(np.int8),
        to_play=np.array([p.to_play for p in positions], np.int8),
        ko=np.array([p.ko for p in positions], np.int32),
        passes=np.array([p.passes for p in positions], np.int32),
        n=np.array([p.n for p in positions], np.int32),
        hash=np.array([p.hash for p in positions], np.uint64),
        seen=np.array([s + [0] * (width - len(s)) for s in seen],
                      np.uint64).reshape(len(positions), width),
        seen_count=np.array(list(map(len, seen)), np.int32),
        komi=first.komi, superko=first.superko)

  @property
  def games(self) -> int:
    return self.board.shape[0]

  @property
  def pass_move(self) -> int:
    return self.size * self.size

  def take(self, index) -> 'Boards':
    """The games at `index` (an index array or a boolean mask)."""
    return dataclasses.replace(
        self, groups=None if self.groups is None else self.groups[index],
        **{f: getattr(self, f)[index] for f in (
            'board', 'history', 'to_play', 'ko', 'passes', 'n', 'hash',
            'seen', 'seen_count')})

  # -- Groups ------------------------------------------------------------

  def labels(self) -> np.ndarray:
    """[games, points] int32: each stone's group (its smallest point);
    `points` on empty points."""
    if self.groups is not None:
      return self.groups
    return components(self.board, self.board != go.EMPTY, self.size)

  def liberties(self, labels: np.ndarray | None = None) -> np.ndarray:
    """[games, points + 1] int32: each group's liberties, by label (the
    last column, for `points`, is 0)."""
    labels = self.labels() if labels is None else labels
    games, points = self.board.shape
    table = go.neighbour_table(self.size)
    padded = np.concatenate(
        [labels, np.full((games, 1), points, np.int32)], 1)
    near = padded[:, table]  # [games, points, 4]: neighbours' groups.
    counted = _distinct(near, points) & (self.board == go.EMPTY)[:, :, None]
    flat = (np.arange(games)[:, None, None] * (points + 1) + near)[counted]
    return np.bincount(flat, minlength=games * (points + 1)).reshape(
        games, points + 1).astype(np.int32)

  def point_liberties(self) -> np.ndarray:
    """[games, points] int32: each stone's group's liberties, 0 on empty
    points (go.Position.liberties)."""
    labels = self.labels()
    return np.take_along_axis(self.liberties(labels), labels, 1)

  # -- Rules -------------------------------------------------------------

  def _neighbourhood(self):
    """The neighbours' colours, groups and their liberties, and the groups
    that a move at each point would capture: ([games, points, 4] colour,
    label, liberties, captured mask)."""
    games, points = self.board.shape
    table = go.neighbour_table(self.size)
    labels = self.labels()
    libs = self.liberties(labels)
    colour = np.concatenate(
        [self.board, np.full((games, 1), _EDGE_COLOUR, np.int8)], 1)[:, table]
    label = np.concatenate(
        [labels, np.full((games, 1), points, np.int32)], 1)[:, table]
    near_libs = np.take_along_axis(libs, label.reshape(games, -1),
                                   1).reshape(games, points, 4)
    captured = ((colour == -self.to_play[:, None, None]) & (near_libs == 1)
                & _distinct(label, points))
    return colour, label, near_libs, captured, labels

  def _group_keys(self, labels: np.ndarray) -> np.ndarray:
    """[games, points + 1] uint64: each group's stones' Zobrist keys XORed,
    by label."""
    games, points = self.board.shape
    keys = go.zobrist(self.size)[np.arange(points)[None, :],
                                 self.board.astype(np.int64) + 1]
    out = np.zeros((games, points + 1), np.uint64)
    np.bitwise_xor.at(out, (np.repeat(np.arange(games), points),
                            labels.ravel()), keys.ravel())
    out[:, points] = 0
    return out

  def _hashes_after(self, label, captured, labels) -> np.ndarray:
    """[games, points] uint64: the stones' hash after to_play at each
    point, its captures taken."""
    games, points = self.board.shape
    groups = self._group_keys(labels)
    taken = np.take_along_axis(groups, label.reshape(games, -1),
                               1).reshape(games, points, 4)
    taken = np.where(captured, taken, np.uint64(0))
    after = self.hash[:, None] ^ go.zobrist(self.size)[
        np.arange(points)[None, :], self.to_play.astype(np.int64)[:, None] + 1]
    for j in range(4):
      after = after ^ taken[:, :, j]
    return after

  def _repeats(self, hashes: np.ndarray) -> np.ndarray:
    """[games, k] bool: arrangements superko forbids (the current one or
    an earlier one of the game)."""
    repeats = hashes == self.hash[:, None]
    if self.seen.shape[1]:
      valid = (np.arange(self.seen.shape[1])[None, :]
               < self.seen_count[:, None])
      repeats |= ((hashes[:, :, None] == self.seen[:, None, :])
                  & valid[:, None, :]).any(-1)
    return repeats

  def legal(self) -> np.ndarray:
    """[games, points + 1] bool: the moves to_play may play, the pass (always
    legal) last (go.Position.legal_moves)."""
    games, points = self.board.shape
    colour, label, near_libs, captured, labels = self._neighbourhood()
    own = colour == self.to_play[:, None, None]
    alive = ((colour == go.EMPTY).any(-1) | (own & (near_libs > 1)).any(-1)
             | captured.any(-1))
    legal = (self.board == go.EMPTY) & alive
    legal[np.arange(games), np.maximum(self.ko, 0)] &= self.ko < 0
    if self.superko:
      legal &= ~self._repeats(self._hashes_after(label, captured, labels))
    return np.concatenate([legal, np.ones((games, 1), bool)], 1)

  def play(self, moves, *, legal: np.ndarray | None = None) -> 'Boards':
    """The positions after each game's to_play plays its move (a point or
    the pass).

    Args:
      moves: [games] points or the pass.
      legal: the games' `legal()` when the caller has it.

    Raises:
      go.IllegalMove: naming the first game whose move is illegal.
    """
    moves = np.asarray(moves, np.int64)
    games, points = self.board.shape
    legal = self.legal() if legal is None else legal
    rows = np.arange(games)
    bad = ~legal[rows, np.clip(moves, 0, points)] | (moves < 0) | (
        moves > points)
    if bad.any():
      g = int(np.flatnonzero(bad)[0])
      raise go.IllegalMove(f'game {g}: move {moves[g]} is illegal.')
    colour, label, _, captured, labels = self._neighbourhood()
    placed = moves < points
    at = np.minimum(moves, points - 1)
    hashes = self._hashes_after(label, captured, labels)[rows, at]
    taken = np.where(captured[rows, at], label[rows, at], points)  # [g, 4]
    removed = ((labels[:, :, None] == taken[:, None, :]).any(-1)
               & (self.board == -self.to_play[:, None]) & placed[:, None])
    board = np.where(removed, np.int8(go.EMPTY), self.board)
    board[rows[placed], at[placed]] = self.to_play[placed]
    near_colour = colour[rows, at]  # [games, 4]
    lone_capture = (removed.sum(1) == 1) & placed
    ko_point = np.where(
        lone_capture & ~(near_colour == self.to_play[:, None]).any(1)
        & ~(near_colour == go.EMPTY).any(1),
        np.argmax(removed, 1), -1).astype(np.int32)
    history = np.concatenate([self.board[:, None], self.history[:, :-1]], 1)
    seen, count = self.seen, self.seen_count
    if self.superko:
      width = seen.shape[1]
      if int(count.max(initial=0)) >= width:
        seen = np.concatenate(
            [seen, np.zeros((games, max(8, width)), np.uint64)], 1)
      seen = seen.copy()
      seen[rows, count] = self.hash
      count = count + 1
    # The groups after: the move's and its own neighbours' join under the
    # smallest of their labels (each a group's smallest point); the
    # captured points are empty.
    own = np.where(near_colour == self.to_play[:, None], label[rows, at],
                   points)
    joined = np.minimum(at, own.min(1))
    merged = ((labels[:, :, None] == own[:, None, :]).any(-1)
              & (self.board == self.to_play[:, None]) & placed[:, None])
    groups = np.where(merged, joined[:, None], labels)
    groups[rows[placed], at[placed]] = joined[placed]
    groups = np.where(removed, points, groups).astype(np.int32)
    return dataclasses.replace(
        self, board=board, history=history, groups=groups,
        to_play=(-self.to_play).astype(np.int8),
        ko=np.where(placed, ko_point, -1).astype(np.int32),
        passes=np.where(placed, 0, self.passes + 1).astype(np.int32),
        n=self.n + 1, hash=np.where(placed, hashes, self.hash),
        seen=seen, seen_count=count)

  def game_over(self) -> np.ndarray:
    return self.passes >= 2

  # -- Counting ----------------------------------------------------------

  def area(self) -> tuple[np.ndarray, np.ndarray]:
    """([games] Black's, [games] White's points): stones plus the empty
    regions bordered by that colour alone (go.Position.area)."""
    territory = self.territory()
    return ((self.board == go.BLACK).sum(1) + (territory == go.BLACK).sum(1),
            (self.board == go.WHITE).sum(1) + (territory == go.WHITE).sum(1))

  def territory(self) -> np.ndarray:
    """[games, points] int8: each empty point's owner by area scoring (the
    colour that alone borders its empty region), 0 for the others."""
    games, points = self.board.shape
    empty = self.board == go.EMPTY
    region = components(self.board, empty, self.size)
    table = go.neighbour_table(self.size)
    near = np.concatenate(
        [self.board, np.zeros((games, 1), np.int8)], 1)[:, table]
    flat = np.arange(games)[:, None] * (points + 1) + region
    touches = {}
    for colour in (go.BLACK, go.WHITE):
      border = (near == colour).any(-1) & empty
      touches[colour] = np.bincount(
          flat[border], minlength=games * (points + 1)).reshape(
              games, points + 1) > 0
    black_region = np.take_along_axis(touches[go.BLACK] & ~touches[go.WHITE],
                                      region, 1) & empty
    white_region = np.take_along_axis(touches[go.WHITE] & ~touches[go.BLACK],
                                      region, 1) & empty
    return (black_region.astype(np.int8) * go.BLACK
            + white_region.astype(np.int8) * go.WHITE)

  def score(self) -> np.ndarray:
    """[games] float: Black's area minus White's, minus komi."""
    black, white = self.area()
    return black - white - self.komi

  # -- Features ----------------------------------------------------------

  def features(self) -> np.ndarray:
    """[games, size, size, 13] uint8: each position's mlperf07 planes
    (features.py)."""
    games, points = self.board.shape
    me = self.to_play[:, None].astype(np.int8)
    planes = []
    for board in [self.board] + [self.history[:, i]
                                 for i in range(go.HISTORY)]:
      planes += [board == me, board == -me]
    planes.append(np.broadcast_to(me == go.BLACK, (games, points)))
    labels = self.labels()
    libs = self.liberties(labels)
    point_libs = np.take_along_axis(libs, labels, 1)
    planes += [point_libs == k for k in (1, 2, 3)]
    # The last liberty of an opponent group: a point whose neighbour is an
    # opponent stone in atari.
    table = go.neighbour_table(self.size)
    atari = np.concatenate([(point_libs == 1) & (self.board == -me),
                            np.zeros((games, 1), bool)], 1)
    planes.append(atari[:, table].any(-1) & (self.board == go.EMPTY))
    return np.stack(planes, -1).reshape(
        games, self.size, self.size, len(planes)).astype(np.uint8)
