"""Gin values of the wrong type are named (binding, macro, expected type)
before anything runs; every experiment's own values pass the check."""

import gin
import pytest

from training import config as gin_config


@pytest.fixture(autouse=True)
def fresh_gin():
  gin.clear_config()
  yield
  gin.clear_config()


@pytest.mark.parametrize('binding,message', [
    ("GLOBAL_BATCH_SIZE = 'abc'",
     "Gin binding training.controller.RunSchedule.global_batch_size (set "
     "through the macro GLOBAL_BATCH_SIZE) is 'abc', a str; it must be int."),
    ('training.controller.RunSchedule.steps_per_loop = 2.5',
     'RunSchedule.steps_per_loop is 2.5, a float; it must be int.'),
    ('models.resnet.ResNet.depth = True',
     'ResNet.depth is True, a bool; it must be int.'),
    ('STOP_AT_TARGET = 1', 'stop_at_target (set through the macro '
     'STOP_AT_TARGET) is 1, an int; it must be bool.'),
])
def test_a_value_of_the_wrong_type_names_its_binding(binding, message):
  with pytest.raises(ValueError) as e:
    gin_config.parse(['gin/resnet_quickstart.gin'], [binding])
  assert message in str(e.value)


def test_ints_for_floats_pass():
  gin_config.parse(['gin/resnet_quickstart.gin'], [
      'training.schedules.PolynomialWarmup.base = 3',
      'TRAIN_EPOCHS = 2'])
  assert gin.query_parameter('%TRAIN_EPOCHS') == 2
