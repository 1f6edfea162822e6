"""Environment adapters: Atari-57 over ale-py, dm_control tasks, Catch.

The preprocessing is checked against an independent plain-numpy/OpenCV
reference built on a second emulator, because a silent preprocessing bug
(wrong pooling, wrong stack order, off-by-one frame) would not crash anything
and would only show up as worse scores days later.
"""

import csv
import os

import cv2
import dm_env
import numpy as np
import pytest

import ale_py
from ale_py import roms

from reproductions.environments import ATARI57_GAMES
from reproductions.environments import AtariConfig
from reproductions.environments import CONTROL_TASKS
from reproductions.environments import make_environment
from reproductions.environments import atari as atari_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REFERENCE_CSV = os.path.join(_REPO, 'results', 'reference',
                              'atari57_reference.csv')


def _random_actions(env, n, seed=0):
  num = env.action_spec().num_values
  return [int(a) for a in np.random.default_rng(seed).integers(num, size=n)]


# Names.


def test_atari57_names_are_57_distinct_rom_ids():
  assert len(ATARI57_GAMES) == 57
  assert len(set(ATARI57_GAMES)) == 57
  for game in ATARI57_GAMES:
    assert os.path.exists(roms.get_rom_path(game)), game


def test_atari57_names_match_reference_csv():
  if not os.path.exists(_REFERENCE_CSV):
    pytest.skip(f'{_REFERENCE_CSV} not present')
  with open(_REFERENCE_CSV) as f:
    games = [row[0] for row in csv.reader(f)][1:]
  assert sorted(games) == sorted(ATARI57_GAMES)


# Atari: loading, specs, shapes.


def test_all_57_games_load_and_step():
  for game in ATARI57_GAMES:
    env = make_environment(f'atari/{game}', seed=0)
    spec = env.observation_spec()
    assert spec.shape == (84, 84, 4) and spec.dtype == np.uint8
    timestep = env.reset()
    assert timestep.first()
    spec.validate(timestep.observation)
    for action in _random_actions(env, 10):
      timestep = env.step(action)
      spec.validate(timestep.observation)
      assert timestep.reward.dtype == np.float32
      assert timestep.discount.dtype == np.float32
      if timestep.last():
        timestep = env.reset()
    assert env.episode_frames > 0, game


def test_specs_minimal_and_full_action_sets():
  pong = make_environment('atari/pong', seed=0)
  assert pong.action_spec().num_values == 6  # Pong's minimal set.
  full = make_environment('atari/pong', seed=0, full_action_space=True)
  assert full.action_spec().num_values == 18
  assert make_environment(
      'atari/ms_pacman', config=AtariConfig.impala_training(multi_task=True)
  ).action_spec().num_values == 18
  assert pong.reward_spec().dtype == np.float32
  assert pong.discount_spec().dtype == np.float32
  timestep = pong.reset()
  assert timestep.observation.shape == (84, 84, 4)
  assert timestep.observation.dtype == np.uint8
  assert timestep.observation.flags['C_CONTIGUOUS']
  # Observations are fresh arrays: an agent may keep them.
  first = timestep.observation
  kept = first.copy()
  for _ in range(5):
    pong.step(0)
  np.testing.assert_array_equal(first, kept)


def test_negative_action_is_rejected():
  env = make_environment('atari/pong', seed=0)
  env.reset()
  with pytest.raises(IndexError):
    env.step(-1)


# Atari: preprocessing against an independent reference.


