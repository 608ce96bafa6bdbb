"""tools/notebook/quickstarts.py: what each model's notebook installs,
which data folder it trains on, and the bindings that point a run at it."""

import os
import sys

import pytest

from core import extras
from tools.notebook import quickstarts


def test_a_cpu_runtime_installs_the_core_and_the_models_own_files():
  commands = quickstarts.install_commands(quickstarts.get('ssd'), tpu=False,
                                          cloud=False)
  assert commands == [[sys.executable, '-m', 'pip', 'install', '-q',
                       '-r', 'requirements.txt', '-r', 'requirements-ssd.txt',
                       '-r', 'requirements-inference.txt']]
  commands = quickstarts.install_commands(quickstarts.get('resnet'),
                                          tpu=False, cloud=True)
  assert commands[0][-2:] == ['-r', 'requirements-cloud.txt']
  # DLRM's MovieLens copy is in recbole's wheel, downloaded (where its data
  # builder looks), never installed.
  commands = quickstarts.install_commands(quickstarts.get('dlrm'), tpu=False,
                                          cloud=False)
  assert 'requirements-dlrm.txt' not in commands[0]
  assert commands[1] == [sys.executable, '-m', 'pip', 'download', '-q',
                         '--no-deps', '-d', os.path.join(sys.prefix, 'wheels'),
                         '-r', 'requirements-dlrm.txt']


def test_each_module_a_quickstart_needs_comes_from_one_of_its_files():
  for q in quickstarts.QUICKSTARTS.values():
    for module in q.modules:
      named = extras.EXTRAS[module][0]
      assert any(f in named for f in q.requirements), (q.name, module)


def test_an_unknown_model_is_one_line_naming_the_models():
  with pytest.raises(ValueError, match=r"^MODEL = 'gpt' is not a quickstart: "
                     'set it to one of resnet, bert, transformer, gnmt, ssd, '
                     'maskrcnn, dlrm, minigo, mobilenet, ssd_mobilenet in the '
                     r'parameters cell\.$'):
    quickstarts.get('gpt')


def test_the_data_folder_given_or_the_makefiles(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  bert = quickstarts.get('bert')
  assert quickstarts.data_folder(bert, '') == ('data/bert_quickstart', True)
  (tmp_path / 'data' / 'bert_quickstart').mkdir(parents=True)
  (tmp_path / 'data' / 'bert_quickstart' / 'vocab.txt').write_text('x')
  assert quickstarts.data_folder(bert, '') == ('data/bert_quickstart', False)
  assert quickstarts.data_folder(bert, 'gs://b/bert') == ('gs://b/bert', False)
  with pytest.raises(FileNotFoundError, match="DATA_DIR = 'nope': no such "
                     "folder. Leave DATA_DIR = '' to build the BERT "
                     'quickstart data in data/bert_quickstart'):
    quickstarts.data_folder(bert, 'nope')
  (tmp_path / 'half').mkdir()
  with pytest.raises(FileNotFoundError, match="DATA_DIR = 'half' has no "
                     "vocab.txt: it is not BERT's quickstart data"):
    quickstarts.data_folder(bert, 'half')
  assert quickstarts.data_folder(quickstarts.get('minigo'), 'x') == ('', False)


def test_a_runs_bindings_point_at_the_data_folder():
  assert quickstarts.data_bindings(quickstarts.get('bert'), 'd') == [
      "DATA_DIR = 'd'", f"VOCAB_FILE = {os.path.join('d', 'vocab.txt')!r}"]
  assert quickstarts.data_bindings(quickstarts.get('minigo'), '') == []


def test_a_missing_package_is_the_line_naming_its_file(monkeypatch):
  monkeypatch.setitem(sys.modules, 'pycocotools', None)
  with pytest.raises(ImportError) as raised:
    quickstarts.check_packages(quickstarts.get('maskrcnn'))
  assert extras.explain(raised.value).startswith(
      'pycocotools is not installed: pip install -r requirements-ssd.txt')
