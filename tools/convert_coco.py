"""Converts COCO detection annotations and images into SSD's and Mask
R-CNN's TFRecords.

  python -m tools.convert_coco --annotations=instances_train2017.json \
      --images=train2017/ --output_dir=OUT --split=train --num_shards=256
  python -m tools.convert_coco --annotations=instances_val2017.json \
      --images=val2017/ --output_dir=OUT --split=val --num_shards=32 \
      [--include_masks]

Writes `OUT/<split>-0000i-of-0000n` in the schema Google's TPU
`create_coco_tf_record.py` writes (input_pipeline/coco.py reads it), one
record an image in the annotation file's image order, spread over the shards
in turn so that every host's share is alike; `OUT/categories.json` (the
category ids and names; a second split must list the same ones); and, for
every split but train, `OUT/<split>_annotations.json`, the annotation file
itself, which the COCO evaluation scores against. `--include_masks` adds
each instance's mask as Google's converter does (`image/object/mask`, a
one-channel PNG of 0 and 1 the image's size: tools/formats/coco_masks.py),
from polygons, RLE or a crowd region's uncompressed RLE.

Checks before anything is written: the file must be COCO (`images`,
`annotations`, `categories`); an annotation naming an unknown image or
category, a box with no area or reaching outside its image by more than a
pixel, an image file that is missing or not a JPEG or PNG, and with
`--include_masks` a missing or malformed segmentation (a polygon of fewer
than three points, an RLE of another size than its image) stop the run
naming the file and the annotation or image id. `--on_bad_annotation=skip`
leaves bad boxes out and counts them instead. Images without boxes are kept
(COCO's val2017 has 48; training leaves them out, the evaluation needs
them). Boxes reaching less than a pixel past the edge are clipped, as COCO
has many. PNG images (and JPEGs that are not RGB) are re-encoded as RGB
JPEGs. Every file is staged and renamed when all are complete
(core/staged_files.py).
"""

import collections
import dataclasses
import json
import os

from absl import app
from absl import flags

from core import entry_point

from core import startup
from tools.formats import coco_masks

ON_BAD_ANNOTATION = ('fail', 'skip')
CATEGORIES_FILE = 'categories.json'
EDGE_TOLERANCE = 1.0  # Pixels a box may reach past the image and be clipped.


@dataclasses.dataclass
class Converted:
  paths: list  # Record files written.
  images: int
  boxes: int
  images_without_boxes: int
  skipped: list  # (annotation id, reason) of boxes left out.


def _load_json(path: str) -> dict:
  tf = startup.import_tensorflow()
  try:
    with tf.io.gfile.GFile(path) as f:
      data = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f'{path} is not JSON ({e}).') from e
  missing = [k for k in ('images', 'annotations', 'categories')
             if not isinstance(data, dict) or k not in data]
  if missing:
    raise ValueError(f'{path} is not a COCO annotation file: it has no '
                     f'{", ".join(repr(k) for k in missing)}.')
  return data


def check_annotations(data: dict, path: str, on_bad_annotation: str,
                      include_masks: bool = False):
  """Boxes by image id as [(category, ymin, xmin, ymax, xmax, crowd, area,
  segmentation or None)] normalised, and the (annotation id, reason) left
  out.

  Raises:
    ValueError: naming `path` and the annotation id, on the first problem
      (with 'fail').
  """
  images = {}
  for image in data['images']:
    if not {'id', 'file_name', 'height', 'width'} <= set(image):
      raise ValueError(f'{path}: image entry {image.get("id", "?")} lacks '
                       'id, file_name, height or width.')
    if image['id'] in images:
      raise ValueError(f'{path}: image id {image["id"]} is listed twice.')
    images[image['id']] = image
  categories = {c['id'] for c in data['categories']}
  boxes, skipped = collections.defaultdict(list), []
  for ann in data['annotations']:
    aid = ann.get('id', '?')
    where = f'{path}, annotation {aid}'
    if ann.get('image_id') not in images:
      raise ValueError(f'{where} names image {ann.get("image_id")}, which '
                       'the file does not list.')
    if ann.get('category_id') not in categories:
      raise ValueError(f'{where} names category {ann.get("category_id")}, '
                       'which the file does not list.')
    image = images[ann['image_id']]
    h, w = float(image['height']), float(image['width'])
    x, y, bw, bh = (float(v) for v in ann['bbox'])
    problem = None
    if bw <= 0 or bh <= 0:
      problem = f'box {ann["bbox"]} has no area'
    elif (x < -EDGE_TOLERANCE or y < -EDGE_TOLERANCE or
          x + bw > w + EDGE_TOLERANCE or y + bh > h + EDGE_TOLERANCE):
      problem = (f'box {ann["bbox"]} reaches outside its {w:g}x{h:g} image '
                 f'{image["file_name"]}')
    if not problem and include_masks:
      problem = coco_masks.check(ann.get('segmentation'), image['height'],
                                 image['width']) if 'segmentation' in ann \
          else 'no segmentation (--include_masks needs one)'
    if problem:
      if on_bad_annotation == 'fail':
        raise ValueError(f'{where}: {problem} (rerun with '
                         '--on_bad_annotation=skip to leave such '
                         'annotations out).')
      skipped.append((aid, problem))
      continue
    x0, y0 = max(x, 0.0), max(y, 0.0)
    x1, y1 = min(x + bw, w), min(y + bh, h)
    boxes[ann['image_id']].append(
        (ann['category_id'], y0 / h, x0 / w, y1 / h, x1 / w,
         int(ann.get('iscrowd', 0)), float(ann.get('area', bw * bh)),
         ann['segmentation'] if include_masks else None))
  return images, boxes, skipped


