"""MiniGo priced from measured rates, not fitted.

MiniGo's time to train is self-play's: each generation plays its games with
the last model, then trains on them (training/generations.py), and the run
ends at the generation that wins its match. The time-to-train model's step
arithmetic does not apply (configs.read refuses it), so a generation is
priced from what the suite measures:

  search   = positions / (the search's positions a second a core x the
             cores a host gives it x the slice's hosts)
             (benchmarks/minigo_pod_selfplay.py measures the rate on the
             forest at Google's 19x19 flags; a v4 host's cores are not
             published: an assumption, `host_cores`)
  network  = positions x leaves a position x the network's FLOPs a leaf
             / (the slice's chips x peak)       (a bound: no utilisation)
  training = STEPS_PER_GENERATION x GLOBAL_BATCH_SIZE x 3 x the network's
             FLOPs a position / (chips x peak)  (a bound)
  a generation = their sum (ours plays, then trains: training waits for
             self-play, as the loop's order says)

beside what Google's v0.7 run on a v4-128 implies: its olympic mean over
its generations, each of the games its log records (40,426, not MLPerf's
least 8,192). Nothing here is fitted to Google's time; the output says so.
"""

import dataclasses
import json
import os

from tools.predictor import cost as cost_lib

RATES_PATH = os.path.join(cost_lib.ROOT, 'tools', 'predictor', 'data',
                          'minigo_rates.json')
# Google's v0.7 MiniGo on tpu-v4-128 (results/tpu-v4-128-TF/minigo, 10
# runs): olympic mean 150.947 minutes; generations 55-64 reached the
# target (about 60); 40,426 self-play games a generation logged.
GOOGLE_SYSTEM, GOOGLE_ACCELERATOR = 'tpu-v4-128-TF', 'v4-128'
GOOGLE_MINUTES, GOOGLE_GENERATIONS, GOOGLE_GAMES = 150.947, 60, 40426
# Assumptions the logs and Google's pages leave open.
MOVES_A_GAME = 250  # A 19x19 game's moves: the run does not log them.
HOST_CORES = 120  # Cores a v4 host gives the search: no page says.
RATE_KEYS = ('search_positions_a_second_a_core', 'leaves_a_position',
             'readouts', 'command', 'machine', 'date')
MACROS = ('BOARD_SIZE', 'TRUNK_LAYERS', 'CONV_WIDTH', 'FC_WIDTH',
          'GAMES_PER_GENERATION', 'STEPS_PER_GENERATION',
          'GLOBAL_BATCH_SIZE', 'NUM_READOUTS', 'ACCELERATOR')


def network_flops(size: int, blocks: int, width: int, planes: int = 13,
                  fc: int = 64) -> float:
  """FLOPs (2 x multiply-adds) of one DualNet evaluation: the input
  convolution, `blocks` residual blocks of two 3x3 convolutions, the 1x1
  policy (2) and value (1) heads, the policy's and value's dense layers.
  A 3x3 'same' convolution counts the taps inside the board only, (3 size
  - 2)^2 a pair of channels, as XLA's count does (tests hold the two
  within 5%)."""
  points = size * size
  conv = 2 * (3 * size - 2) ** 2 * width
  flops = conv * planes + 2 * blocks * conv * width
  flops += 2 * points * width * (2 + 1)
  flops += 2 * (2 * points * (points + 1) + points * fc + fc)
  return float(flops)


def load_rates(path: str = RATES_PATH) -> dict:
  """The measured self-play rates (benchmarks/minigo_pod_selfplay.py
  --store writes them).

  Raises:
    FileNotFoundError, ValueError: naming the file and the command that
      measures them.
  """
  name = os.path.relpath(path, cost_lib.ROOT)
  fix = ('measure the self-play rates (python -m '
         'benchmarks.minigo_pod_selfplay --seconds=180 --store)')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{name} is missing: {fix}.')
  try:
    with open(path) as f:
      rates = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f'{name} is not JSON ({e}): {fix}.') from None
  missing = [k for k in RATE_KEYS if k not in rates] if isinstance(
      rates, dict) else list(RATE_KEYS)
  if missing:
    raise ValueError(f'{name} lacks {", ".join(missing)}: {fix}.')
  return rates


def store_rates(rates: dict, path: str = RATES_PATH) -> None:
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(rates, f, indent=1, sort_keys=True)
    f.write('\n')
  os.replace(tmp, path)


@dataclasses.dataclass(frozen=True)
class Generation:
  """One generation of a MiniGo config on a slice, in seconds."""
  accelerator: str
  chips: int
  hosts: int
  games: int
  positions: int
  search: float
  network: float
  training: float
  host_cores: int

  @property
  def seconds(self) -> float:
    return self.search + self.network + self.training


