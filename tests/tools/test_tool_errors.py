"""Every command-line tool keeps the bad-input contract: a missing or
malformed input, a flag error or a missing flag is one `error:` line on
stderr naming it, exit 2, and nothing written (core/entry_point.py
`tool_main` and `parse_flags_early`)."""

import os
import subprocess

import pytest

from tests import helpers

MISSING = '/nonexistent/input'


def run(tmp_path, module, *args):
  """`python -m module ARGS` from another folder; (code, stderr lines)."""
  done = subprocess.run(
      [helpers.PYTHON, '-m', module, *args], cwd=str(tmp_path),
      capture_output=True, text=True, timeout=helpers.HANG_SECONDS,
      env=dict(os.environ, PYTHONPATH=helpers.ROOT))
  return done.returncode, done.stderr.strip().splitlines()


def malformed(tmp_path, name, text):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


CASES = {
    'image folder missing': (
        'tools.convert_image_folder',
        lambda t: [f'--input_dir={MISSING}', f'--output_prefix={t}/out/x'],
        'error: Could not find directory /nonexistent/input'),
    'coco annotations missing': (
        'tools.convert_coco',
        lambda t: [f'--annotations={MISSING}.json', f'--images={t}',
                   f'--output_dir={t}/out', '--split=val'],
        'error: /nonexistent/input.json: no such file or folder; check the '
        'path given'),
    'coco annotations malformed': (
        'tools.convert_coco',
        lambda t: [f'--annotations={malformed(t, "a.json", "{oops")}',
                   f'--images={t}', f'--output_dir={t}/out', '--split=val'],
        'is not JSON'),
    'pretraining vocabulary missing': (
        'tools.create_pretraining_data',
        lambda t: [f'--input_file={malformed(t, "c.txt", "a b .")}',
                   f'--vocab_file={MISSING}', f'--output_file={t}/out/x'],
        'error: /nonexistent/input: no such file or folder'),
    'vocabulary corpus missing': (
        'tools.build_vocab',
        lambda t: [f'--input_file={MISSING}', f'--vocab_file={t}/out/v.txt'],
        'error: /nonexistent/input: no such file or folder'),
    'criteo line malformed': (
        'tools.convert_criteo',
        lambda t: ['--input=' + malformed(t, 'd.tsv', '1\t2\t3\n'),
                   f'--eval_input={t}/d.tsv', f'--output_dir={t}/out'],
        'error: '),
    'checkpoint missing': (
        'tools.export_savedmodel',
        lambda t: ['--gin_file=resnet_quickstart.gin',
                   f'--checkpoint_dir={MISSING}', f'--export_dir={t}/out'],
        'error: No checkpoint in /nonexistent/input/checkpoints'),
    'loadgen dataset missing': (
        'inference.run',
        lambda t: ['--gin_file=resnet_quickstart.gin', '--noop_backend',
                   f'--dataset={MISSING}', f'--output_dir={t}/out'],
        'error: '),
    'loadgen model without a benchmark': (
        'inference.run',
        lambda t: ['--gin_file=maskrcnn_quickstart.gin', '--noop_backend',
                   f'--dataset={t}', f'--output_dir={t}/out'],
        'error: MaskRcnnTask (maskrcnn) has no MLPerf Inference benchmark'),
    'loadgen v0.5 settings of a model v0.5 lacks': (
        'inference.run',
        lambda t: ['--gin_file=bert_quickstart.gin', '--noop_backend',
                   f'--dataset={t}', f'--output_dir={t}/out',
                   '--settings=v0.5'],
        "error: MLPerf Inference v0.5 has no benchmark 'bert'"),
    'quantization calibration records missing': (
        'tools.quantize_tflite',
        lambda t: ['--gin_file=mobilenet_quickstart.gin',
                   f'--saved_model={t}', f'--dataset={t}',
                   f'--calibration_dataset={MISSING}',
                   f'--output={t}/out/int8.tflite'],
        'error: No calibration records match /nonexistent/input/'
        'validation-*'),
    'onnx export of a missing SavedModel': (
        'tools.export_onnx',
        lambda t: [f'--saved_model={MISSING}', f'--output={t}/out/m.onnx'],
        f'error: No SavedModel at {MISSING}; make one with '
        'tools/export_savedmodel.py.'),
    'gin file misspelt': (
        'tools.predict', lambda t: ['--gin_file=resnet_quickstar.gin'],
        "error: --gin_file=resnet_quickstar.gin: no such file in the working "
        "directory, the repository's gin/ and its subfolders; nearest: "
        'gin/resnet_quickstart.gin'),
    'unknown flag': (
        'tools.convert_criteo', lambda t: ['--bogus=1'],
        "error: Unknown command line flag 'bogus' (--help lists the flags)."),
    'required flag missing': (
        'tools.build_vocab', lambda t: [f'--vocab_file={t}/out/v.txt'],
        'error: --input_file is required (--help lists the flags).'),
    # The benchmarks keep it too (their flags parse before TensorFlow).
    'benchmark flag missing': (
        'benchmarks.storage_faults', lambda t: ['--steps=4'],
        'error: --data_dir is required (--help lists the flags).'),
    'benchmark peer environment missing': (
        'benchmarks.versus_garden',
        lambda t: [f'--garden_python={MISSING}/python', '--rounds=1',
                   '--models=resnet50', '--dtypes=float32'],
        'error: No environment at /nonexistent/input/python: run `make '
        'garden_venv`.'),
    'benchmark checkpoint missing': (
        'benchmarks.decode', lambda t: [f'--checkpoint_dir={MISSING}'],
        'error: '),
    'minigo ladder with no simulations': (
        'tools.minigo_ladder', lambda t: ['--simulations=0'],
        'error: --simulations=0: each must be `random` or a whole number of '
        'at least 1.'),
    'minigo ladder with a misspelt opponent': (
        'tools.minigo_ladder', lambda t: ['--simulations=50,randm'],
        'error: --simulations=50,randm: each must be `random` or a whole '
        'number of at least 1.'),
    'minigo ladder with no readouts': (
        'tools.minigo_ladder', lambda t: ['--readouts=0'],
        'error: --games must be at least 2 and --readouts at least 1.'),
    'minigo ladder without a run': (
        'tools.minigo_ladder', lambda t: [f'--run={MISSING}'],
        'error: --run=/nonexistent/input: no generations/*/model.npz there; '
        'pass a MiniGo run folder.'),
    'launch without a required macro': (
        'tools.launch', lambda t: LAUNCH,
        'error: DATA_DIR is %gin.REQUIRED by the gin files and nothing binds '
        'it: give it, e.g. --gin_param="DATA_DIR=\'...\'"'),
    'launch with a package that is no .tar.gz on GCS': (
        'tools.launch', lambda t: LAUNCH + [
            "--gin_param=DATA_DIR='gs://b/d'",
            "--gin_param=INIT_CHECKPOINT='gs://b/c'", '--package=gs://b/pkg'],
        'error: --output=gs://b/pkg: a remote package is one .tar.gz object'),
    'package without saying what': (
        'tools.package', lambda t: [f'{t}', f'--output={t}/out'],
        'error: Say what to package first: one of training, inference.'),
    'package of a folder without runs': (
        'tools.package', lambda t: ['training', MISSING, f'--output={t}/out'],
        'error: /nonexistent/input has no mlperf.log and no run_<i> folders'),
    'package of inference runs without their record': (
        'tools.package', lambda t: ['inference', f'{t}', f'--output={t}/out'],
        'has no submission.json: package the folder that'),
    'notebooks written with an unknown flag': (
        'tools.write_notebooks', lambda t: ['--force'],
        'error: the one flag is --check.'),
    'submission runs without v0.5 settings': (
        'inference.run', lambda t: [
            '--gin_file=mobilenet_quickstart.gin', '--noop_backend',
            f'--dataset={MISSING}',
            f'--output_dir={t}/out', '--scenario=submission'],
        'give --settings=v0.5'),
}
LAUNCH = ['--tpu=t', '--model_dir=gs://b/r', '--gin_file=bert_v3_32.gin',
          '--accelerator=v3-32', '--zone=europe-west4-a', '--project=p']


# Slow: a process each, most of them importing TensorFlow (about 4 s).
@pytest.mark.slow
@pytest.mark.parametrize('case', sorted(CASES))
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, tmp_path):
  module, args, expected = CASES[case]
  code, lines = run(tmp_path, module, *args(tmp_path))
  assert code == 2, '\n'.join(lines[-20:])
  assert len(lines) == 1 and lines[0].startswith('error: '), lines[-20:]
  assert expected in lines[0]
  assert not (tmp_path / 'out').exists()
