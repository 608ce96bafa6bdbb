"""Training runs into MLPerf's submission layout, every run checked first.

  <package>/results/<system>/<benchmark>/result_<i>.txt   the runs' mlperf.log
  <package>/systems/<system>.json                          tools/submission/system.py
  <package>/benchmarks/<benchmark>/implementations/<impl>/ the code (git
      archive of the commit the runs recorded in source.json), the run's
      config.gin and a README with the command

The layout and the run counts are mlperf_logging.package_checker's (the
counts: mlperf_logging.benchmark_meta). Nothing here writes the package:
`read()` and `group()` read and check the runs, `implementation_files()`
gives the code's share;
tools/submission/writer.py writes it whole or not at all;
tools/submission/code.py gives the code.
"""

import contextlib
import dataclasses
import json
import logging
import os
import re
import tempfile
from typing import Iterator

from core import source as source_lib
from tools.launcher import object_store
from tools.submission import code
from tools.submission import system as system_lib
from tools.submission import writer
from training import time_to_accuracy

RUN_FOLDER = re.compile(r'^run_(\d+)(?:_retry(\d+))?$')
MLLOG_PREFIX = time_to_accuracy.MLLOG_PREFIX


@dataclasses.dataclass
class Run:
  """One run folder, as its files say."""
  folder: str
  log: str  # mlperf.log's text.
  keys: dict  # First value of each MLLOG key.
  source: dict | None  # source.json, None when the run has none.
  config: str | None  # config.gin.
  stop_status: str | None = None  # run_stop's metadata status.

  @property
  def benchmark(self) -> str:
    return str(self.keys.get('submission_benchmark'))


def _join(folder: str, name: str) -> str:
  return object_store.join(folder, name)


def expand(paths: list[str]) -> list[str]:
  """Run folders: each path that holds mlperf.log, and in a local folder
  without one the launcher's run_<i> (the last retry of each i: the one
  the launcher scored), in order of i.

  Raises:
    ValueError: a path with neither.
  """
  runs = []
  for path in paths:
    if object_store.read_text(_join(path, 'mlperf.log')) is not None:
      runs.append(path)
      continue
    latest = {}
    if os.path.isdir(path):
      for name in os.listdir(path):
        m = RUN_FOLDER.match(name)
        if m and os.path.exists(os.path.join(path, name, 'mlperf.log')):
          i, retry = int(m.group(1)), int(m.group(2) or 0)
          if retry >= latest.get(i, (-1, ''))[0]:
            latest[i] = (retry, os.path.join(path, name))
    if not latest:
      raise ValueError(f'{path} has no mlperf.log and no run_<i> folders '
                       'with one: give run folders (model_dirs).')
    runs += [latest[i][1] for i in sorted(latest)]
  return runs


def read(folder: str) -> Run:
  log = object_store.read_text(_join(folder, 'mlperf.log'))
  keys, stop_status = {}, None
  for line in (log or '').splitlines():
    if MLLOG_PREFIX in line:
      try:
        entry = json.loads(line.split(MLLOG_PREFIX, 1)[1])
      except json.JSONDecodeError:
        raise ValueError(f'{folder}/mlperf.log: a line is not JSON: '
                         f'{line[:80]!r}.') from None
      keys.setdefault(entry.get('key'), entry.get('value'))
      if entry.get('key') == 'run_stop':
        stop_status = entry.get('metadata', {}).get('status')
  if not keys:
    raise ValueError(f'{folder}/mlperf.log holds no MLPerf log lines.')
  source = object_store.read_text(_join(folder, source_lib.SOURCE_FILE))
  try:
    source = json.loads(source) if source else None
  except json.JSONDecodeError:
    raise ValueError(f'{folder}/{source_lib.SOURCE_FILE} is not JSON: '
                     'a damaged record of the run\'s code.') from None
  return Run(folder=folder, log=log, keys=keys, source=source,
             config=object_store.read_text(_join(folder, 'config.gin')),
             stop_status=stop_status)


@contextlib.contextmanager
def checker_messages(level=logging.WARNING) -> Iterator[list]:
  """Collects what mlperf_logging's checkers log (they report through the
  root logger) instead of letting it reach the console: the tool prints
  one line of its own."""
  said = []

  class Collect(logging.Handler):
    def emit(self, record):
      said.append(record.getMessage().strip())

  root = logging.getLogger()
  saved = root.handlers[:], root.level
  root.handlers = [Collect(level)]
  root.setLevel(level)
  try:
    yield said
  finally:
    root.handlers, _ = saved
    root.setLevel(saved[1])


