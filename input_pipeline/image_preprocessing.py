"""ResNet image preprocessing: fused JPEG decode+crop, flip, resize.

The host pipeline emits float32 pixel values in [0, 255]; `normalize` (mean
and stddev) runs on the device at the start of the step. It is affine, so it
costs nothing there, while on the host it was a third of the per-image work
(the host is the bottleneck of a TPU input pipeline).

Randomness is stateless and keyed by (seed, example index), so a given example
gets the same crop whatever the thread scheduling, and a resumed run sees the
same augmentation as an uninterrupted one.
"""

import tensorflow as tf

# ImageNet RGB statistics on the 0..255 scale (the MLPerf reference values).
MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
# Eval keeps the central 224/256 of the shorter side, as the reference does.
EVAL_CROP_FRACTION = 224 / 256


def normalize(image: tf.Tensor) -> tf.Tensor:
  """Float32 image scaled by the ImageNet mean and stddev (runs on device)."""
  image = tf.cast(image, tf.float32)
  return (image - tf.constant(MEAN_RGB)) / tf.constant(STDDEV_RGB)


def to_unit_range(image: tf.Tensor) -> tf.Tensor:
  """Float32 image scaled to [-1, 1], (x / 255 - 0.5) x 2: TF-slim's
  Inception preprocessing, MobileNet-v1's (MLPerf Inference v0.5's
  reference harness, `pre_process_mobilenet`)."""
  return (tf.cast(image, tf.float32) / 255.0 - 0.5) * 2.0


RESIZE_METHODS = ('bilinear', 'bicubic')


def _resize(image: tf.Tensor, image_size: int, method: str) -> tf.Tensor:
  """Resizes one HxWx3 image to image_size x image_size, float32.

  'bilinear': TF2's `tf.image.resize` (half-pixel centres, no antialias), as
  this suite has always resized. 'bicubic': exactly Google's v0.7 call,
  TF1's `tf.image.resize_bicubic` with its defaults (no half-pixel centres,
  corners not aligned; imagenet_input.py, training and eval).
  """
  if method == 'bicubic':
    return tf.raw_ops.ResizeBicubic(
        images=image[None], size=[image_size, image_size],
        align_corners=False, half_pixel_centers=False)[0]
  return tf.image.resize(image, [image_size, image_size],
                         method=tf.image.ResizeMethod.BILINEAR,
                         antialias=False)


def _distorted_box(shape, seed, *, min_object_covered, area_range,
                   aspect_ratio_range, max_attempts):
  """A random crop window (offset_y, offset_x, height, width) for `shape`."""
  whole_image = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      shape, bounding_boxes=whole_image, seed=seed,
      min_object_covered=min_object_covered,
      aspect_ratio_range=aspect_ratio_range, area_range=area_range,
      max_attempts=max_attempts, use_image_if_no_bounding_boxes=True)
  return tf.stack([begin[0], begin[1], size[0], size[1]])


def train_image(image_bytes: tf.Tensor, seed: tf.Tensor, *, image_size: int,
                flip: bool = True, min_object_covered: float = 0.1,
                area_range=(0.08, 1.0), aspect_ratio_range=(0.75, 1.33),
                max_attempts: int = 10, decoded: bool = False,
                resize: str = 'bilinear') -> tf.Tensor:
  """Random-crop, flip and resize one training image.

  Args:
    image_bytes: JPEG bytes, or a decoded uint8 HxWx3 image if `decoded`.
    seed: int64 [2] stateless seed for this example.
    image_size: output height and width.
    flip: random left-right flip.
    min_object_covered: `sample_distorted_bounding_box` argument.
    area_range: fraction of the image area the crop may cover.
    aspect_ratio_range: crop aspect ratio range.
    max_attempts: attempts before falling back to the whole image.
    decoded: the input is already decoded (decoded-image cache).
    resize: 'bilinear' or 'bicubic' (see _resize). With 'bicubic' the flip
      follows the resize, as in Google's code: its resize is not symmetric
      under a flip.

  Returns:
    float32 [image_size, image_size, 3] pixel values in [0, 255].
  """
  crop_seed, flip_seed = tf.unstack(
      tf.random.experimental.stateless_split(seed, num=2))
  shape = (tf.shape(image_bytes)[:3] if decoded else
           tf.image.extract_jpeg_shape(image_bytes))
  window = _distorted_box(shape, crop_seed,
                          min_object_covered=min_object_covered,
                          area_range=area_range,
                          aspect_ratio_range=aspect_ratio_range,
                          max_attempts=max_attempts)
  if decoded:
    image = tf.image.crop_to_bounding_box(image_bytes, window[0], window[1],
                                          window[2], window[3])
  else:
    # One op decodes only the crop window: the fused path the TPU reference
    # uses, which skips most of the IDCT work for small crops.
    image = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
  if resize == 'bicubic':
    image = _resize(image, image_size, resize)
    if flip:
      image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return image
  if flip:
    # On the uint8 crop: a quarter of the bytes of the resized float image.
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
  return _resize(image, image_size, resize)


def eval_image(image_bytes: tf.Tensor, *, image_size: int,
               crop_fraction: float = EVAL_CROP_FRACTION,
               resize: str = 'bilinear') -> tf.Tensor:
  """Central crop of `crop_fraction` of the shorter side, resized; [0, 255]."""
  shape = tf.image.extract_jpeg_shape(image_bytes)
  height, width = shape[0], shape[1]
  crop = tf.cast(crop_fraction * tf.cast(tf.minimum(height, width),
                                         tf.float32), tf.int32)
  offset_y = (height - crop + 1) // 2
  offset_x = (width - crop + 1) // 2
  window = tf.stack([offset_y, offset_x, crop, crop])
  image = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
  return _resize(image, image_size, resize)
