"""MobileNet-v1 image classification: the ResNet task's inputs, loss and
top-1 with MobileNet-v1's pixels in [-1, 1], and MLPerf Inference v0.5's
`mobilenet` benchmark for the LoadGen harness.

MLPerf Training has no MobileNet benchmark: a run writes its MLPerf-style
log under the name `mobilenet`, which no compliance checker knows (a plain
run log; docs/inference.md).
"""

from input_pipeline import image_preprocessing
from models.common import inference_v05
from models.resnet import task as resnet_task


class MobileNetTask(resnet_task.ResNetTask):
  """ResNetTask with MobileNet-v1's input scaling and v0.5's benchmark.

  Implements training.task.Task.
  """

  mlperf_benchmark = 'mobilenet'
  normalize = staticmethod(image_preprocessing.to_unit_range)

  # MLPerf Inference v0.5 `mobilenet`: LoadGen 6's built-in mlperf.conf no
  # longer has the model, so its v0.5 settings are the defaults.
  inference_model = 'mobilenet'
  inference_performance_samples = inference_v05.performance_samples('mobilenet')
  inference_settings = inference_v05.settings('mobilenet')