def make_example(jpeg: bytes, image: dict, boxes: list, height: int,
                 width: int, masks: list | None = None):
  """The image's tf.train.Example; `masks`, PNG bytes an instance, adds
  `image/object/mask`."""
  tf = startup.import_tensorflow()

  def floats(i):
    return tf.train.Feature(float_list=tf.train.FloatList(
        value=[b[i] for b in boxes]))

  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  def raw(value: bytes):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

  feature = {
      'image/encoded': raw(jpeg),
      'image/format': raw(b'jpeg'),
      'image/source_id': raw(str(image['id']).encode()),
      'image/filename': raw(image['file_name'].encode()),
      'image/height': ints([height]),
      'image/width': ints([width]),
      'image/object/class/label': ints([b[0] for b in boxes]),
      'image/object/bbox/ymin': floats(1),
      'image/object/bbox/xmin': floats(2),
      'image/object/bbox/ymax': floats(3),
      'image/object/bbox/xmax': floats(4),
      'image/object/is_crowd': ints([b[5] for b in boxes]),
      'image/object/area': floats(6),
  }
  if masks is not None:
    feature['image/object/mask'] = tf.train.Feature(
        bytes_list=tf.train.BytesList(value=masks))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def instance_masks(boxes: list, height: int, width: int, image: dict):
  """PNG bytes of each box's segmentation."""
  masks = []
  for box in boxes:
    mask = coco_masks.decode(box[7], height, width)
    if mask.shape != (height, width):
      raise ValueError(f'Image {image["id"]}: a segmentation decodes to '
                       f'{mask.shape[1]}x{mask.shape[0]}, not the image\'s '
                       f'{width}x{height}.')
    masks.append(coco_masks.png(mask))
  return masks


def read_image(folder: str, image: dict) -> tuple[bytes, int, int]:
  """RGB JPEG bytes, height and width of the image file of `image`."""
  tf = startup.import_tensorflow()
  from tools import convert_image_folder  # pylint: disable=import-outside-toplevel
  path = os.path.join(folder, image['file_name'])
  if not tf.io.gfile.exists(path):
    raise ValueError(f'Image {image["id"]}: {path} does not exist.')
  with tf.io.gfile.GFile(path, 'rb') as f:
    data = f.read()
  if not (data.startswith(b'\xff\xd8\xff') or data.startswith(b'\x89PNG')):
    raise ValueError(f'Image {image["id"]}: {path} is not a JPEG or PNG '
                     f'file (starts {data[:4].hex(" ") or "empty"}).')
  jpeg, height, width = convert_image_folder.to_rgb_jpeg(data, path)
  if (height, width) != (image['height'], image['width']):
    raise ValueError(f'Image {image["id"]}: {path} is {width}x{height} but '
                     f'the annotations say {image["width"]}x'
                     f'{image["height"]}.')
  return jpeg, height, width


