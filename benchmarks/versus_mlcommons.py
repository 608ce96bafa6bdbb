"""Benchmark: our LoadGen harness against MLCommons' v0.5 reference harness,
MobileNet-v1 Offline FP32.

  make mlcommons_venv REFERENCE_DIR=~/inference   # once; a checkout at r0.5
  python -m benchmarks.versus_mlcommons --reference_dir=~/inference \
      [--rounds=3] [--seconds=20] [--images=1024]

The peer is what MLPerf Inference v0.5 shipped: `v0.5/classification_and_
detection/python/main.py` of the user's checkout of mlcommons/inference at
branch r0.5, unchanged, with LoadGen 0.5 built from that checkout's
`loadgen/` and its `mobilenet-onnxruntime` profile, in its own venv
(.venv-mlcommons: onnxruntime, OpenCV, tf2onnx; requirements-mlcommons.txt).
r0.5's TensorFlow backend needs TensorFlow 1's `tf.Session`, which no
TensorFlow for this Python has; its onnxruntime backend is the one that runs.

One model on every side: a full-size MobileNet-v1 (224x224, width 1.0, 1001
classes, float32, random weights: Offline throughput does not depend on
them) exported by tools/export_savedmodel's code; tf2onnx (in the peer's
venv, as a user would) converts that SavedModel for the peer, inputs made
NCHW as the profile feeds them. Ours serves it twice: converted by
tools/export_onnx.py through ONNX Runtime (`--onnx`: the same runtime as
the peer's, so the ratio is the harnesses'), and as the SavedModel
(TensorFlow). One set of images on every side: `--images`
JPEGs cut from scikit-learn's two sample photographs, as the peer reads them
(a folder and val_map.txt) and as ours does (TFRecords by
tools/convert_image_folder). Each harness preprocesses its samples when
LoadGen loads them, outside the timed run.

Each round runs the three in Offline performance mode as separate
processes, one after the other, with the same duration (`--seconds`) and the
same expected QPS (the first run's probe: ours on ONNX Runtime); the figure
is LoadGen's own `Samples per second` from each run's
mlperf_log_summary.txt. Each side keeps its own defaults otherwise (the
peer: --threads = cores, batches of 32; ours: batches of 32, `--workers`
and `--intra_op_threads` as given), printed with the result.
"""

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

from benchmarks import common
from core import entry_point

FLAGS = flags.FLAGS
ROOT = common.ROOT
MAIN = os.path.join('v0.5', 'classification_and_detection', 'python',
                    'main.py')
CONF = os.path.join('v0.5', 'mlperf.conf')
GIN_FILES = ('gin/run.gin', 'gin/models/mobilenet.gin', 'gin/hardware/cpu.gin')
SETUP = 'make mlcommons_venv REFERENCE_DIR=<checkout of mlcommons/inference>'


def define_flags():
  flags.DEFINE_string('reference_dir', None, 'A checkout of '
                      'mlcommons/inference at branch r0.5.')
  flags.DEFINE_string('peer_python', os.path.join(
      ROOT, '.venv-mlcommons', 'bin', 'python'), 'The peer venv\'s python.')
  flags.DEFINE_integer('rounds', 3, 'Interleaved rounds.')
  flags.DEFINE_integer('seconds', 20, 'Each Offline run\'s duration.')
  flags.DEFINE_integer('images', 1024, 'JPEGs in the shared sample set '
                       '(v0.5: 1,024 performance samples for mobilenet).')
  flags.DEFINE_integer('workers', 1, 'Our harness\'s --workers.')
  flags.DEFINE_integer('intra_op_threads', 0, 'Our harness\'s '
                       '--intra_op_threads (0: TensorFlow\'s default).')
  flags.mark_flag_as_required('reference_dir')


def check_peer(reference_dir: str, python: str) -> None:
  """Raises FileNotFoundError / ValueError naming what to do."""
  for path in (MAIN, CONF):
    if not os.path.exists(os.path.join(reference_dir, path)):
      raise FileNotFoundError(
          f'{os.path.join(reference_dir, path)}: no such file; '
          '--reference_dir must be a checkout of mlcommons/inference at '
          'branch r0.5 (git checkout r0.5).')
  if not os.path.exists(python):
    raise FileNotFoundError(f'No peer environment at {python}: run `{SETUP}`.')
  # LoadGen 0.5's ConstructSUT takes a third callable (process_latencies),
  # which r0.5's main.py passes; later LoadGens take two.
  probe = subprocess.run(
      [python, '-c', 'import mlperf_loadgen\n'
       'assert "arg2" in mlperf_loadgen.ConstructSUT.__doc__.splitlines()[0],'
       ' "mlperf_loadgen is not LoadGen 0.5"\n'
       'import onnxruntime, cv2, pycocotools, tf2onnx'],
      capture_output=True, text=True)
  if probe.returncode:
    raise ValueError(f'The peer environment {python} is not ready '
                     f'({probe.stderr.strip().splitlines()[-1]}): run '
                     f'`{SETUP}`.')


