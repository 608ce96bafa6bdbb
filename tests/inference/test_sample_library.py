"""The sample library reads lazily: only what LoadGen loaded is in memory."""

import numpy as np
import tensorflow as tf

from inference import sample_library
from tests import helpers


def eval_images(task):
  """Every real eval image, in order, from one plain pass of the pipeline."""
  data = task.data
  steps = data.eval_steps(num_pipelines=1, global_batch_size=64)
  ds = data.eval_dataset(tf.distribute.InputContext(), global_batch_size=64,
                         steps=steps)
  batches = [(b['image'].numpy(), b['mask'].numpy()) for b in ds]
  return np.concatenate([i[m == 1] for i, m in batches])


def test_only_loaded_samples_are_held(quickstart_data):
  task = helpers.inference_task('gin/resnet_quickstart.gin', quickstart_data)
  library = sample_library.EvalSampleLibrary(task=task)
  assert library.total == 360
  assert library.loaded() == [] and library.held_bytes() == 0
  assert set(library.references()) == {'label'}  # No images at start.
  library.load([300, 5, 7])
  assert library.loaded() == [5, 7, 300]
  image_bytes = 32 * 32 * 3 * 4
  assert library.held_bytes() == 3 * (image_bytes + 4)  # + an int32 label.
  images = eval_images(task)
  np.testing.assert_array_equal(library.get([300, 5])['images'],
                                images[[300, 5]])
  library.unload([5, 7])
  assert library.loaded() == [300]


def test_chunks_loaded_in_order_and_out_of_order_match_the_pipeline(
    quickstart_data):
  task = helpers.inference_task('gin/resnet_quickstart.gin', quickstart_data)
  library = sample_library.EvalSampleLibrary(task=task, count=200)
  assert library.total == 200
  images = eval_images(task)
  for chunk in (range(0, 70), range(70, 140), range(10, 20),
                range(140, 200)):
    library.unload(range(200))
    library.load(chunk)
    assert library.loaded() == list(chunk)
    np.testing.assert_array_equal(library.get(list(chunk))['images'],
                                  images[list(chunk)])


def test_a_set_repeated_whole_to_a_qsl_size(quickstart_data):
  # MLPerf Inference v0.5's QSL sizes (1,024 for MobileNet) over the 360
  # digits: the set three times, so a quality over it is the set's.
  task = helpers.inference_task('gin/resnet_quickstart.gin', quickstart_data)
  library = sample_library.EvalSampleLibrary(task=task, repeat_to=1024)
  assert (library.real_total, library.total) == (360, 1080)
  labels = library.references()['label']
  np.testing.assert_array_equal(labels, np.tile(labels[:360], 3))
  library.load([5, 365, 725, 1079])
  images = eval_images(task)
  np.testing.assert_array_equal(
      library.get([5, 365, 725, 1079])['images'], images[[5, 5, 5, 359]])
  # A repeated sample's arrays are held once.
  assert library.held_bytes() == 2 * (32 * 32 * 3 * 4 + 4)
  library.unload([5, 365])
  assert library.loaded() == [725, 1079]
  small = sample_library.EvalSampleLibrary(task=task, count=100,
                                           repeat_to=250)
  assert (small.real_total, small.total) == (100, 300)
