"""GNMT and the Transformer through export and the LoadGen harness, with
MLPerf Inference v0.5's translation settings and tokenized BLEU."""

import json
import os

import gin
import numpy as np
import pytest

from inference import backend as backends
from inference import run as run_lib
from inference import sample_library
from inference import settings as settings_lib
from models.common import tokenized_bleu
from models.common import translation_task
from tests import helpers
from tools import export_savedmodel

MODELS = {
    # gin file, the data fixture, small bindings.
    'gnmt': ('gin/gnmt_quickstart.gin', 'gnmt_data',
             ['UNITS = 32', 'BEAM_SIZE = 2', 'MAX_DECODE_LENGTH = 12']),
    'transformer': ('gin/transformer_quickstart.gin', 'translation_data',
                    ['BEAM_SIZE = 2']),
}


_EXPORTS = {}


@pytest.fixture(scope='module', params=sorted(MODELS))
def exported(request, tmp_path_factory):
  """Each model with its initial weights, exported (`export`)."""
  return export(request.param, request, tmp_path_factory)


@pytest.fixture(scope='module')
def gnmt_exported(request, tmp_path_factory):
  return export('gnmt', request, tmp_path_factory)


def export(name, request, tmp_path_factory):
  """{'name', 'gin_file', 'data', 'params', 'saved', 'task'}: the model
  with its initial weights (a real checkpoint of them), exported once a
  module. Untrained: these tests check the harness's plumbing and settings,
  not a BLEU."""
  if name in _EXPORTS:
    return _EXPORTS[name]
  import tensorflow as tf
  from core import config as gin_config
  gin_file, fixture, small = MODELS[name]
  data_dir = request.getfixturevalue(fixture)[0]
  folder = tmp_path_factory.mktemp(f'{name}_export')
  gin_files = [os.path.join(helpers.ROOT, gin_file)]
  params = [f'DATA_DIR = {data_dir!r}', *small]
  try:
    gin_config.parse(gin_files, params, unread_macros='known')
    model = gin_config.configured_task().build_model()
    tf.train.Checkpoint(model=model).save(str(folder / 'run' / 'checkpoints' /
                                              'ckpt'))
  finally:
    gin.clear_config()
  try:
    export_savedmodel.export(gin_files=gin_files, gin_params=params,
                             checkpoint_dir=str(folder / 'run'),
                             export_dir=str(folder / 'saved'))
  finally:
    gin.clear_config()
  _EXPORTS[name] = {'name': name, 'gin_file': gin_file, 'data': data_dir,
                    'params': small, 'saved': str(folder / 'saved'),
                    'task': helpers.inference_task(gin_file, data_dir, small)}
  return _EXPORTS[name]


def run(exported, tmp_path, scenario, mode='performance', **kw):
  return run_lib.run_benchmark(
      task=exported['task'],
      backend=backends.SavedModelBackend(exported['saved']),
      scenario=scenario, mode=mode,
      output_dir=str(tmp_path / f'{scenario}_{mode}'),
      model_name=exported['task'].inference_model, max_batch=8, **kw)


@pytest.mark.slow
def test_single_stream_offline_and_server_with_v05_settings(gnmt_exported,
                                                            tmp_path):
  """GNMT in the three scenarios of v0.5's GNMT (the Transformer's serving
  differs only in its model: its accuracy test below covers it)."""
  exported = gnmt_exported
  # 100 queries: LoadGen's early stopping finds p90 bounded from 64 on.
  single = run(exported, tmp_path, 'SingleStream', min_duration_ms=500,
               min_query_count=100)
  assert single.valid, single
  assert single.short_run and "rules' 60 s minimum" in str(single)
  # No expected QPS: the harness probes the rate and sizes the query to
  # outlast min_duration whatever the machine's load.
  offline = run(exported, tmp_path, 'Offline', min_duration_ms=500)
  assert offline.valid, offline
  assert offline.value > 0
  # Two seconds at 4 queries a second: LoadGen's early stopping may or may
  # not find enough queries for a verdict on a loaded machine; the settings
  # are what this checks.
  server = run(exported, tmp_path, 'Server', min_duration_ms=2000,
               min_query_count=8, server_target_qps=4)
  assert server.value > 0
  settings = helpers.loadgen_effective_settings(
      str(tmp_path / 'Server_performance'))
  assert settings['target_latency_ns'] == 250_000_000  # v0.5's GNMT bound.
  assert settings['target_latency_percentile'] == 0.97
  assert settings['qsl_rng_seed'] == 3133965575612453542  # r0.5's seed.
  assert settings['performance_sample_count'] == min(
      3003, sample_library.EvalSampleLibrary(task=exported['task']).total)