def _reference_frames(game, seed, actions):
  """Plain numpy/OpenCV Mnih et al. 2015 preprocessing on a second ALE."""
  ale = ale_py.ALEInterface()
  ale.setLoggerMode(ale_py.LoggerMode.Error)
  ale.setInt('random_seed', seed)
  ale.setFloat('repeat_action_probability', 0.0)
  ale.setInt('max_num_frames_per_episode', 108_000)
  ale.loadROM(roms.get_rom_path(game))
  action_set = ale.getMinimalActionSet()
  ale.reset_game()

  def shrink(grey):
    return cv2.resize(grey, (84, 84), interpolation=cv2.INTER_AREA)

  frames = [shrink(ale.getScreenGrayscale())]
  pooled = [ale.getScreenGrayscale()]
  for action in actions:
    screens = []
    for _ in range(4):
      ale.act(action_set[action])
      screens.append(ale.getScreenGrayscale())
    grey = np.maximum(screens[-2], screens[-1])
    pooled.append(grey)
    frames.append(shrink(grey))
  return frames, pooled


def _exact_half_ties(grey):
  """Where the exact 210x160 -> 84x84 area average is a .5 tie."""
  wy = atari_lib._area_weights(210, 84)  # pylint: disable=protected-access
  wx = atari_lib._area_weights(160, 84)  # pylint: disable=protected-access
  numerator = wy.T @ grey.astype(np.int64) @ wx  # over 210 * 160
  denominator = 210 * 160
  return (2 * numerator) % (2 * denominator) == denominator


def _assert_area_equal(ours, reference, grey):
  # OpenCV's float rounding decides exact half-way values either way; ours
  # may differ by one grey level there and nowhere else.
  diff = ours.astype(np.int32) - reference.astype(np.int32)
  assert np.abs(diff).max() <= 1
  assert np.all((diff == 0) | _exact_half_ties(grey))


@pytest.mark.parametrize('game', ['pong', 'space_invaders', 'ms_pacman'])
def test_max_pool_resize_and_stack_match_reference(game):
  seed, steps = 3, 60
  env = make_environment(f'atari/{game}', seed=seed)
  actions = _random_actions(env, steps, seed=1)
  frames, pooled = _reference_frames(game, seed, actions)

  observation = env.reset().observation
  for k in range(4):  # The first observation repeats the first frame.
    _assert_area_equal(observation[:, :, k], frames[0], pooled[0])
  for t, action in enumerate(actions, start=1):
    timestep = env.step(action)
    assert not timestep.last()
    for k in range(4):  # Channel k is frame t - 3 + k: oldest first.
      ref = max(t - 3 + k, 0)
      _assert_area_equal(timestep.observation[:, :, k], frames[ref],
                         pooled[ref])


def test_area_resize_matches_opencv_on_random_images():
  resize = atari_lib._AreaResize((210, 160), (84, 84))  # pylint: disable=protected-access
  rng = np.random.default_rng(0)
  out = np.zeros((84, 84), np.uint8)
  for _ in range(20):
    grey = rng.integers(0, 256, size=(210, 160), dtype=np.uint8)
    np.copyto(resize.frame, grey)
    resize(out)
    reference = cv2.resize(grey, (84, 84), interpolation=cv2.INTER_AREA)
    _assert_area_equal(out, reference, grey)


def test_other_sizes_and_rgb_fall_back_to_opencv():
  env = make_environment('atari/pong', seed=0, screen_size=64,
                         grayscale=False, frame_stack=2)
  assert env.observation_spec().shape == (64, 64, 6)
  timestep = env.reset()
  env.observation_spec().validate(timestep.observation)
  timestep = env.step(1)
  env.observation_spec().validate(timestep.observation)


@pytest.mark.parametrize('repeat,pool', [(1, True), (2, True), (3, True),
                                         (4, False)])
def test_other_action_repeats_count_frames(repeat, pool):
  env = make_environment('atari/pong', seed=0, action_repeat=repeat,
                         pool_last_two_frames=pool, frame_stack=1)
  assert env.observation_spec().shape == (84, 84, 1)
  env.reset()
  for _ in range(5):
    timestep = env.step(1)
    env.observation_spec().validate(timestep.observation)
  assert env.episode_frames == 5 * repeat
  # Without pooling (or with one frame a step) the frame is the last screen.
  if repeat == 1 or not pool:
    last = cv2.resize(env.ale.getScreenGrayscale(), (84, 84),
                      interpolation=cv2.INTER_AREA)
    _assert_area_equal(timestep.observation[:, :, 0], last,
                       env.ale.getScreenGrayscale())


