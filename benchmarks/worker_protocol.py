"""The worker side of benchmarks.common.StepWorker, for workers that run in
a peer's own venv (standard library only): print `ready`, then time each
`run` line on stdin and print the seconds; any other line or EOF ends it.

Workers run as scripts, so they import this as a sibling module
(`import worker_protocol`: the script's folder is on sys.path).
"""

import sys
import time
from typing import Callable


def serve(run_steps: Callable[[], None]) -> None:
  """Answers `run` lines with the seconds `run_steps()` took."""
  print('ready', flush=True)
  for line in sys.stdin:
    if line.strip() != 'run':
      break
    start = time.perf_counter()
    run_steps()
    print(f'{time.perf_counter() - start:.6f}', flush=True)
