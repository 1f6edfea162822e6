"""Lossless PNG codec for stacked uint8 frames (Ape-X Sec. 4.1, App. F).

Ape-X: "observation data is compressed using a PNG codec when sent and when
stored in the replay. The learner decompresses data as it prefetches it, in
parallel with computing and applying gradients."

Layout: a [H, W, C] frame stack (84x84x4 for Atari) is tiled side by side
into one [H, W*C] greyscale image, frame k in columns [k*W, (k+1)*W). One
greyscale PNG compresses better than 4 separate ones (one header, and the
filters see the flat backgrounds of all frames) and decodes in one call.

The encoder writes the PNG itself (signature, IHDR, one IDAT, IEND) with
every row's filter set to None: libpng's adaptive per-row filter search is
most of what cv2 and PIL spend, and on Atari frames (flat backgrounds,
repeated sprites) unfiltered rows also deflate smaller. The files are
ordinary 8-bit greyscale PNGs that any decoder reads. Actors encode every
step, so encode speed matters most, and zlib level 1 (the fast end) keeps an
Atari stack many times smaller than raw. Decoding uses cv2.imdecode (faster
than PIL on these images, reads any PNG); the learner decodes with
`tf_decode_observation` inside its tf.data pipeline.

Uniformly random frames do not compress (the PNG is slightly larger than
raw); the codec is still exact.
"""

import struct
from typing import Sequence, Tuple
import zlib

import cv2
import numpy as np

# Atari frame stack after DQN preprocessing (Ape-X App. C; the stack size and
# resize are not stated there, 4 x 84x84 is the DQN standard: UNVERIFIED).
ATARI_OBSERVATION_SHAPE = (84, 84, 4)

# zlib level: 1 is the fast end; actors encode every step (module docstring).
DEFAULT_COMPRESSION_LEVEL = 1

_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_IEND = b'\x00\x00\x00\x00IEND\xaeB`\x82'


def _png_chunk(tag: bytes, data: bytes) -> bytes:
  return (struct.pack('>I', len(data)) + tag + data +
          struct.pack('>I', zlib.crc32(tag + data)))


def _check_shape(shape: Sequence[int]) -> Tuple[int, int, int]:
  if len(shape) != 3 or any(int(d) < 1 for d in shape):
    raise ValueError(f'observation shape must be [H, W, C] with positive '
                     f'sizes, got {tuple(shape)}.')
  return tuple(int(d) for d in shape)


def encode_observation(
    observation: np.ndarray,
    compression_level: int = DEFAULT_COMPRESSION_LEVEL) -> bytes:
  """Encodes a uint8 [H, W, C] frame stack as one greyscale PNG (lossless).

  Args:
    observation: uint8 array [H, W, C], e.g. [84, 84, 4].
    compression_level: zlib level 0..9 (speed vs size).

  Returns:
    The PNG file's bytes.
  """
  observation = np.asarray(observation)
  if observation.dtype != np.uint8:
    raise TypeError(f'observation must be uint8, got {observation.dtype}.')
  height, width, channels = _check_shape(observation.shape)
  if not 0 <= compression_level <= 9:
    raise ValueError(
        f'compression_level must be in [0, 9], got {compression_level}.')
  # Scanlines: a filter byte (0 = None) then the row. Tiling [H, W, C] ->
  # [H, C, W] -> [H, C*W] puts frame k in columns k*W .. (k+1)*W - 1.
  rows = np.zeros((height, 1 + channels * width), dtype=np.uint8)
  rows[:, 1:] = observation.transpose(0, 2, 1).reshape(height,
                                                       channels * width)
  # IHDR: width, height, bit depth 8, colour type 0 (greyscale),
  # compression 0, filter method 0, no interlace.
  header = struct.pack('>IIBBBBB', channels * width, height, 8, 0, 0, 0, 0)
  return b''.join((
      _PNG_SIGNATURE,
      _png_chunk(b'IHDR', header),
      _png_chunk(b'IDAT', zlib.compress(rows.tobytes(),
                                        int(compression_level))),
      _IEND,
  ))


def decode_observation(
    data: bytes,
    shape: Sequence[int] = ATARI_OBSERVATION_SHAPE) -> np.ndarray:
  """Inverse of `encode_observation`: PNG bytes -> uint8 [H, W, C].

  Args:
    data: bytes from `encode_observation` (or a 0-d array holding them).
    shape: the [H, W, C] shape that was encoded.

  Returns:
    uint8 array of `shape`, exactly the encoded observation.
  """
  height, width, channels = _check_shape(shape)
  if isinstance(data, np.ndarray):
    # A scalar string as Reverb's numpy client returns it (0-d object array).
    data = data.item()
  if not isinstance(data, (bytes, bytearray, memoryview)):
    raise TypeError(f'data must be PNG bytes, got {type(data).__name__}.')
  tiled = cv2.imdecode(np.frombuffer(data, dtype=np.uint8),
                       cv2.IMREAD_UNCHANGED)
  if tiled is None:
    raise ValueError('data is not a decodable PNG image.')
  if tiled.dtype != np.uint8 or tiled.shape != (height, width * channels):
    raise ValueError(
        f'PNG holds a {tiled.dtype} image of shape {tiled.shape}; expected '
        f'uint8 ({height}, {width * channels}) for observation shape '
        f'{(height, width, channels)}.')
  return np.ascontiguousarray(
      tiled.reshape(height, channels, width).transpose(0, 2, 1))


def tf_decode_observation(data, shape: Sequence[int] = ATARI_OBSERVATION_SHAPE):
  """TF op version of `decode_observation`, for tf.data pipelines.

  Meant for `dataset.map(..., num_parallel_calls=tf.data.AUTOTUNE)` on the
  learner, so decompression runs on CPU threads in parallel with training
  (App. F). Works on one scalar string; `tf.io.decode_png` is not batched, so
  map before batching.

  Args:
    data: scalar tf.string tensor of PNG bytes from `encode_observation`.
    shape: the [H, W, C] shape that was encoded.

  Returns:
    uint8 tensor of `shape`.
  """
  # TF is imported here so actors and tools that only encode stay light.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  height, width, channels = _check_shape(shape)
  tiled = tf.io.decode_png(data, channels=1, dtype=tf.uint8)
  tiled = tf.ensure_shape(tiled, [height, width * channels, 1])
  return tf.transpose(
      tf.reshape(tiled, [height, channels, width]), perm=[0, 2, 1])
