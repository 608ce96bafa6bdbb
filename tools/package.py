"""Runs into an MLPerf submission package, checked by MLCommons' checkers.

  python -m tools.package training RUN_DIR... --output=PACKAGE \\
      [--system_desc=system.json] [--system=NAME] [--ruleset=0.7.0]
  python -m tools.package inference SUBMISSION_RUNS --output=PACKAGE \\
      [--system_desc=system.json] [--system=NAME] [--submitter=NAME]

Training: RUN_DIRs are model_dirs (local or gs://) or local folders of the
launcher's run_<i> folders, of one or more benchmarks. Each run's log must
pass the ruleset's compliance checker and end in success, and record the
commit it ran (source.json); each benchmark needs exactly the ruleset's
number of runs. The package (docs/submitting.md):

  results/<system>/<benchmark>/result_<i>.txt
  systems/<system>.json
  benchmarks/<benchmark>/implementations/<impl>/   (git archive + config.gin)

is checked with mlperf_logging's package checker (and its system
description checker) before it is moved into place, and each benchmark's
score printed (mlperf_logging's result summarizer):
tools/submission/training.py.

Inference: the folder `inference.run --scenario=submission --settings=v0.5`
wrote (every scenario's accuracy, performance and audit runs), into MLPerf
Inference v0.5's layout, checked against v0.5's rules
(tools/submission/inference.py, inference_v05_rules.py). Its division and
submitter come from --system_desc or --submitter (default: open,
reference).

Bad input (a run without a log, a log the checker refuses, too few runs,
runs of two systems, a missing system field) is one line and exit 2; the
package is then not written at all.
"""

import logging

from absl import app
from absl import flags

from core import entry_point

FLAGS = flags.FLAGS
KINDS = ('training', 'inference')


def define_flags():
  flags.DEFINE_string('output', None, 'The package: a new local folder, or '
                      'a gs://.../NAME.tar.gz object.')
  flags.DEFINE_string('system_desc', '', 'A JSON file of system fields '
                      '(docs/submitting.md lists them); it overrides what '
                      'the runs and this machine say.')
  flags.DEFINE_string('system', '', 'The system\'s folder and file name '
                      '(default: the runs\' platform, e.g. cpu or '
                      'tpu-v3-32).')
  flags.DEFINE_string('system_name', '', 'The system_name field (default: '
                      'the system).')
  flags.DEFINE_string('submitter', '', 'The submitter (default: the runs\' '
                      'submission_org).')
  flags.DEFINE_string('ruleset', '0.7.0', 'Training: the MLPerf ruleset the '
                      'logs and the package are checked against.')
  flags.DEFINE_string('implementation', '{benchmark}-tf-{platform}',
                      'The implementation folder\'s name ({platform}: the '
                      'runs\' platform, inference: the system).')
  flags.DEFINE_bool('allow_changed_source', False, 'Package runs whose '
                    'checkout had changed files (the README lists them); '
                    'without it such runs are refused.')
  flags.mark_flag_as_required('output')


def main(argv):
  if len(argv) < 2 or argv[1] not in KINDS:
    raise app.UsageError(f'Say what to package first: one of '
                         f'{", ".join(KINDS)}.')
  if len(argv) < 3:
    raise app.UsageError(f'Give the {argv[1]} run folders to package.')
  logging.getLogger().setLevel(logging.ERROR)
  if argv[1] == 'training':
    from tools.submission import training
    return training.main(argv[2:], FLAGS)
  from tools.submission import inference
  return inference.main(argv[2:], FLAGS)


if __name__ == '__main__':
  entry_point.parse_flags_early(define_flags)
  app.run(entry_point.tool_main(main))
