"""Shared fixtures: 4 logical CPU devices and the quickstart data, once a session."""

import os
import shutil

import pytest

NUM_CPU_DEVICES = 4


def pytest_configure(config):
  del config
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  from distribution import strategy
  # Must happen before TensorFlow initialises; every test process gets 4.
  strategy.split_cpu(NUM_CPU_DEVICES)


@pytest.fixture(scope='session')
def quickstart_data(tmp_path_factory):
  """The quickstart digits as TFRecords (train 4 files, validation 3 files)."""
  from tools import build_quickstart_data
  out = tmp_path_factory.mktemp('quickstart')
  build_quickstart_data.build(str(out))
  shutil.rmtree(out / 'images')
  return str(out)


@pytest.fixture(scope='session')
def bert_data(tmp_path_factory):
  """The BERT quickstart data: vocabulary, corpora and TFRecords."""
  from tools import build_bert_quickstart_data
  out = tmp_path_factory.mktemp('bert_quickstart')
  counts = build_bert_quickstart_data.build(str(out))
  return str(out), counts
