"""A gin file written before models/ was split by benchmark fails in one
line that names the file, the line and the name to write instead."""

import importlib.util
import os
import re

import gin
import pytest

from core import config as gin_config
from core import moved_names
from tests import helpers


@pytest.fixture(autouse=True)
def fresh_gin():
  gin.clear_config()
  yield
  gin.clear_config()


def test_every_moved_module_is_gone_and_its_new_one_exists():
  for old, new in moved_names.MOVED_MODULES.items():
    assert not os.path.isfile(
        os.path.join(helpers.ROOT, *old.split('.')) + '.py'), old
    assert importlib.util.find_spec(new) is not None, new
    assert new.startswith('models.') and new.count('.') == 2, new


@pytest.mark.parametrize('old,new', [
    ('models.resnet_task', 'models.resnet.task'),
    ('models.resnet_task.ResNetTask', 'models.resnet.task.ResNetTask'),
    # The old module models.resnet is the ResNet-50 family's package now.
    ('models.resnet.ResNet', 'models.common.resnet.ResNet'),
    ('models.ssd.SSD', 'models.ssd.model.SSD'),
    ('models.layers.is_decay_exempt', 'models.common.layers.is_decay_exempt'),
    ('models.mcts', 'models.minigo.mcts'),
    # Today's names, right or misspelt, moved from nowhere.
    ('models.ssd.model.SSD', None),
    ('models.resnet.task.ResNetTsk', None),
    ('models.maskrcnn.task.MaskRcnnTask', None),
    ('training.optimizers.Lars', None),
])
def test_a_moved_name_gives_the_name_that_replaced_it(old, new):
  assert moved_names.moved(old) == new


def test_an_old_gin_file_is_one_line_naming_its_line_and_the_new_name(
    tmp_path):
  old = tmp_path / 'mine.gin'
  old.write_text("include 'gin/resnet_quickstart.gin'\n"
                 'import models.resnet_task\n'
                 'models.resnet_task.ResNetTask.label_smoothing = 0.2\n')
  with pytest.raises(ValueError) as e:
    gin_config.parse([str(old)], [])
  assert str(e.value).startswith(
      f'{old}, line 2: models.resnet_task is now models.resnet.task ')
  assert '\n' not in str(e.value)


def test_an_old_binding_and_an_unknown_module_are_one_line_each():
  with pytest.raises(ValueError, match=r'^the bindings .*line 1: '
                     r'models\.ssd\.SSD is now models\.ssd\.model\.SSD '):
    gin_config.parse(['gin/resnet_quickstart.gin'],
                     ['models.ssd.SSD.bn_momentum = 0.9'])
  gin.clear_config()
  # A misspelt import in a gin file was a crash (gin's ModuleNotFoundError).
  with pytest.raises(ValueError, match='imports models.resnet.tusk, which is '
                     'no module of this suite'):
    gin_config.parse(['gin/resnet_quickstart.gin'],
                     ['import models.resnet.tusk'])


def test_the_docs_table_of_moved_names_is_the_code_s():
  doc = open(os.path.join(helpers.ROOT, 'docs', 'models.md')).read()
  rows = set(re.findall(r'^\| `(models\.\w+)` \| `([\w.]+)` \|$', doc,
                        re.M))
  assert rows == set(moved_names.MOVED_MODULES.items())


def test_a_missing_package_is_left_to_the_extras_explanation():
  # Not a name of the suite: the ImportError stays for core/extras.py (a
  # package of an optional requirements file) or the crash it is.
  with pytest.raises(ImportError, match='no_such_package'):
    gin_config.parse(['gin/resnet_quickstart.gin'],
                     ['import no_such_package.tasks'])