def check_log(run: Run, ruleset: str, scratch: str) -> str | None:
  """None if the compliance checker passes the log, else its first
  complaint."""
  from mlperf_logging.compliance_checker import mlp_compliance
  path = os.path.join(scratch, 'checked.log')
  with open(path, 'w') as f:
    f.write(run.log)
  with checker_messages() as said:
    checker = mlp_compliance.make_checker(usage='training', ruleset=ruleset,
                                          quiet=True, werror=False)
    valid = mlp_compliance.main(path, f'training_{ruleset}/common.yaml',
                                checker)[0]
  if valid:
    return None
  said = [l for l in said if l and 'Logging output' not in l]
  return said[0] if said else 'the compliance checker failed it'


def check_package(folder: str, ruleset: str) -> str | None:
  """None if mlperf_logging's package checker (and, from ruleset 1.0, its
  system description checker) passes the package, else a line saying what
  failed. The checker's own functions, as its command line calls them
  (that command prints its verdict and returns nothing)."""
  from mlperf_logging.package_checker import package_checker
  with checker_messages(logging.ERROR) as errors:
    systems = (int(ruleset.split('.')[0]) < 1 or
               package_checker.check_systems(folder, 'training', ruleset))
    results = package_checker.check_training_result_files(
        folder, 'training', ruleset, quiet=True, werror=False,
        rcp_bypass=False, rcp_bert_train_samples=False,
        seed_checker_bypass=False)
  if systems and results:
    return None
  return ('mlperf_logging\'s package checker refused the package '
          f'(ruleset {ruleset}): {"; ".join(errors[:3]) or "see its log"}. '
          'Nothing was written.')


@dataclasses.dataclass
class Benchmark:
  """One benchmark's share of the package."""
  name: str
  runs: list
  commit: str
  implementation: str


def check_ruleset(ruleset: str) -> None:
  from mlperf_logging.compliance_checker import mlp_compliance
  known = sorted(mlp_compliance.rule_choices(),
                 key=lambda r: tuple(map(int, r.split('.'))))
  if ruleset not in known:
    raise ValueError(f'--ruleset={ruleset}: mlperf_logging knows '
                     f'{", ".join(known)}.')


def required_runs(benchmark: str, ruleset: str) -> int:
  from mlperf_logging import benchmark_meta
  allowed = benchmark_meta.get_allowed_benchmarks('training', ruleset)
  if benchmark not in allowed:
    raise ValueError(f'MLPerf training {ruleset} has no benchmark '
                     f'{benchmark!r} (it has {", ".join(sorted(allowed))}).')
  from tools import score as score_lib
  return score_lib.required_runs(benchmark)


def group(runs: list[Run], *, ruleset: str, scratch: str,
          allow_changed: bool, implementation: str) -> list[Benchmark]:
  """The runs by benchmark, each checked: its log passes the ruleset's
  checker and ends in success, it records its code's commit (unchanged
  unless `allow_changed`), the benchmark has exactly the ruleset's number
  of runs, one commit, and (closed division) distinct seeds.

  Raises:
    ValueError: the first rule a run breaks, naming the run and the rule.
  """
  by_name = {}
  for run in runs:
    by_name.setdefault(run.benchmark, []).append(run)
  out = []
  for name, those in by_name.items():
    need = required_runs(name, ruleset)
    if len(those) != need:
      mix = (' The runs given mix benchmarks: ' + ', '.join(
          f'{b} {len(r)}' + (f' ({", ".join(x.folder for x in r)})'
                             if len(r) <= 2 else '')
          for b, r in by_name.items()) + '.' if len(by_name) > 1 else '')
      raise ValueError(
          f'{name}: {len(those)} run(s) given; MLPerf training {ruleset} '
          f'takes exactly {need} a benchmark (mlperf_logging.benchmark_meta)'
          f'.{mix}')
    for run in those:
      complaint = check_log(run, ruleset, scratch)
      if complaint:
        raise ValueError(f'{run.folder}/mlperf.log fails the {ruleset} '
                         f'compliance checker: {complaint}')
      status = run.stop_status
      if status != 'success':
        raise ValueError(f'{run.folder}/mlperf.log: run_stop status is '
                         f'{status!r}, not success: a run that missed the '
                         'target is not a result.')
      if not run.source or not run.source.get('commit'):
        raise ValueError(
            f'{run.folder} has no {source_lib.SOURCE_FILE} naming its '
            'commit (runs of this suite write it at start): the package '
            'needs the code the run used.')
      if run.source.get('changed') and not allow_changed:
        raise ValueError(
            f'{run.folder} ran with files changed from commit '
            f'{run.source["commit"][:12]} ({", ".join(run.source["changed"][:3])}'
            f'{", ..." if len(run.source["changed"]) > 3 else ""}): the '
            'package would not hold the code it ran. Rerun from a clean '
            'checkout, or pass --allow_changed_source (the README says so).')
    commits = sorted({r.source['commit'] for r in those})
    if len(commits) > 1:
      raise ValueError(f'{name}: the runs used {len(commits)} commits '
                       f'({", ".join(c[:12] for c in commits)}): one '
                       'implementation a benchmark, one commit.')
    division = those[0].keys.get('submission_division')
    seeds = [r.keys.get('seed') for r in those]
    if division == 'closed' and len(set(seeds)) != len(seeds):
      raise ValueError(f'{name}: closed-division runs need distinct seeds; '
                       f'the logs have {seeds}.')
    out.append(Benchmark(name=name, runs=those, commit=commits[0],
                         implementation=implementation.format(
                             benchmark=name,
                             platform=those[0].keys.get(
                                 'submission_platform', 'cpu'))))
  return out