def generation(macros: dict, accelerator: str, rates: dict, *,
               games: int | None = None,
               host_cores: int = HOST_CORES,
               moves_a_game: int = MOVES_A_GAME) -> Generation:
  """A generation of the config whose gin macros are `macros` on
  `accelerator` ('v4-128'), from the measured `rates`."""
  from tools.predictor import model  # pylint: disable=import-outside-toplevel
  machine = model.machine(accelerator)
  games = games or macros['GAMES_PER_GENERATION']
  positions = games * moves_a_game
  flops = network_flops(macros['BOARD_SIZE'], macros['TRUNK_LAYERS'],
                        macros['CONV_WIDTH'], fc=macros['FC_WIDTH'])
  peak = machine.chips * machine.chip.peak_flops
  return Generation(
      accelerator=accelerator, chips=machine.chips, hosts=machine.hosts,
      games=games, positions=positions,
      search=positions / (rates['search_positions_a_second_a_core'] *
                          host_cores * machine.hosts),
      network=positions * rates['leaves_a_position'] * flops / peak,
      training=(macros['STEPS_PER_GENERATION'] *
                macros['GLOBAL_BATCH_SIZE'] * 3 * flops / peak),
      host_cores=host_cores)


def google_generation_seconds() -> float:
  """A generation of Google's v4-128 run: its olympic mean over its
  generations."""
  return GOOGLE_MINUTES * 60 / GOOGLE_GENERATIONS


def describe(config: str, macros: dict, accelerator: str,
             rates: dict) -> str:
  """What `python -m tools.predict --gin_file=<a MiniGo file>` prints."""
  g = generation(macros, accelerator, rates)
  google = google_generation_seconds()
  theirs = generation(macros, GOOGLE_ACCELERATOR, rates, games=GOOGLE_GAMES)
  lines = [
      f'{config} on {accelerator}: {g.chips} chips, {g.hosts} hosts; built '
      'from measured rates, not fitted',
      f'  a generation   {g.games:,} games x {MOVES_A_GAME} moves (assumed: '
      f'the logs give no game length) = {g.positions:,} positions',
      f'  search         {_minutes(g.search)} on {g.hosts} hosts x '
      f'{g.host_cores} cores (assumed: no page gives a v4 host\'s) at '
      f'{rates["search_positions_a_second_a_core"]:.2f} positions a second '
      'a core (measured)',
      f'  network        {_minutes(g.network)} on {g.chips} chips at peak '
      f'({rates["leaves_a_position"]:.0f} leaves a position, measured; a '
      'bound)',
      f'  training       {_minutes(g.training)} '
      f'({macros["STEPS_PER_GENERATION"]} steps of '
      f'{macros["GLOBAL_BATCH_SIZE"]:,} at peak: a bound)',
      f'  generation     {_minutes(g.seconds)}',
      f'  Google         {GOOGLE_MINUTES:.1f} min on a v4-128 over about '
      f'{GOOGLE_GENERATIONS} generations of {GOOGLE_GAMES:,} games: '
      f'{_minutes(google)} a generation, with their C++ search; ours at '
      f'their games on a v4-128: {_minutes(theirs.seconds)} '
      f'({theirs.seconds / google:.1f}x theirs)',
      f'  measured       {rates["command"]} on {rates["machine"]}, '
      f'{rates["date"]}',
  ]
  if macros['NUM_READOUTS'] != rates['readouts']:
    lines.append(f'  warning        the rates were measured at '
                 f'{rates["readouts"]} readouts; this config searches '
                 f'{macros["NUM_READOUTS"]}')
  return '\n'.join(lines)


def compare_line(macros: dict, rates: dict) -> str:
  """`--compare`'s MiniGo line: Google's v4-128 folder against a
  generation built from measured rates (not fitted, not out of sample:
  nothing of Google's is used but its games a generation)."""
  google = google_generation_seconds()
  ours = generation(macros, GOOGLE_ACCELERATOR, rates, games=GOOGLE_GAMES)
  return (f'MiniGo ({GOOGLE_SYSTEM}, built from measured rates, not '
          f'fitted): Google {GOOGLE_MINUTES:.2f} min, about '
          f'{_minutes(google)} a generation of {GOOGLE_GAMES:,} games; ours '
          f'{_minutes(ours.seconds)} a generation (search '
          f'{_minutes(ours.search)} at '
          f'{rates["search_positions_a_second_a_core"]:.2f} positions a '
          f'second a core on {HOST_CORES} cores a host, the network and '
          f'training at peak {_minutes(ours.network + ours.training)}), '
          f'{ours.seconds / google:.1f}x theirs.')


def _minutes(seconds: float) -> str:
  return f'{seconds:.1f} s' if seconds < 120 else f'{seconds / 60:.1f} min'
