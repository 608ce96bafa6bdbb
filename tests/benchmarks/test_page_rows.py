"""A benchmark ends with its rows for docs/benchmarks.md: the page's six
columns, today's date and the command line that measured them, so a row
pasted over the page's says how to measure it again."""

import datetime
import os
import subprocess
import sys

import pytest

from tests import helpers


# Slow: it starts the benchmark and its pool's processes.
@pytest.mark.slow
def test_a_benchmark_prints_its_rows_in_the_page_form():
  done = subprocess.run(
      [sys.executable, '-m', 'benchmarks.bleu_pool', '--pairs=40',
       '--rounds=1'], cwd=helpers.ROOT, capture_output=True, text=True,
      timeout=helpers.HANG_SECONDS, check=False,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT))
  assert done.returncode == 0, done.stderr[-2000:]
  lines = done.stdout.splitlines()
  start = lines.index('rows for docs/benchmarks.md (measure | ours | peer | '
                      'ratio | date | command):')
  rows = lines[start + 1:]
  assert len(rows) == 2  # 2 and 4 processes against none.
  today = datetime.date.today().isoformat()
  for row, processes in zip(rows, (2, 4)):
    cells = [c.strip() for c in row.strip('|').split(' | ')]
    assert len(cells) == 6, row
    assert cells[0] == f'BLEU of 40 pairs, {processes} processes'
    assert cells[1].endswith(' s') and cells[2].startswith('in this process')
    assert cells[3].endswith('x, bit for bit')
    assert cells[4] == today
    assert cells[5] == ('`python -m benchmarks.bleu_pool --pairs=40 '
                        '--rounds=1`')
