"""Which code a process runs: the suite's commit, and whether its files
differ from it.

A run records this as `<model_dir>/source.json` (train.py), so that
tools.package can put the code a run used into a submission package (`git
archive` of the commit). A checkout answers through git; a copy without
.git (the launcher's `git archive` on a TPU VM) through the COMMIT file the
launcher writes into it (tools/launcher/job.py).

No TensorFlow.
"""

import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_FILE = 'source.json'  # In a model_dir.
COMMIT_FILE = 'COMMIT'  # In a copy of the suite without .git.
CODE_SUFFIXES = ('.py', '.gin')


def _git(root: str, *args: str) -> str | None:
  try:
    done = subprocess.run(['git', '-C', root, *args], capture_output=True,
                          text=True, timeout=60, check=False)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return done.stdout if done.returncode == 0 else None


def _changed(porcelain: str) -> list[str]:
  """Tracked files that differ, and untracked code (.py, .gin) a run could
  have imported: `git status --porcelain` lines ("XY path")."""
  out = []
  for line in porcelain.splitlines():
    path = line[3:].split(' -> ')[-1]
    if line.startswith('??') and not path.endswith(CODE_SUFFIXES):
      continue
    out.append(path)
  return sorted(out)


def describe(root: str = ROOT) -> dict:
  """{'commit': 40 hex digits or None, 'changed': the files that differ
  from it (_changed; None when unknown), 'from': 'git', 'COMMIT file' or
  None}."""
  if os.path.exists(os.path.join(root, '.git')):
    head = _git(root, 'rev-parse', 'HEAD')
    status = _git(root, 'status', '--porcelain', '--untracked-files=all')
    if head:
      changed = None if status is None else _changed(status)
      return {'commit': head.strip(), 'changed': changed, 'from': 'git'}
  path = os.path.join(root, COMMIT_FILE)
  if os.path.exists(path):
    with open(path) as f:
      return {'commit': f.read().strip(), 'changed': [],
              'from': COMMIT_FILE + ' file'}
  return {'commit': None, 'changed': None, 'from': None}


def record_text(root: str = ROOT) -> str:
  return json.dumps(describe(root), indent=1) + '\n'