def _check_categories(output_dir: str, categories: list) -> str:
  """categories.json's text; an existing one must list the same ids."""
  tf = startup.import_tensorflow()
  listed = sorted(({'id': c['id'], 'name': c.get('name', str(c['id']))}
                   for c in categories), key=lambda c: c['id'])
  path = os.path.join(output_dir, CATEGORIES_FILE)
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      have = sorted(c['id'] for c in json.load(f))
    if have != [c['id'] for c in listed]:
      raise ValueError(f'{path} lists other category ids ({len(have)}) than '
                       f'these annotations ({len(listed)}): convert every '
                       'split of one data set into one folder.')
  return json.dumps(listed, indent=1)


def convert(*, annotations: str, images: str, output_dir: str, split: str,
            num_shards: int, on_bad_annotation: str = 'fail',
            include_masks: bool = False) -> Converted:
  """Writes the split's records (and annotation copy, categories.json).

  Raises:
    ValueError: on bad input, before any file appears.
  """
  tf = startup.import_tensorflow()
  from core import staged_files  # pylint: disable=import-outside-toplevel
  if on_bad_annotation not in ON_BAD_ANNOTATION:
    raise ValueError(f'on_bad_annotation must be one of {ON_BAD_ANNOTATION}, '
                     f'got {on_bad_annotation!r}.')
  if num_shards < 1:
    raise ValueError(f'num_shards must be at least 1, got {num_shards}.')
  data = _load_json(annotations)
  entries, boxes, skipped = check_annotations(data, annotations,
                                              on_bad_annotation, include_masks)
  if not entries:
    raise ValueError(f'{annotations} lists no images.')
  tf.io.gfile.makedirs(output_dir)
  categories = _check_categories(output_dir, data['categories'])
  paths = [os.path.join(output_dir, f'{split}-{i:05d}-of-{num_shards:05d}')
           for i in range(num_shards)]
  extra = [os.path.join(output_dir, CATEGORIES_FILE)]
  if split != 'train':
    extra.append(os.path.join(output_dir, f'{split}_annotations.json'))
  written = empty = box_count = 0
  with staged_files.staged(paths + extra) as temporaries:
    writers = [tf.io.TFRecordWriter(p) for p in temporaries[:num_shards]]
    try:
      for image in entries.values():
        jpeg, height, width = read_image(images, image)
        own = boxes.get(image['id'], [])
        masks = (instance_masks(own, height, width, image) if include_masks
                 else None)
        writers[written % num_shards].write(make_example(
            jpeg, image, own, height, width, masks).SerializeToString())
        written += 1
        empty += not own
        box_count += len(own)
    finally:
      for w in writers:
        w.close()
    with tf.io.gfile.GFile(temporaries[num_shards], 'w') as f:
      f.write(categories)
    if split != 'train':
      tf.io.gfile.copy(annotations, temporaries[num_shards + 1],
                       overwrite=True)
  return Converted(paths=paths, images=written, boxes=box_count,
                   images_without_boxes=empty, skipped=skipped)


def main(argv):
  del argv
  done = convert(annotations=FLAGS.annotations, images=FLAGS.images,
                 output_dir=FLAGS.output_dir, split=FLAGS.split,
                 num_shards=FLAGS.num_shards,
                 on_bad_annotation=FLAGS.on_bad_annotation,
                 include_masks=FLAGS.include_masks)
  for aid, reason in done.skipped:
    print(f'skipped annotation {aid}: {reason}')
  print(f'wrote {done.images} images ({done.boxes} boxes'
        f'{" with masks" if FLAGS.include_masks else ""}; '
        f'{done.images_without_boxes} images without boxes) to '
        f'{len(done.paths)} files ({done.paths[0]} ...); skipped '
        f'{len(done.skipped)} bad boxes')


if __name__ == '__main__':
  flags.DEFINE_string('annotations', None, 'COCO instances JSON file.')
  flags.DEFINE_string('images', None, 'Folder of the images it names.')
  flags.DEFINE_string('output_dir', None, 'Where the records go.')
  flags.DEFINE_string('split', None, "Record name prefix: 'train', 'val', ...")
  flags.DEFINE_integer('num_shards', 8, 'Record files to write.')
  flags.DEFINE_enum('on_bad_annotation', 'fail', ON_BAD_ANNOTATION,
                    'A bad box: stop naming it, or leave it out and count.')
  flags.DEFINE_bool('include_masks', False,
                    'Write each instance\'s mask (PNG) for Mask R-CNN.')
  flags.mark_flags_as_required(['annotations', 'images', 'output_dir',
                                'split'])
  FLAGS = flags.FLAGS
  entry_point.parse_flags_early(lambda: None)
  app.run(entry_point.tool_main(main))