@pytest.mark.slow
def test_accuracy_mode_scores_v05_bleu_of_the_models_own_translations(
    exported, tmp_path):
  task = exported['task']
  report = run(exported, tmp_path, 'Offline', mode='accuracy', count=40)
  backend = backends.SavedModelBackend(exported['saved'])
  library = sample_library.EvalSampleLibrary(task=task, count=40)
  library.load(range(40))
  ids = backend.predict(library.get(list(range(40))))['ids']
  logged = {}
  with open(tmp_path / 'Offline_accuracy' / 'mlperf_log_accuracy.json') as f:
    for entry in json.load(f):
      logged[entry['qsl_idx']] = np.frombuffer(bytes.fromhex(entry['data']),
                                               np.int32)
  assert sorted(logged) == list(range(40))
  # Each response is that sample's translation, batch size aside (beam
  # search is exact per sentence, so no tie may flip with the batch).
  vocab = task.data.vocab
  assert [vocab.decode(logged[i]) for i in range(40)] == [
      vocab.decode(row) for row in ids]
  texts = task.data.references()
  index = library.references()['index']
  want = tokenized_bleu.inference_bleu([vocab.decode(row) for row in ids],
                                       [texts[int(i)] for i in index])
  assert report.quality == want


def test_quality_is_one_for_the_references_and_theirs_below(gnmt_data):
  """The task's scorer fed responses made from the references themselves
  (encoded as the model's ids), then from damaged copies."""
  task = helpers.inference_task('gin/gnmt_quickstart.gin', gnmt_data[0])
  texts = task.data.references()[:30]
  vocab = task.data.vocab
  responses = {i: vocab.encode(t).astype(np.int32)
               for i, t in enumerate(texts)}
  references = {'index': np.arange(30)}
  assert [vocab.decode(r) for r in responses.values()] == texts
  assert task.inference_quality(responses, references) == pytest.approx(1.0)
  damaged = [' '.join(t.split()[::2]) or t for t in texts]
  responses = {i: vocab.encode(t).astype(np.int32)
               for i, t in enumerate(damaged)}
  got = task.inference_quality(responses, references)
  assert got == tokenized_bleu.inference_bleu(damaged, texts)
  assert 0 < got < 0.9


def test_v05_defaults_hold_under_a_user_conf_and_give_way_to_its_lines(
    tmp_path):
  """Reading a user.conf makes LoadGen apply its built-in mlperf.conf, whose
  `*` lines (p99, 600 s, today's seeds) would replace v0.5's GNMT values;
  the model's defaults stay, and only the user.conf's own lines move them."""
  defaults = translation_task.BleuTranslation.inference_settings[
      'Server']
  conf = tmp_path / 'user.conf'
  conf.write_text('gnmt.Server.target_qps = 7\n')
  settings = settings_lib.make_settings(
      model='gnmt', scenario='Server', mode='performance',
      user_conf=str(conf), defaults=defaults)
  assert settings.server_target_qps == 7
  assert settings.server_target_latency_ns == 250_000_000
  assert settings.server_target_latency_percentile == 0.97
  assert settings.min_duration_ms == 60000
  assert settings.qsl_rng_seed == 3133965575612453542
  conf.write_text('gnmt.Server.target_latency = 100\n'
                  '*.Server.target_latency_percentile = 99\n')
  settings = settings_lib.make_settings(
      model='gnmt', scenario='Server', mode='performance',
      user_conf=str(conf), defaults=defaults)
  assert settings.server_target_latency_ns == 100_000_000
  assert settings.server_target_latency_percentile == 0.99
