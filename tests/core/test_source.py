"""core.source: which code a run used, from git or from the launcher's
COMMIT file."""

import subprocess

from core import source


def git(root, *args):
  return subprocess.run(['git', '-C', str(root), *args], check=True,
                        capture_output=True, text=True).stdout.strip()


def test_a_checkout_gives_its_commit_and_what_differs(tmp_path):
  git(tmp_path, 'init', '-q')
  (tmp_path / 'train.py').write_text('a = 1\n')
  (tmp_path / '.gitignore').write_text('runs/\n')
  git(tmp_path, 'add', '.')
  git(tmp_path, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm',
      'one')
  head = git(tmp_path, 'rev-parse', 'HEAD')
  assert source.describe(str(tmp_path)) == {'commit': head, 'changed': [],
                                            'from': 'git'}
  (tmp_path / 'train.py').write_text('a = 2\n')  # A tracked change.
  (tmp_path / 'models').mkdir()
  (tmp_path / 'models' / 'new.py').write_text('')  # Untracked code.
  (tmp_path / 'notes.txt').write_text('')  # Untracked, not code.
  (tmp_path / 'runs').mkdir()
  (tmp_path / 'runs' / 'x.py').write_text('')  # Ignored.
  assert source.describe(str(tmp_path))['changed'] == ['models/new.py',
                                                       'train.py']


def test_a_copy_without_git_reads_the_commit_file(tmp_path):
  assert source.describe(str(tmp_path)) == {'commit': None, 'changed': None,
                                            'from': None}
  (tmp_path / source.COMMIT_FILE).write_text('ab' * 20 + '\n')
  assert source.describe(str(tmp_path)) == {
      'commit': 'ab' * 20, 'changed': [], 'from': 'COMMIT file'}