# Atari: episode protocol.


def test_noop_starts_vary_within_1_to_30():
  env = make_environment('atari/pong', seed=0, noop_max=30)
  counts = []
  for _ in range(15):
    env.reset()
    counts.append(env.last_noop_count)
    assert env.episode_frames == env.last_noop_count  # No-ops are frames.
  assert all(1 <= c <= 30 for c in counts)
  assert len(set(counts)) > 3
  plain = make_environment('atari/pong', seed=0)
  plain.reset()
  assert plain.last_noop_count == 0 and plain.episode_frames == 0


def _rollout(seed, sticky=0.25, steps=150):
  env = make_environment('atari/breakout', seed=seed, noop_max=30,
                         sticky_action_probability=sticky)
  observations, rewards = [env.reset().observation], []
  for action in _random_actions(env, steps, seed=7):
    timestep = env.step(action)
    observations.append(timestep.observation)
    rewards.append(float(timestep.reward or 0.0))
  return np.stack(observations), np.array(rewards)


def test_same_seed_same_trajectory_different_seed_differs():
  obs_a, rew_a = _rollout(seed=5)
  obs_b, rew_b = _rollout(seed=5)
  np.testing.assert_array_equal(obs_a, obs_b)
  np.testing.assert_array_equal(rew_a, rew_b)
  obs_c, _ = _rollout(seed=6)
  assert not np.array_equal(obs_a, obs_c)


def test_clipped_rewards_keep_the_raw_score():
  # Assault scores 21 points a kill: raw rewards above 1 come within a few
  # dozen random steps.
  env = make_environment('atari/assault', seed=0, clip_rewards=True)
  env.reset()
  raw_sum, saw_big = 0.0, False
  for action in _random_actions(env, 500):
    timestep = env.step(action)
    if timestep.first():
      break
    raw_sum += env.last_raw_reward
    assert timestep.reward in (-1.0, 0.0, 1.0)
    assert np.sign(timestep.reward) == np.sign(env.last_raw_reward)
    if env.last_raw_reward > 1:
      saw_big = True
      assert timestep.reward == 1.0
    if saw_big and raw_sum > 40:
      break
  assert saw_big
  assert env.episode_raw_return == raw_sum
  assert env.episode_raw_return > 1


def test_frame_cap_truncates_with_discount_one():
  env = make_environment('atari/pong', seed=0, max_episode_frames=100)
  env.reset()
  for step in range(1000):
    timestep = env.step(0)
    if timestep.last():
      break
  assert step == 24  # 100 frames / action repeat 4.
  assert timestep.discount == 1.0
  assert env.episode_frames == 100
  assert not env.game_over
  assert env.step(0).first()  # Auto-reset: a fresh game.
  assert env.episode_frames == 0


