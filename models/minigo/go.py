"""The rules of Go as MiniGo plays them, for any board size.

MiniGo's engine (go.py of Google's v0.7 submission and of the MLPerf
reference) in its essentials: stones captured when their group has no
liberty left, suicide illegal, simple ko (the one stone just captured may
not be retaken at once), area scoring (stones plus territory reached by one
colour only) with komi 7.5, the game over after two passes in a row. The
board size is a parameter of the position, not of the module (their engine
reads BOARD_SIZE from the environment at import, so 9x9 and 19x19 cannot
share a process; pettingzoo's copy of it does the same).

Positional superko, on by default: no move may recreate an arrangement of
stones the game has had before. Google's C++ self-play, which played every
v0.7 game, enforces it (cc/position.cc's UpdateLegalMoves with the tree's
ZobristHistory, back to the game's first position); their Python go.py,
the reference's rules, has simple ko only (`superko=False` is those rules).
Arrangements are compared by a Zobrist hash, as theirs.

Points are flat indices, row by row (`row * size + column`; (0, 0) the top
left, as theirs); the pass is `size * size`. Colours: BLACK 1, WHITE -1,
EMPTY 0.
"""

import functools

import numpy as np

BLACK, WHITE, EMPTY = 1, -1, 0
KOMI = 7.5
# Boards kept besides the current one: mlperf07 features' last 4 boards.
HISTORY = 3


class IllegalMove(ValueError):
  pass


@functools.lru_cache(maxsize=None)
def zobrist(size: int) -> np.ndarray:
  """[size * size, 3] uint64: each (point, colour + 1)'s random key; a
  stone arrangement's hash is the XOR of its stones' keys."""
  keys = np.random.default_rng(size).integers(
      1, 2**63, size=(size * size, 3), dtype=np.int64).astype(np.uint64)
  keys[:, EMPTY + 1] = 0
  return keys


def stone_hash(board: np.ndarray, size: int) -> int:
  keys = zobrist(size)
  points = np.flatnonzero(board)
  return int(np.bitwise_xor.reduce(keys[points, board[points] + 1])
             if len(points) else 0)


@functools.lru_cache(maxsize=None)
def neighbours(size: int) -> tuple[tuple[int, ...], ...]:
  """Each point's orthogonal neighbours on a size x size board."""
  out = []
  for p in range(size * size):
    r, c = divmod(p, size)
    out.append(tuple(
        (r + dr) * size + c + dc
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))
        if 0 <= r + dr < size and 0 <= c + dc < size))
  return tuple(out)


@functools.lru_cache(maxsize=None)
def neighbour_table(size: int) -> np.ndarray:
  """[size * size, 4] int: each point's neighbours, size * size (one past
  the board: index a value appended to it) where the edge is."""
  table = np.full((size * size, 4), size * size, np.int64)
  for p, near in enumerate(neighbours(size)):
    table[p, :len(near)] = near
  return table


def group(board: np.ndarray, point: int, size: int):
  """(stones, liberties) of the group at `point`: sets of flat points."""
  near = neighbours(size)
  colour = board[point]
  stones, liberties, frontier = {point}, set(), [point]
  while frontier:
    for n in near[frontier.pop()]:
      if board[n] == colour:
        if n not in stones:
          stones.add(n)
          frontier.append(n)
      elif board[n] == EMPTY:
        liberties.add(n)
  return stones, liberties


