"""Our Mask R-CNN training step, for the benchmarks.

`ours(dtype, batch, steps, image_size)` builds the runtime's train loop
(training/step.py) for the full-size network (ResNet-50 FPN, 256 FPN
channels, the 1024 box head, 28x28 masks, 91 classes; the stem, first
stage and batch norms frozen as Google's) with Google's optimizer (momentum
SGD, weight decay 1e-4 but for biases) and synthetic images whose RPN
targets, boxes and 112x112 mask crops the real host pipeline made once
(input_pipeline/maskrcnn.py, its synthetic mode: OBJECTS_PER_IMAGE boxes
an image, each mask its whole box). The benchmark uses a smaller image than
Google's 832x1344 so that a step takes seconds on a laptop CPU; both peers
run the same size.
"""

import tensorflow as tf

from input_pipeline import fpn_anchors
from input_pipeline import maskrcnn as input_lib
from models.maskrcnn import model as maskrcnn_lib
from models.maskrcnn import task as maskrcnn_task
from training import optimizers
from training import schedules
from training import step as step_lib

NUM_CLASSES = 91
# The peers' image (garden_worker.MASKRCNN_SIZE, torchvision's --height and
# --width defaults): Google's 832x1344 would take a minute a step here.
BENCHMARK_SIZE = (384, 640)
OBJECTS_PER_IMAGE = 4  # input_pipeline.maskrcnn's synthetic mode.


def geometry(image_size: tuple) -> input_lib.Geometry:
  """Padded (short, long) `image_size`, the images scaled to fill it."""
  short, long = image_size
  return input_lib.Geometry(image_size=(short, long), short_side=short,
                            long_side_max=long,
                            anchors=fpn_anchors.AnchorConfig())


def ours(dtype: str, batch: int, steps: int, image_size: tuple):
  """A callable running `steps` steps of our train loop; and the task."""
  strategy = tf.distribute.get_strategy()
  data = input_lib.MaskRcnnInput(geometry=geometry(image_size),
                                 synthetic=True)
  task = maskrcnn_task.MaskRcnnTask(
      model=lambda **kw: maskrcnn_lib.MaskRCNN(compute_dtype=dtype, **kw),
      data=data, metric_processes=0)
  model = task.build_model()
  assert data.num_classes == NUM_CLASSES
  opt = optimizers.SgdMomentum(exclude=maskrcnn_lib.no_decay,
                               weight_decay=1e-4, mlperf_keys='maskrcnn')
  opt.build(model.trainable_variables)
  step = tf.Variable(0, dtype=tf.int64)
  ds = data.train_dataset(tf.distribute.InputContext(),
                          global_batch_size=batch)
  iterator = iter(strategy.experimental_distribute_dataset(ds))
  loop = step_lib.make_train_loop(
      strategy=strategy, model=model, optimizer=opt,
      learning_rate=schedules.GoogleMaskRcnnV07(
          base=0.02, warmup_steps=1, drop_steps=(10**6, 10**6)),
      task=task, step=step)
  n = tf.constant(steps)
  return (lambda: float(loop(iterator, n))), task
