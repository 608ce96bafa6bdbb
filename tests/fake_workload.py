"""Plays train.py on a fake TPU VM (tests/fake_vm_python): the launcher's
real commands start it on "worker 0" through tools/launcher/job_runner.py.

The script (FAKE_WORKLOAD, JSON) gives per seed the outcome of each
attempt, in order: 'success' uploads a real run's MLPerf log
(FAKE_LOGS/result_<seed>.txt) as <model_dir>/mlperf.log, and source.json as
train.py writes it on a worker (from the copy's COMMIT), and exits 0;
'preempted' has the fake Cloud TPU preempt the node (as Cloud TPU takes a
spot node back) and exits 75 as train.py does after saving; 'vanished'
deletes the node and is killed by the signal a VM's shutdown sends; 'hang'
runs until killed; 'crash' exits 3. Attempts are counted in FAKE_VM_ROOT.
"""

import json
import os
import sys
import urllib.request


def argument(args, name):
  return next(a.split('=', 1)[1] for a in args if a.startswith(name + '='))


def main(args) -> int:
  seed = int(argument(args, '--gin.SEED'))
  model_dir = argument(args, '--model_dir')
  counter = os.path.join(os.environ['FAKE_VM_ROOT'], f'attempts_{seed}')
  attempt = int(open(counter).read()) if os.path.exists(counter) else 0
  with open(counter, 'w') as f:
    f.write(str(attempt + 1))
  outcome = json.loads(os.environ['FAKE_WORKLOAD'])[str(seed)][attempt]
  print(f'fake train.py: seed {seed}, attempt {attempt}: {outcome}',
        flush=True)
  node = os.environ.get('TPU_NAME') or os.environ['FAKE_TPU']
  if outcome == 'success':
    from google.cloud import storage
    bucket, _, prefix = model_dir[len('gs://'):].partition('/')
    storage.Client().bucket(bucket).blob(f'{prefix}/mlperf.log').upload_from_filename(
        os.path.join(os.environ['FAKE_LOGS'], f'result_{seed}.txt'))
    # What train.py records of its code, from the worker's copy (COMMIT).
    from core import source
    storage.Client().bucket(bucket).blob(
        f'{prefix}/{source.SOURCE_FILE}').upload_from_string(
            source.record_text(os.getcwd()))
    return 0
  if outcome in ('preempted', 'vanished'):
    action = 'preempt' if outcome == 'preempted' else 'vanish'
    urllib.request.urlopen(urllib.request.Request(
        f'{os.environ["FAKE_CLOUD_URL"]}test/{action}/{node}', data=b'',
        method='POST'), timeout=30).read()
    return 75 if outcome == 'preempted' else 143
  if outcome == 'hang':
    import time
    time.sleep(600)
  return 3


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