class Position:
  """A position: the board, whose turn, the ko point, the last boards.

  Immutable: `play` returns a new position.
  """

  __slots__ = ('size', 'board', 'to_play', 'ko', 'n', 'passes', 'history',
               'komi', 'superko', 'hash', 'seen', 'stones', 'peak', '_groups')

  def __init__(self, size: int, *, komi: float = KOMI, board=None,
               to_play: int = BLACK, ko: int = -1, n: int = 0,
               passes: int = 0, history: tuple = (), superko: bool = True,
               seen: frozenset = frozenset(), peak: int | None = None,
               stone_hash_: int | None = None):
    """Args (beyond the board's):
      history: the boards before the last moves, newest first (at most
        HISTORY; a pass repeats one).
      superko: positional superko (module docstring).
      seen: the hashes of the game's earlier arrangements (superko's).
      peak: the most stones any of them had (None: unknown). A move
        that leaves more stones on the board than that repeats none of
        them, so superko need not hash it.
      stone_hash_: the board's hash when the caller has it (play).
    """
    self.size = size
    self.board = (np.zeros(size * size, np.int8) if board is None
                  else np.asarray(board, np.int8).reshape(size * size))
    self.to_play, self.ko, self.n = to_play, ko, n
    self.passes, self.history, self.komi = passes, history, komi
    self.superko, self.seen = superko, seen
    self.hash = (stone_hash(self.board, size) if stone_hash_ is None
                 else stone_hash_)
    self.stones = int(np.count_nonzero(self.board))
    self.peak = max(self.stones, size * size if peak is None and seen
                    else peak or 0)
    self._groups = None

  @classmethod
  def from_rows(cls, rows: list[str], to_play: int = BLACK, **kwargs):
    """A position drawn as text: 'X' black, 'O' white, '.' empty."""
    values = {'X': BLACK, 'O': WHITE, '.': EMPTY}
    board = [values[ch] for row in rows for ch in row.replace(' ', '')]
    return cls(len(rows), board=board, to_play=to_play, **kwargs)

  @property
  def pass_move(self) -> int:
    return self.size * self.size

  def __str__(self):
    chars = {BLACK: 'X', WHITE: 'O', EMPTY: '.'}
    return '\n'.join(''.join(chars[v] for v in row)
                     for row in self.board.reshape(self.size, self.size))

  # -- Rules -------------------------------------------------------------

  def is_suicide(self, point: int) -> bool:
    """Would `to_play` at the empty `point` leave its own group without a
    liberty while capturing nothing?"""
    board, colour = self.board, self.to_play
    for n in neighbours(self.size)[point]:
      if board[n] == EMPTY:
        return False
    for n in neighbours(self.size)[point]:
      _, liberties = group(board, n, self.size)
      if board[n] == colour and liberties != {point}:
        return False  # Joins a group with a liberty elsewhere.
      if board[n] == -colour and liberties == {point}:
        return False  # Captures.
    return True

  def is_legal(self, move: int) -> bool:
    if move == self.pass_move:
      return True
    if not 0 <= move < self.pass_move:
      return False
    if (self.board[move] != EMPTY or move == self.ko
        or self.is_suicide(move)):
      return False
    return not self.superko or not self._repeats(
        self._hash_after(move, self._captures(move)))

  def _captures(self, move: int) -> set:
    """The opponent stones to_play at the empty `move` would take."""
    captured = set()
    for n in neighbours(self.size)[move]:
      if self.board[n] == -self.to_play and n not in captured:
        stones, liberties = group(self.board, n, self.size)
        if liberties == {move}:
          captured |= stones
    return captured

  def _hash_after(self, move: int, captured) -> int:
    """The arrangement's hash after to_play at `move` takes `captured`."""
    keys = zobrist(self.size)
    value = self.hash ^ int(keys[move, self.to_play + 1])
    for p in captured:
      value ^= int(keys[p, -self.to_play + 1])
    return value

  def _repeats(self, new_hash: int) -> bool:
    """Does superko forbid an arrangement of this hash?"""
    return self.superko and (new_hash == self.hash or new_hash in self.seen)

  def groups(self) -> tuple[list, dict]:
    """(label, groups): each point's group key (-1 on empty points) and
    each group by key as (colour, stones, liberties), never changed once
    made (positions share them); `play` derives its position's from these,
    else they are computed once a position."""
    if self._groups is None:
      board, near = self.board.tolist(), neighbours(self.size)
      label, groups = [-1] * len(board), {}
      for start, colour in enumerate(board):
        if not colour or label[start] >= 0:
          continue
        k = start
        label[start] = k
        stones, liberties, frontier = [start], set(), [start]
        while frontier:
          for n in near[frontier.pop()]:
            v = board[n]
            if v == colour and label[n] < 0:
              label[n] = k
              stones.append(n)
              frontier.append(n)
            elif v == EMPTY:
              liberties.add(n)
        groups[k] = (colour, stones, liberties)
      self._groups = (label, groups)
    return self._groups

  def legal_moves(self) -> np.ndarray:
    """[size * size + 1] bool: the points to_play may play, then the pass
    (always legal)."""
    size, colour = self.size, self.to_play
    legal = np.append(self.board == EMPTY, True)
    if self.ko >= 0:
      legal[self.ko] = False
    # Only points whose every neighbour is a stone (or the edge) can be
    # suicide.
    stone = np.append(self.board != EMPTY, True)
    surrounded = stone[neighbour_table(size)].all(1) & legal[:-1]
    check_repeats = self.superko and bool(self.seen)
    if not (surrounded.any() or check_repeats):
      return legal
    board, near = self.board.tolist(), neighbours(size)
    label, groups = self.groups()
    # A move captures only at the last liberty of an opponent group.
    takes = {}
    for c, stones, liberties in groups.values():
      if c == -colour and len(liberties) == 1:
        takes.setdefault(next(iter(liberties)), []).extend(stones)
    for point in np.flatnonzero(surrounded).tolist():
      # Suicide unless it captures or joins a group with another liberty.
      if point not in takes and not any(
          board[n] == colour and len(groups[label[n]][2]) > 1
          for n in near[point]):
        legal[point] = False
    if check_repeats:
      # Only a move leaving at most `peak` stones can repeat an earlier
      # arrangement (the constructor's docstring).
      after = np.full(size * size, self.stones + 1)
      for point, stones in takes.items():
        after[point] -= len(stones)
      for point in np.flatnonzero(legal[:-1] & (after <= self.peak)).tolist():
        if self._repeats(self._hash_after(point, set(takes.get(point, ())))):
          legal[point] = False
    return legal

  def play(self, move: int) -> 'Position':
    """The position after to_play plays `move` (a flat point or the pass).

    Raises:
      IllegalMove: occupied, the ko point, suicide, off the board, or (with
        superko) an earlier arrangement again.
    """
    history = (self.board,) + self.history[:HISTORY - 1]
    seen = self.seen | {self.hash} if self.superko else self.seen
    if move == self.pass_move:
      position = Position(self.size, komi=self.komi, board=self.board,
                          to_play=-self.to_play, n=self.n + 1,
                          passes=self.passes + 1, history=history,
                          superko=self.superko, seen=seen, peak=self.peak,
                          stone_hash_=self.hash)
      position._groups = self._groups  # pylint: disable=protected-access
      return position
    colour = self.to_play
    found = None
    if (0 <= move < self.pass_move and self.board[move] == EMPTY
        and move != self.ko):
      found = self._after(move)
    if found is not None:
      captured, new_groups = found
      new_hash = self._hash_after(move, captured)
    if found is None or self._repeats(new_hash):
      raise IllegalMove(f'{"Black" if colour == BLACK else "White"} '
                        f'at {move} (row {move // self.size}, column '
                        f'{move % self.size}) is illegal:\n{self}')
    board = self.board.copy()
    board[move] = colour
    board[captured] = EMPTY
    ko = -1
    if len(captured) == 1:
      # Simple ko: a lone stone played into the opponent's eye that took
      # one stone may be taken back at once, so that is forbidden.
      _, stones, liberties = new_groups[1][move]
      if len(stones) == 1 and len(liberties) == 1:
        ko = captured[0]
    position = Position(self.size, komi=self.komi, board=board,
                        to_play=-colour, ko=ko, n=self.n + 1, passes=0,
                        history=history, superko=self.superko, seen=seen,
                        peak=self.peak, stone_hash_=new_hash)
    position._groups = new_groups  # pylint: disable=protected-access
    return position

  def _after(self, move: int):
    """(captured points, the groups after) of to_play at the empty `move`,
    from this position's groups (no flood fill); None if suicide."""
    label, groups = self.groups()
    board, near = self.board, neighbours(self.size)
    colour = self.to_play
    empties, own, taken, touched = [], set(), set(), set()
    for n in near[move]:
      v = board[n]
      if v == EMPTY:
        empties.append(n)
      elif v == colour:
        own.add(label[n])
      elif groups[label[n]][2] == {move}:
        taken.add(label[n])
      else:
        touched.add(label[n])
    if not empties and not taken and all(len(groups[k][2]) == 1
                                         for k in own):
      return None  # Suicide.
    label, groups = list(label), dict(groups)
    stones, liberties = [move], set(empties)
    for k in own:
      _, more, free = groups.pop(k)
      stones += more
      liberties |= free
    liberties.discard(move)
    for p in stones:
      label[p] = move
    groups[move] = (colour, stones, liberties)
    for k in touched:
      c, more, free = groups[k]
      groups[k] = (c, more, free - {move})
    captured = []
    for k in taken:
      captured += groups.pop(k)[1]
    copied = {move}
    for p in captured:
      label[p] = -1
    for p in captured:
      # Only to_play's stones border the stones it took.
      for n in near[p]:
        k = label[n]
        if k >= 0:
          if k not in copied:
            c, more, free = groups[k]
            groups[k] = (c, more, set(free))
            copied.add(k)
          groups[k][2].add(p)
    return captured, (label, groups)

  def is_game_over(self) -> bool:
    return self.passes >= 2

  # -- Counting ----------------------------------------------------------

  def liberties(self) -> np.ndarray:
    """[size * size] int: each stone's group's liberties, 0 on empty
    points."""
    label, groups = self.groups()
    return np.array([len(groups[k][2]) if k >= 0 else 0 for k in label],
                    np.int32)

  def area(self) -> tuple[int, int]:
    """(black, white) points: stones plus the empty regions bordered by
    that colour alone (regions touching both, or neither, count for
    nobody)."""
    owner = self.board + self.territory()
    return int((owner == BLACK).sum()), int((owner == WHITE).sum())

  def territory(self) -> np.ndarray:
    """[points] int8: each empty point's owner by area scoring (the colour
    that alone borders its empty region), 0 for the others."""
    board = self.board
    owner = np.zeros(board.shape, np.int8)
    seen = np.zeros_like(board, bool)
    near = neighbours(self.size)
    for start in np.flatnonzero(board == EMPTY):
      if seen[start]:
        continue
      region, borders, frontier = [int(start)], set(), [int(start)]
      seen[start] = True
      while frontier:
        for n in near[frontier.pop()]:
          if board[n] == EMPTY:
            if not seen[n]:
              seen[n] = True
              region.append(n)
              frontier.append(n)
          else:
            borders.add(int(board[n]))
      if len(borders) == 1:
        owner[region] = borders.pop()
    return owner

  def score(self) -> float:
    """Black's area minus White's, minus komi (> 0: Black wins)."""
    black, white = self.area()
    return black - white - self.komi

  def result(self) -> int:
    """1 if Black wins, -1 if White does, 0 a draw (only with an integer
    komi)."""
    return int(np.sign(self.score()))