def agreed(runs: list[Run], key: str) -> str:
  """The value every run logged for `key`.

  Raises:
    ValueError: runs that disagree, or none logged it.
  """
  values = {str(r.keys.get(key)) for r in runs}
  if len(values) != 1 or 'None' in values:
    raise ValueError(f'the runs logged {key} as {sorted(values)}: one '
                     'package holds one system\'s runs (one submitter, '
                     'division, status and platform).')
  return values.pop()


def implementation_files(bench: Benchmark, tree: bytes) -> dict:
  """Relative path -> bytes of the implementation folder."""
  files = code.files(tree, '.')
  files = {k[2:]: v for k, v in files.items()}
  run = bench.runs[0]
  if run.config:
    files['config.gin'] = run.config.encode()
  changed = sorted({f for r in bench.runs for f in
                    (r.source.get('changed') or [])})
  note = (f'\nThe runs had these files changed from the commit (packaged '
          f'with --allow_changed_source): {", ".join(changed)}.\n'
          if changed else '')
  files['README.md'] = (
      f'# {bench.name}: {bench.implementation}\n\n'
      f'This suite at commit {bench.commit} (`git archive`). Each run:\n\n'
      '    python train.py --gin_file=config.gin --model_dir=RUN_DIR '
      '--gin.SEED=<seed>\n\n'
      'config.gin is the first run\'s full configuration as train.py wrote '
      'it; the runs differ only in their seeds '
      f'({", ".join(str(r.keys.get("seed")) for r in bench.runs)}).\n'
      f'{note}').encode()
  return files


def main(run_paths: list[str], flags_) -> int:
  """tools.package training RUN...: see tools/package.py."""
  from tools import score as score_lib
  writer.check_destination(flags_.output)
  check_ruleset(flags_.ruleset)
  given = (system_lib.read_file(flags_.system_desc) if flags_.system_desc
           else {})
  runs = [read(folder) for folder in expand(run_paths)]
  platform = agreed(runs, 'submission_platform')
  logged = {'submitter': agreed(runs, 'submission_org'),
            'division': agreed(runs, 'submission_division'),
            'status': system_lib.STATUS.get(
                agreed(runs, 'submission_status'), '')}
  system = flags_.system or platform
  flagged = {'submitter': flags_.submitter,
             'system_name': flags_.system_name or system}
  if given.get('division') and given['division'] != logged['division']:
    raise ValueError(f'--system_desc={flags_.system_desc} says division '
                     f'{given["division"]!r}; the runs logged '
                     f'{logged["division"]!r}.')
  desc = system_lib.build(system_lib.from_platform(platform), logged, given,
                          flagged)
  with tempfile.TemporaryDirectory() as scratch:
    benchmarks = group(
        runs, ruleset=flags_.ruleset, scratch=scratch,
        allow_changed=flags_.allow_changed_source,
        implementation=flags_.implementation)
    trees = {c: code.archive(c) for c in {b.commit for b in benchmarks}}
  files = {f'systems/{system}.json': json.dumps(desc, indent=2) + '\n'}
  for bench in benchmarks:
    for i, run in enumerate(bench.runs):
      files[f'results/{system}/{bench.name}/result_{i}.txt'] = run.log
    impl = (f'benchmarks/{bench.name}/implementations/'
            f'{bench.implementation}')
    for rel, content in implementation_files(
        bench, trees[bench.commit]).items():
      files[f'{impl}/{rel}'] = content
  with writer.staged(flags_.output) as stage:
    writer.write_files(stage, files)
    verdict = check_package(stage, flags_.ruleset)
    if verdict:
      raise ValueError(verdict)
    scores = [score_lib.score_folder(
        os.path.join(stage, 'results', system, b.name),
        ruleset=flags_.ruleset, plot=False) for b in benchmarks]
  print(f'package: {flags_.output} ({len(runs)} runs, '
        f'{", ".join(b.name for b in benchmarks)}; system {system}, '
        f'{desc["division"]} division)')
  print(f'mlperf_logging package checker, training {flags_.ruleset}: '
        'SUCCESS')
  for s in scores:
    score = f'{s.score:.4f} min' if s.score is not None else 'none'
    print(f'score {s.benchmark}: {score} (olympic mean of {len(s.runs)} '
          'runs, mlperf_logging\'s result summarizer)')
  return 0
