"""The strategy factory and batch splitting."""

import pytest
import tensorflow as tf

from distribution import strategy as strategies


def test_mirrored_uses_the_requested_number_of_cpu_devices():
  s = strategies.make_strategy(kind='mirrored', num_cpu_devices=3)
  assert s.num_replicas_in_sync == 3
  # The same device set gives back the same strategy (collective keys).
  assert strategies.make_strategy(kind='mirrored', num_cpu_devices=3) is s


def test_default_and_one_device_have_one_replica():
  assert strategies.make_strategy(kind='default').num_replicas_in_sync == 1
  s = strategies.make_strategy(kind='one_device')
  assert isinstance(s, tf.distribute.OneDeviceStrategy)


def test_unknown_kind_is_clear_and_a_tpu_defaults_to_this_vm_s(monkeypatch):
  with pytest.raises(ValueError, match='Unknown strategy kind'):
    strategies.make_strategy(kind='gpu')
  # No --tpu and no $TPU_NAME: this VM's own TPU, and there is none here.
  monkeypatch.delenv('TPU_NAME', raising=False)
  with pytest.raises(ValueError, match='^--tpu=local: no TPU on this machine'):
    strategies.make_strategy(kind='tpu')


def test_multi_worker_needs_tf_config(monkeypatch):
  monkeypatch.delenv('TF_CONFIG', raising=False)
  with pytest.raises(ValueError, match='TF_CONFIG'):
    strategies.make_strategy(kind='multi_worker')


def test_batch_must_divide_by_replicas():
  assert strategies.per_replica_batch_size(64, 4) == 16
  with pytest.raises(ValueError, match=r'`global_batch_size` \(10\).*\(4\)'):
    strategies.per_replica_batch_size(10, 4)


def test_more_cpu_devices_than_the_process_has_is_an_error():
  with pytest.raises(RuntimeError, match='Cannot split the CPU'):
    strategies.make_strategy(kind='mirrored', num_cpu_devices=16)
