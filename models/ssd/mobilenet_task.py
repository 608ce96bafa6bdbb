"""SSD-MobileNet-v1 detection: the SSD task (inputs, loss, NMS, COCO mAP)
on the MobileNet-v1 pyramid (models/ssd/features.py), and MLPerf Inference
v0.5's `ssd-mobilenet` benchmark for the LoadGen harness.

MLPerf Training's `ssd` is SSD-ResNet34; SSD-MobileNet-v1 has no training
benchmark: a run writes its MLPerf-style log under the name
`ssd-mobilenet`, which no compliance checker knows (a plain run log).
"""

from models.common import inference_v05
from models.ssd import task as ssd_task


class SsdMobileNetTask(ssd_task.SsdTask):
  """SsdTask under v0.5's `ssd-mobilenet`. Implements training.task.Task;
  the model is `@models.ssd.model.SSD` with `features` =
  `@models.ssd.features.MobileNetFeatures` (gin/models/ssd_mobilenet.gin)."""

  mlperf_benchmark = 'ssd-mobilenet'
  # LoadGen 6's built-in mlperf.conf still has `ssd-mobilenet`: its current
  # settings are the default, v0.5's one flag away (--settings=v0.5).
  inference_model = 'ssd-mobilenet'
  inference_performance_samples = inference_v05.performance_samples(
      'ssd-mobilenet')