def write_images(folder: str, count: int) -> None:
  """`count` JPEGs (crops of scikit-learn's sample photographs, 256 to 427
  pixels a side, some flipped) in two class folders, and the peer's
  val_map.txt (`relative path` `label` a line)."""
  from PIL import Image
  from sklearn.datasets import load_sample_images
  photos = load_sample_images().images
  rng = random.Random(0)
  lines = []
  for i in range(count):
    label = i % len(photos)
    photo = photos[label]
    h, w = rng.randint(256, 427), rng.randint(256, 427)
    top, left = rng.randint(0, 427 - h), rng.randint(0, 640 - w)
    crop = photo[top:top + h, left:left + w]
    if rng.random() < 0.5:
      crop = crop[:, ::-1]
    name = os.path.join(f'class{label}', f'image_{i:05d}.jpg')
    os.makedirs(os.path.join(folder, f'class{label}'), exist_ok=True)
    Image.fromarray(crop).save(os.path.join(folder, name), quality=90)
    lines.append(f'{name} {label}')
  with open(os.path.join(folder, 'val_map.txt'), 'w') as f:
    f.write('\n'.join(lines) + '\n')


def gin_params(data_dir: str) -> list[str]:
  return [f'DATA_DIR = {data_dir!r}', 'NUM_CLASSES = 1001',
          "COMPUTE_DTYPE = 'float32'"]


def export_model(data_dir: str, export_dir: str) -> None:
  """The full-size MobileNet-v1, random weights, as our SavedModel."""
  from core import config as gin_config
  from training import export as export_lib
  gin_config.parse([os.path.join(ROOT, g) for g in GIN_FILES],
                   gin_params(data_dir), unread_macros='known')
  task = gin_config.configured_task()
  export_lib.save_serving(task.build_model(), task, export_dir)


def to_onnx(python: str, saved_model: str, output: str) -> None:
  """tf2onnx in the peer's venv; the input NCHW as r0.5's onnxruntime
  backend feeds it."""
  _run('tf2onnx', [python, '-m', 'tf2onnx.convert', '--saved-model',
                   saved_model, '--output', output, '--opset', '13',
                   '--inputs-as-nchw', 'images'])


def _run(name: str, args: list[str], **kwargs) -> None:
  """Runs one harness; a failure shows its stderr's end and stops."""
  done = subprocess.run(args, capture_output=True, text=True, **kwargs)
  if done.returncode:
    sys.stderr.write(done.stderr[-3000:])
    raise SystemExit(f'{name} failed (exit {done.returncode}; its stderr is '
                     'above).')


def samples_per_second(output_dir: str) -> float:
  from inference import run as run_lib
  summary = run_lib.parse_summary(
      os.path.join(output_dir, 'mlperf_log_summary.txt'))
  return float(summary['Samples per second'])


def run_peer(python: str, reference_dir: str, onnx: str, images: str,
             output_dir: str, seconds: int, qps: float) -> float:
  main = os.path.join(reference_dir, MAIN)
  _run(
      'MLCommons r0.5 main.py',
      [python, main, '--profile=mobilenet-onnxruntime', f'--model={onnx}',
       f'--dataset-path={images}', '--outputs=logits', '--scenario=Offline',
       f'--config={os.path.join(reference_dir, CONF)}',
       f'--output={output_dir}', f'--time={seconds}', f'--qps={int(qps)}'],
      # main.py imports its modules from its own folder; its preprocessing
      # cache goes under the working directory.
      cwd=os.path.dirname(output_dir),
      env=dict(os.environ, PYTHONPATH=os.path.dirname(main)))
  return samples_per_second(output_dir)