def test_frame_cap_counts_noop_frames():
  env = make_environment('atari/pong', seed=0, max_episode_frames=100,
                         noop_max=30)
  env.reset()
  noops = env.last_noop_count
  steps = 0
  while not env.step(0).last():
    steps += 1
  assert env.episode_frames == 100
  assert steps + 1 == -(-(100 - noops) // 4)


def test_life_loss_is_terminal_when_asked():
  env = make_environment('atari/breakout', seed=0, terminal_on_life_loss=True)
  env.reset()
  lives = env.ale.lives()
  for action in _random_actions(env, 3000):
    timestep = env.step(action)
    if timestep.last():
      break
  assert timestep.last() and timestep.discount == 0.0
  assert not env.game_over and env.ale.lives() == lives - 1
  frames = env.episode_frames
  assert env.reset().first()
  assert env.episode_frames == frames  # The game went on: no emulator reset.


def test_life_loss_is_not_terminal_by_default():
  env = make_environment('atari/breakout', seed=0)
  env.reset()
  lives = env.ale.lives()
  for action in _random_actions(env, 3000):
    timestep = env.step(action)
    if env.ale.lives() < lives:
      break
  assert env.ale.lives() < lives
  assert not timestep.last() and timestep.discount == 1.0


def test_presets_follow_the_papers():
  apex = AtariConfig.apex_training()
  assert apex.clip_rewards and apex.max_episode_frames == 50_000
  evaluation = AtariConfig.apex_evaluation()
  assert evaluation.noop_max == 30 and not evaluation.clip_rewards
  assert evaluation.max_episode_frames == 108_000
  impala = AtariConfig.impala_training()
  assert impala.terminal_on_life_loss and impala.clip_rewards
  assert AtariConfig.dqn_evaluation().max_episode_frames == 18_000


# Bad names and unsupported protocols.


def test_unknown_game_lists_the_57():
  with pytest.raises(ValueError) as error:
    make_environment('atari/pongg')
  message = str(error.value)
  assert "Did you mean 'pong'" in message
  assert all(game in message for game in ATARI57_GAMES)


def test_unknown_task_and_family_list_choices():
  with pytest.raises(ValueError) as error:
    make_environment('control/humanoid_fly')
  assert all(task in str(error.value) for task in CONTROL_TASKS)
  with pytest.raises(ValueError) as error:
    make_environment('gym/CartPole-v1')
  assert 'atari/<game>' in str(error.value) and 'catch' in str(error.value)
  with pytest.raises(ValueError):
    make_environment('atari')


def test_human_starts_fail_because_never_published():
  for regime in ('human_starts', 'human'):
    with pytest.raises(ValueError, match='never published'):
      AtariConfig(start_regime=regime)
  with pytest.raises(ValueError, match='never published'):
    make_environment('atari/pong', start_regime='human_starts')
  with pytest.raises(ValueError, match='noop'):
    AtariConfig(start_regime='random')


# dm_control.


@pytest.mark.parametrize('task,obs_size,action_size', [
    ('humanoid_stand', 67, 21),
    ('manipulator_bring_ball', 44, 5),
])
def test_control_tasks(task, obs_size, action_size):
  env = make_environment(f'control/{task}', seed=0)
  assert env.observation_spec().shape == (obs_size,)
  assert env.observation_spec().dtype == np.float32
  assert env.action_spec().shape == (action_size,)
  timestep = env.reset()
  assert timestep.observation.shape == (obs_size,)
  assert timestep.observation.dtype == np.float32
  timestep = env.step(np.zeros(action_size))
  assert timestep.mid()
  assert timestep.reward.dtype == np.float32
  assert timestep.observation.dtype == np.float32


# Catch.


def test_catch_terminates_with_plus_or_minus_one():
  env = make_environment('catch', seed=0)
  spec = env.observation_spec()
  assert spec.shape == (10, 5) and spec.dtype == np.float32
  assert env.action_spec().num_values == 3
  rng = np.random.default_rng(0)
  finals = []
  for _ in range(50):
    timestep = env.reset()
    steps = 0
    while not timestep.last():
      timestep = env.step(int(rng.integers(3)))
      spec.validate(timestep.observation)
      steps += 1
      if not timestep.last():
        assert timestep.reward == 0.0 and timestep.discount == 1.0
    assert steps == 9
    assert timestep.discount == 0.0
    finals.append(float(timestep.reward))
  assert set(finals) == {-1.0, 1.0}  # A random paddle both wins and loses.


def test_catch_perfect_policy_always_catches():
  env = make_environment('catch', seed=1)
  for _ in range(200):
    timestep = env.reset()
    while not timestep.last():
      ball, paddle = env.ball_column, env.paddle_column
      timestep = env.step(1 + int(np.sign(ball - paddle)))
    assert timestep.reward == 1.0


def test_catch_is_a_dm_env():
  env = make_environment('catch', seed=0)
  assert isinstance(env, dm_env.Environment)
  assert env.step(0).first()  # First call resets.
