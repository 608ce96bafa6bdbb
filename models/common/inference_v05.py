"""MLPerf Inference v0.5's settings as LoadGen 6 TestSettings attributes, by
benchmark: what a task's `inference_settings` holds for a model LoadGen 6's
built-in mlperf.conf no longer has (MobileNet, SSD-MobileNet, GNMT), and
what `python -m inference.run --settings=v0.5` gives any model.

Sources (read 2026-12-05):
- mlcommons/inference, branch r0.5, `v0.5/mlperf.conf`: SingleStream p90
  over 1,024 queries at least; MultiStream p99 (GNMT p97), 4 samples a
  query to start, a bound of 50 ms (SSD-ResNet34 66 ms, GNMT 100 ms) over
  270,336 queries (GNMT 90,112); Server p99 (GNMT p97), bound 10 ms
  (ResNet-50 15 ms, SSD-ResNet34 100 ms, GNMT 250 ms) over 270,336
  queries (GNMT 90,112); Offline one query; 60 s at least each.
- mlcommons/inference_policies at 32c6bfa (the v0.5 rules), "Benchmarks",
  and mlcommons/inference `tools/submission/submission-checker.py`,
  MODEL_CONFIG["v0.5"]: the QSL sizes (performance samples), the quality
  gates (MobileNet 98% of 71.68% top-1; SSD-MobileNet 99% of 0.22 mAP, the
  rules' figure, where r0.5's README lists the TF model at 0.23) and the
  seeds every v0.5 submission used.

Not expressible in LoadGen 6: v0.5 MultiStream's query every bound (a
query still running when the next is due is overtime) and its metric, the
largest samples-per-query meeting the bound. inference/multistream.py
emulates it with LoadGen 6's back-to-back MultiStream (`multistream_bound`
here gives the bound and percentile it needs).
"""

import dataclasses

SEEDS = {'qsl_rng_seed': 3133965575612453542,
         'sample_index_rng_seed': 665484352860916858,
         'schedule_rng_seed': 3622009729038561421}
MIN_DURATION_MS = 60000
VISION_QUERIES = 270336


@dataclasses.dataclass(frozen=True)
class Benchmark:
  """One v0.5 benchmark's numbers.

  Attributes:
    performance_samples: the QSL's size (the rules' table).
    quality: the closed division's gate, a fraction of the FP32 model's.
    server_ms, multistream_ms: the latency bounds.
    percentile: Server's and MultiStream's tail.
    min_queries: Server's and MultiStream's fewest queries.
  """
  performance_samples: int
  quality: float
  server_ms: int
  multistream_ms: int
  percentile: float = 0.99
  min_queries: int = VISION_QUERIES


BENCHMARKS = {
    'resnet50': Benchmark(1024, 0.99, 15, 50),
    'mobilenet': Benchmark(1024, 0.98, 10, 50),
    'ssd-resnet34': Benchmark(64, 0.99, 100, 66),
    'ssd-mobilenet': Benchmark(256, 0.99, 10, 50),
    # newstest2014's 3,003 sentences repeated 1,300 times.
    'gnmt': Benchmark(3903900, 0.99, 250, 100, percentile=0.97,
                      min_queries=90112),
}


def _benchmark(model: str) -> Benchmark:
  if model not in BENCHMARKS:
    raise ValueError(f'MLPerf Inference v0.5 has no benchmark {model!r}: one '
                     f'of {sorted(BENCHMARKS)}.')
  return BENCHMARKS[model]


def settings(model: str) -> dict:
  """{scenario: {TestSettings attribute: value}} of v0.5 for `model`."""
  b = _benchmark(model)
  common = {**SEEDS, 'min_duration_ms': MIN_DURATION_MS}
  return {
      'SingleStream': {**common, 'min_query_count': 1024,
                       'single_stream_expected_latency_ns': 10_000_000,
                       'single_stream_target_latency_percentile': 0.90},
      # LoadGen 6 reads v0.5's MultiStream target_latency as the expected
      # latency; the emulation's bound.
      'MultiStream': {**common, 'min_query_count': b.min_queries,
                      'multi_stream_samples_per_query': 4,
                      'multi_stream_expected_latency_ns':
                          b.multistream_ms * 1_000_000,
                      'multi_stream_target_latency_percentile': b.percentile},
      'Server': {**common, 'min_query_count': b.min_queries,
                 'server_target_qps': 1.0,
                 'server_target_latency_ns': b.server_ms * 1_000_000,
                 'server_target_latency_percentile': b.percentile},
      'Offline': {**common, 'min_query_count': 1,
                  'offline_expected_qps': 1.0},
  }


def multistream_bound(model: str) -> tuple[float, float]:
  """(latency bound in seconds, percentile) of v0.5 MultiStream."""
  b = _benchmark(model)
  return b.multistream_ms / 1000, b.percentile


def performance_samples(model: str) -> int:
  return _benchmark(model).performance_samples


def quality_gate(model: str) -> float:
  """The closed division's accuracy gate as a fraction of FP32's."""
  return _benchmark(model).quality