def run_ours(model_flag: str, data_dir: str, output_dir: str, seconds: int,
             qps: float) -> float:
  """Our harness serving `model_flag` (--onnx=... or --saved_model=...)."""
  args = [sys.executable, '-m', 'inference.run',
          *[f'--gin_file={g}' for g in GIN_FILES],
          *[f'--gin_param={p}' for p in gin_params(data_dir)],
          model_flag, f'--dataset={data_dir}',
          f'--output_dir={output_dir}', '--scenario=Offline',
          '--settings=v0.5', f'--min_duration_ms={seconds * 1000}',
          f'--workers={FLAGS.workers}',
          f'--intra_op_threads={FLAGS.intra_op_threads}']
  if qps:
    args.append(f'--expected_qps={qps}')
  _run('inference.run', args, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
  return samples_per_second(output_dir)


def main(argv):
  del argv
  reference = os.path.abspath(os.path.expanduser(FLAGS.reference_dir))
  check_peer(reference, FLAGS.peer_python)
  from tools import convert_image_folder
  from tools import export_onnx
  with tempfile.TemporaryDirectory() as tmp:
    images, data = os.path.join(tmp, 'images'), os.path.join(tmp, 'data')
    write_images(images, FLAGS.images)
    # Our pipeline reads `validation-*` TFRecords of the same JPEGs (and
    # checks that a `train-*` set exists: the same records).
    shutil.move(os.path.join(images, 'val_map.txt'), tmp)
    for split in ('validation', 'train'):
      convert_image_folder.convert(input_dir=images, output_prefix=os.path.join(
          data, split), num_shards=2)
    shutil.move(os.path.join(tmp, 'val_map.txt'), images)
    saved = os.path.join(tmp, 'saved')
    export_model(data, saved)
    # The peer's ONNX takes NCHW (its profile's layout); ours NHWC, as our
    # pipeline gives it (one transpose inside the model).
    peer_onnx, our_onnx = (os.path.join(tmp, f'{n}.onnx')
                           for n in ('peer', 'ours'))
    to_onnx(FLAGS.peer_python, saved, peer_onnx)
    export_onnx.convert(saved, our_onnx)
    contenders = {
        'ours, ONNX Runtime': lambda out, qps: run_ours(
            f'--onnx={our_onnx}', data, out, FLAGS.seconds, qps),
        'ours, SavedModel': lambda out, qps: run_ours(
            f'--saved_model={saved}', data, out, FLAGS.seconds, qps),
        'MLCommons r0.5': lambda out, qps: run_peer(
            FLAGS.peer_python, reference, peer_onnx, images, out,
            FLAGS.seconds, qps),
    }
    rates = {name: [] for name in contenders}
    qps = 0.0  # The first run's probe sizes every run's Offline query.
    for r in range(FLAGS.rounds):
      for i, (name, run) in enumerate(contenders.items()):
        rates[name].append(run(os.path.join(tmp, f'round{r}', str(i)), qps))
        qps = qps or rates[name][0]
      print(f'round {r + 1}: ' + ', '.join(
          f'{name} {v[-1]:.1f}' for name, v in rates.items()) + ' samples/s',
            flush=True)
  median = {name: statistics.median(v) for name, v in rates.items()}
  peer = median['MLCommons r0.5']
  ours = (f'--workers={FLAGS.workers} --intra_op_threads='
          f'{FLAGS.intra_op_threads}, batch 32')
  print(f'--- MobileNet-v1 224 FP32, Offline, {FLAGS.images} images, '
        f'{FLAGS.seconds} s runs, {FLAGS.rounds} interleaved rounds '
        '(medians of LoadGen\'s samples/s)')
  for name, value in median.items():
    print(f'  {name:20s} {value:7.1f}  {value / peer:5.2f}x')
  print(f'  (ours: {ours}; MLCommons: onnxruntime, --threads='
        f'{os.cpu_count()}, batch 32)')
  rows = []
  for name, runtime in (('ours, ONNX Runtime', 'the same runtime'),
                        ('ours, SavedModel', 'TensorFlow')):
    ratio = median[name] / peer
    rows.append((f'LoadGen Offline, MobileNet-v1 224, float32, ours on '
                 f'{runtime}', f'{median[name]:.1f} samples/s ({ours})',
                 f'MLCommons r0.5 main.py, onnxruntime {peer:.1f} samples/s',
                 f'**{ratio:.2f}x** (>= 1: {"met" if ratio >= 1 else "missed"})'
                 ))
  print(common.page_rows(rows))


if __name__ == '__main__':
  define_flags()
  app.run(entry_point.tool_main(main))
