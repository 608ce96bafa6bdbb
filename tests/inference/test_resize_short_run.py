"""inference.run.resize_short_run: a run that ended before min_duration is
sized again from LoadGen's own measurement, and only such a run; and
run_until_sized runs again until one is not, a bounded number of times."""

import mlperf_loadgen as lg

from inference import run as run_lib

SHORT = {'Min duration satisfied': 'NO', 'Min queries satisfied': 'Yes',
         'Early stopping satisfied': 'Yes'}


def test_offline_sized_by_the_probe_runs_again_at_twice_loadgens_rate():
  settings = lg.TestSettings()
  message = run_lib.resize_short_run(
      {**SHORT, 'Samples per second': '300.0'}, settings, scenario='Offline',
      mode='performance', probed=True)
  assert settings.offline_expected_qps == 600.0
  assert 'answered 300.0 samples/s' in message
  # Not probed (the user's expected QPS), or short for other reasons too.
  for probed, summary in ((False, SHORT),
                          (True, {**SHORT, 'Min queries satisfied': 'NO'})):
    assert run_lib.resize_short_run(
        {**summary, 'Samples per second': '300.0'}, lg.TestSettings(),
        scenario='Offline', mode='performance', probed=probed) is None


def test_latency_scenarios_expect_half_loadgens_mean_latency():
  settings = lg.TestSettings()
  message = run_lib.resize_short_run(
      {**SHORT, 'Mean latency (ns)': '2000000'}, settings,
      scenario='SingleStream', mode='performance', probed=False)
  assert settings.single_stream_expected_latency_ns == 1_000_000
  assert 'answered in 2.00 ms' in message and 'expecting 1.00 ms' in message
  assert run_lib.resize_short_run(
      {**SHORT, 'Min duration satisfied': 'Yes', 'Mean latency (ns)': '2e6'},
      lg.TestSettings(), scenario='SingleStream', mode='performance',
      probed=False) is None
  assert run_lib.resize_short_run(
      {**SHORT, 'Mean latency (ns)': '2e6'}, lg.TestSettings(),
      scenario='Server', mode='performance', probed=False) is None


def test_a_run_is_resized_until_it_outlasts_min_duration_at_most_thrice():
  # Each short run's rate underestimates the next (the GNMT busy check:
  # probe 17 samples/s, first run 130, second faster than 260): run again
  # while LoadGen planned too little, then stop.
  settings = lg.TestSettings()
  runs = iter([{**SHORT, 'Samples per second': '130.0'},
               {**SHORT, 'Samples per second': '400.0'},
               {**SHORT, 'Min duration satisfied': 'Yes',
                'Samples per second': '450.0'}])

  def resize(summary):
    return run_lib.resize_short_run(summary, settings, scenario='Offline',
                                    mode='performance', probed=True)

  summary = run_lib.run_until_sized(lambda: next(runs), resize)
  assert summary['Min duration satisfied'] == 'Yes'
  assert settings.offline_expected_qps == 800.0  # From the second run.
  # A machine that keeps outpacing its plan: the first run and three more.
  calls = []

  def short():
    calls.append(1)
    return {**SHORT, 'Samples per second': str(100.0 * 2 ** len(calls))}

  summary = run_lib.run_until_sized(short, resize)
  assert len(calls) == 1 + run_lib.MAX_RESIZES == 4
  assert summary['Min duration satisfied'] == 'NO'
