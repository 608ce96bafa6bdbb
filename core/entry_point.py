"""The contract of every command-line entry point (train.py,
inference/run.py, the tools, the benchmarks): flag errors answered before
TensorFlow loads, and bad input as one `error:` line with exit 2
(core/exit_codes.py) instead of a traceback."""

import re
import sys

from core import error_text
from core import exit_codes
from core import startup


def parse_flags_early(define_flags, argv=None) -> None:
  """For an entry point run as a program, before its heavy imports: defines
  its flags and parses the command line, so that `--help` and a flag error
  (unknown, missing, ill-typed) answer at once instead of after
  TensorFlow's 10 s import. A flag error is the suite's bad input: one
  `error:` line and exit 2 (absl's own would be two lines and exit 1). The
  flags are then unparsed: `app.run` parses them again as usual."""
  from absl import app  # pylint: disable=import-outside-toplevel
  from absl import flags  # pylint: disable=import-outside-toplevel
  define_flags()
  app.define_help_flags()
  try:
    flags.FLAGS(list(sys.argv if argv is None else argv))
  except flags.Error as e:
    message = ' '.join(str(e).split())
    message = re.sub(r'^flag --(\w+)=None: Flag --\1 must have a value other '
                     r'than None\.$', r'--\1 is required', message)
    print(f'error: {message} (--help lists the flags).', file=sys.stderr,
          flush=True)
    sys.exit(exit_codes.USER_ERROR)
  flags.FLAGS.unparse_flags()


# Bad input a tool's main may raise: one line, exit 2.
INPUT_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError,
                IsADirectoryError, PermissionError)


def _input_error(error: BaseException) -> bool:
  if isinstance(error, INPUT_ERRORS):
    return True
  app = sys.modules.get('absl.app')  # A tool's own "bad command line".
  if app and isinstance(error, app.UsageError):
    return True
  tf = sys.modules.get('tensorflow')  # Its errors, if a tool loaded it.
  return bool(tf) and isinstance(error, (
      tf.errors.NotFoundError, tf.errors.DataLossError,
      tf.errors.PermissionDeniedError, tf.errors.InvalidArgumentError))


def tool_main(main):
  """`main` for `app.run`, with the suite's contract for a command-line
  tool: bad input (a missing, unreadable or malformed file or value:
  INPUT_ERRORS, absl's UsageError, TensorFlow's NotFound, DataLoss,
  PermissionDenied and InvalidArgument errors; a package of an optional
  requirements file not installed: core/extras.py) is one `error:` line
  and exit 2, with the traceback only under --verbose; main's return value
  is the exit code (None: 0); anything else is a crash with its
  traceback."""
  def run(argv):
    try:
      code = main(argv)
    except Exception as e:  # pylint: disable=broad-except
      line = None if startup.verbose() else bad_input_line(e)
      if line is None:
        raise
      print(f'error: {line}', file=sys.stderr, flush=True)
      sys.exit(exit_codes.USER_ERROR)
    sys.exit(code or 0)
  return run


def bad_input_line(error: BaseException) -> str | None:
  """The one line for `error` if it is bad input (INPUT_ERRORS, absl's
  UsageError, TensorFlow's file and argument errors, a package of an
  optional requirements file not installed: core/extras.py), else None."""
  missing = None
  if isinstance(error, ImportError):  # A package of an optional file.
    from core import extras  # pylint: disable=import-outside-toplevel
    missing = extras.explain(error)
  if not (missing or _input_error(error)):
    return None
  line = missing or error_text.one_line(error, limit=400)
  # TensorFlow's file system: "PATH; No such file or directory".
  return re.sub(r'^(\S+); No such file or directory$',
                r'\1: no such file or folder; check the path given', line)


def notebook_errors(shell) -> None:
  """The same contract in an IPython kernel (the notebooks): bad input
  (bad_input_line) prints its one `error:` line instead of a traceback,
  and the cell still fails, so "Run all" stops there; anything else shows
  its traceback, as does everything with MLPERF_VERBOSE=1."""
  def handler(shell, etype, value, tb, tb_offset=None):
    line = None if startup.verbose() else bad_input_line(value)
    if line is None:
      shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    else:
      print(f'error: {line}', file=sys.stderr, flush=True)
    return []
  shell.set_custom_exc((Exception,), handler)
