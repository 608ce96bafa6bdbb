"""The quickstart's fixed opponent: plain UCT with random rollouts.

MLPerf's MiniGo target is a strong 19x19 network that cannot be trained on
a laptop. The quickstart plays against this instead: a search with no
knowledge of Go beyond the rules, whose strength is set by one number
(`rollouts` a move), so that a network trained for minutes can pass it
and a random one cannot.

- The tree: UCB1 (Kocsis and Szepesvari 2006) over the real rules
  (models/minigo/go.py, positional superko), one new child a rollout, the most
  visited move played. Rewards are wins (1) and losses (0) from the view
  of the player who moved into the node.
- The rollouts: uniformly random moves that do not fill the mover's own
  one-point eyes (every orthogonal neighbour its own stone: the classic
  "don't fill your eyes" of random Go players and MiniGo's `is_eyeish`),
  simple ko, no suicide, until neither side has such a move or 3 x size^2
  moves were played; scored by area with the game's komi (an empty point
  counts for a colour when every neighbour is that colour's stone, which
  at a rollout's end is what the empty points are).

Pure Python on lists (a rollout on 9x9 takes ~1 ms; numbers in
docs/minigo.md). No TensorFlow: runs in host processes.
"""

import math
import random

from models.minigo import go


def rollout(board: list, to_play: int, ko: int, size: int, komi: float,
            rng: random.Random) -> int:
  """Plays random moves from a position to the end; returns the winner
  (go.BLACK or go.WHITE). `board` (a list of size * size colours) is
  changed in place."""
  near = go.neighbours(size)
  empties = [p for p in range(size * size) if board[p] == 0]
  passes, moves, limit = 0, 0, 3 * size * size
  while passes < 2 and moves < limit:
    k, played = len(empties), False
    while k:
      i = int(rng.random() * k)
      p = empties[i]
      captured = _try(board, p, to_play, ko, near)
      if captured is not None:
        empties[i] = empties[-1]
        empties.pop()
        empties.extend(captured)
        ko = (captured[0] if len(captured) == 1 and
              _single_in_atari(board, p, near) else -1)
        played = True
        break
      empties[i], empties[k - 1] = empties[k - 1], empties[i]
      k -= 1
    passes = 0 if played else passes + 1
    if not played:
      ko = -1
    moves += 1
    to_play = -to_play
  return go.BLACK if _area_score(board, near) - komi > 0 else go.WHITE


def _try(board, p, colour, ko, near):
  """Plays `colour` at empty `p` if legal and not its own eye: returns the
  stones it captured (a list), or None (board untouched) if it may not."""
  if p == ko:
    return None
  own_eye, has_liberty = True, False
  for n in near[p]:
    v = board[n]
    if v != colour:
      own_eye = False
    if v == 0:
      has_liberty = True
  if own_eye:
    return None
  board[p] = colour
  captured = []
  for n in near[p]:
    if board[n] == -colour and n not in captured:
      for m in near[n]:  # Most stones touch an empty point: alive.
        if board[m] == 0:
          break
      else:
        captured.extend(_dead_group(board, n, near))
  if captured:
    for s in captured:
      board[s] = 0
    return captured
  if has_liberty or not _dead_group(board, p, near):
    return captured
  board[p] = 0  # Suicide.
  return None


def _dead_group(board, point, near):
  """The group at `point` if it has no liberty, else an empty list."""
  colour = board[point]
  stones, frontier = [point], [point]
  seen = {point}
  while frontier:
    for n in near[frontier.pop()]:
      v = board[n]
      if v == 0:
        return []
      if v == colour and n not in seen:
        seen.add(n)
        stones.append(n)
        frontier.append(n)
  return stones


def _single_in_atari(board, p, near) -> bool:
  """Is the stone at `p` alone (no friendly neighbour) with one liberty?"""
  colour, liberties = board[p], 0
  for n in near[p]:
    if board[n] == colour:
      return False
    if board[n] == 0:
      liberties += 1
  return liberties == 1


def _area_score(board, near) -> int:
  """Black's area minus White's: stones, and empty points whose every
  neighbour is one colour."""
  score = 0
  for p, v in enumerate(board):
    if v:
      score += v
    else:
      first = board[near[p][0]]
      if first and all(board[n] == first for n in near[p]):
        score += first
  return score


class _Node:
  __slots__ = ('position', 'parent', 'move', 'children', 'untried', 'wins',
               'visits')

  def __init__(self, position: go.Position, parent=None, move=-1,
               rng: random.Random | None = None):
    self.position, self.parent, self.move = position, parent, move
    self.children = []
    if position.is_game_over():
      self.untried = []
    else:
      self.untried = [int(m) for m in position.legal_moves().nonzero()[0]]
      rng.shuffle(self.untried)
    self.wins, self.visits = 0.0, 0


class UctPlayer:
  """Chooses moves by UCT with `rollouts` random rollouts a move."""

  def __init__(self, rollouts: int, *, exploration: float = 1.0,
               seed: int = 0):
    self.rollouts, self.exploration = rollouts, exploration
    self.rng = random.Random(seed)

  def select_move(self, position: go.Position) -> int:
    root = _Node(position, rng=self.rng)
    for _ in range(self.rollouts):
      node = root
      while not node.untried and node.children:
        node = self._best_child(node)
      if node.untried:
        move = node.untried.pop()
        child = _Node(node.position.play(move), node, move, self.rng)
        node.children.append(child)
        node = child
      winner = self._playout(node.position)
      while node is not None:
        node.visits += 1
        # The player who moved into `node` is the one not to play there.
        if winner == -node.position.to_play:
          node.wins += 1
        node = node.parent
    return max(root.children, key=lambda c: c.visits).move

  def _best_child(self, node: _Node) -> _Node:
    log_n = math.log(node.visits)
    c = self.exploration
    return max(node.children, key=lambda ch: ch.wins / ch.visits + c *
               math.sqrt(log_n / ch.visits))

  def _playout(self, position: go.Position) -> int:
    if position.is_game_over():
      return go.BLACK if position.score() > 0 else go.WHITE
    return rollout(position.board.tolist(), position.to_play, position.ko,
                   position.size, position.komi, self.rng)
