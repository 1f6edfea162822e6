"""The PNG observation codec (Ape-X Sec. 4.1, App. F) is exact and compact."""

import io

import cv2
import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from agents.replay import png


def _atari_frame_stacks(game='breakout', num_stacks=8, seed=0):
  """Real preprocessed frames: greyscale 84x84 ALE screens, stacked by 4."""
  import ale_py  # pylint: disable=g-import-not-at-top
  from ale_py import roms  # pylint: disable=g-import-not-at-top
  ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
  ale = ale_py.ALEInterface()
  ale.setInt('random_seed', seed)
  ale.loadROM(roms.get_rom_path(game))
  actions = ale.getMinimalActionSet()
  rng = np.random.default_rng(seed)
  frames = []
  for _ in range(num_stacks + 40):
    for _ in range(4):  # Action repeat 4.
      ale.act(actions[rng.integers(len(actions))])
    if ale.game_over():
      ale.reset_game()
    frames.append(cv2.resize(ale.getScreenGrayscale(), (84, 84),
                             interpolation=cv2.INTER_AREA))
  frames = frames[40:]  # Past the static start screen.
  return [np.stack(frames[i:i + 4], axis=-1)
          for i in range(len(frames) - 3)]


@pytest.fixture(scope='module')
def atari_stacks():
  return _atari_frame_stacks()


@pytest.mark.parametrize('shape', [(84, 84, 4), (10, 7, 3), (5, 6, 1)])
def test_round_trip_exact_random(shape):
  obs = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
  data = png.encode_observation(obs)
  assert isinstance(data, bytes) and data[:8] == b'\x89PNG\r\n\x1a\n'
  decoded = png.decode_observation(data, shape)
  assert decoded.dtype == np.uint8 and decoded.flags['C_CONTIGUOUS']
  np.testing.assert_array_equal(decoded, obs)


def test_round_trip_exact_and_compact_on_real_frames(atari_stacks):
  sizes = []
  for obs in atari_stacks:
    data = png.encode_observation(obs)
    sizes.append(len(data))
    np.testing.assert_array_equal(png.decode_observation(data), obs)
  # Measured ~950 bytes for 28,224 raw: allow a wide margin.
  assert np.mean(sizes) < obs.nbytes / 8


def test_layout_tiles_frames_side_by_side():
  obs = np.zeros((84, 84, 4), np.uint8)
  for k in range(4):
    obs[..., k] = 10 * (k + 1)
  image = cv2.imdecode(np.frombuffer(png.encode_observation(obs), np.uint8),
                       cv2.IMREAD_UNCHANGED)
  assert image.shape == (84, 336)
  for k in range(4):
    assert np.all(image[:, 84 * k:84 * (k + 1)] == 10 * (k + 1))


@pytest.mark.parametrize('level', [0, 1, 6, 9])
def test_output_is_a_standard_png(atari_stacks, level):
  """Other decoders read our files, and we read other encoders' files."""
  obs = atari_stacks[0]
  tiled = np.concatenate([obs[..., k] for k in range(4)], axis=1)
  ours = png.encode_observation(obs, compression_level=level)
  np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(ours))),
                                tiled)
  np.testing.assert_array_equal(
      cv2.imdecode(np.frombuffer(ours, np.uint8), cv2.IMREAD_UNCHANGED),
      tiled)
  # A libpng-written (filtered) PNG of the same tiling decodes too.
  theirs = cv2.imencode('.png', tiled)[1].tobytes()
  np.testing.assert_array_equal(png.decode_observation(theirs), obs)
  np.testing.assert_array_equal(
      png.tf_decode_observation(tf.constant(theirs)).numpy(), obs)


def test_tf_decoder_matches_numpy_decoder(atari_stacks):
  encoded = [png.encode_observation(obs) for obs in atari_stacks[:4]]
  random_obs = np.random.default_rng(1).integers(0, 256, (84, 84, 4),
                                                 dtype=np.uint8)
  encoded.append(png.encode_observation(random_obs))
  expected = np.stack([png.decode_observation(d) for d in encoded])
  eager = np.stack([png.tf_decode_observation(tf.constant(d)).numpy()
                    for d in encoded])
  np.testing.assert_array_equal(eager, expected)
  # Inside a tf.data pipeline, as the learner uses it (parallel map).
  dataset = tf.data.Dataset.from_tensor_slices(encoded).map(
      png.tf_decode_observation, num_parallel_calls=2).batch(len(encoded))
  batch = next(iter(dataset))
  assert batch.dtype == tf.uint8 and batch.shape == (len(encoded), 84, 84, 4)
  np.testing.assert_array_equal(batch.numpy(), expected)


def test_rejects_bad_inputs():
  with pytest.raises(TypeError):
    png.encode_observation(np.zeros((84, 84, 4), np.float32))
  with pytest.raises(ValueError):
    png.encode_observation(np.zeros((84, 84), np.uint8))
  with pytest.raises(ValueError):
    png.encode_observation(np.zeros((84, 84, 4), np.uint8), 10)
  data = png.encode_observation(np.zeros((84, 84, 4), np.uint8))
  with pytest.raises(ValueError):
    png.decode_observation(data, (84, 84, 2))
  with pytest.raises(ValueError):
    png.decode_observation(b'not a png')
