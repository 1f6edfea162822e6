"""Atari 2600 games as `dm_env.Environment`s, straight over ale-py.

Why not gym or Acme's `AtariWrapper`: both put several Python layers and
per-frame allocations between the agent and the emulator, so Acme's wrapper
loses most of the bare emulator's frame rate, and the actors of Ape-X and
IMPALA are meant to be bound by emulation (and inference), not by
preprocessing. This module talks to `ale_py.ALEInterface` directly and does
the papers' preprocessing in a handful of vectorised calls on preallocated
buffers.

Preprocessing (Mnih et al. 2015, Methods: preprocessing; the same in Horgan et
al. 2018 (Ape-X) App. C and Espeholt et al. 2018 (IMPALA) App. G, Table G.1):
  * each agent action is repeated for 4 emulator frames;
  * the observed frame is the pixel-wise max over the last two of those
    frames (removes the flicker of sprites drawn on alternate frames);
  * greyscale (ALE's own luminance palette), then area-averaged down to
    84x84 (what `cv2.resize(..., interpolation=cv2.INTER_AREA)` computes);
  * the last 4 such frames are stacked on the channel axis, oldest first.

Episode protocol:
  * no-op starts (Mnih et al. 2015, Methods: evaluation): 1..`noop_max`
    NOOP frames at every reset, drawn uniformly at random;
  * the episode is capped in emulator frames; reaching the cap truncates
    (LAST with discount 1), it does not terminate;
  * optionally a lost life ends the agent's episode with discount 0
    (Espeholt et al. 2018 (IMPALA) App. G, Table G.1: "end of episode when
    life lost"), while the game itself carries on;
  * optionally sticky actions (Machado et al. 2018: p=0.25), done by ALE.

The raw game score is always kept (`episode_raw_return`), whatever the reward
clipping the agent sees: the papers report raw scores.

Speed (README, "Measured performance", has the figures;
`python -m reproductions.benchmarks.env_speed` measures them): the wrapper
adds only a fraction of the emulator's own time per agent step. Where that
time goes, and why:
  * two `getScreenGrayscale` calls: ALE's palette lookup, one pixel per
    cycle. Only the last two frames of each action are fetched. This alone
    is a floor for any Python wrapper of this protocol;
  * max of the two frames (written as float32 in the same pass);
  * area resize. `cv2.resize(INTER_AREA)` takes OpenCV's generic
    non-integer-scale path for 210x160 -> 84x84, slower than the whole rest
    of the wrapper, so `_AreaResize` computes the same average as two small
    float32 products: the box weights repeat every 5 rows (2 output rows)
    and every 40 columns (21 output columns). The result equals OpenCV's
    except at exact half-way values (about 1 pixel in 10^4), where OpenCV's
    own float rounding decides either way (tested);
  * fresh HWC observation from a ring of four frame buffers with
    `cv2.merge`, far cheaper than shifting a stored HWC stack;
  * TimeStep and bookkeeping.
"""

import dataclasses
import difflib
import math
from typing import Dict, Optional, Sequence, Tuple

import cv2
import dm_env
from dm_env import specs
import numpy as np

import ale_py
# ale-py >= 0.9 ships the ROMs in a sub-package that `import ale_py` does not
# load: the explicit import is required.
from ale_py import roms as ale_roms

# The Atari-57 benchmark (Mnih et al. 2015 used 49 of them; Horgan et al.
# 2018 (Ape-X) and Espeholt et al. 2018 (IMPALA) report all 57), in the
# snake_case spelling of results/reference/atari57_reference.csv. Every name
# is an ale-py ROM id as it is.
ATARI57_GAMES: Tuple[str, ...] = (
    'alien', 'amidar', 'assault', 'asterix', 'asteroids', 'atlantis',
    'bank_heist', 'battle_zone', 'beam_rider', 'berzerk', 'bowling', 'boxing',
    'breakout', 'centipede', 'chopper_command', 'crazy_climber', 'defender',
    'demon_attack', 'double_dunk', 'enduro', 'fishing_derby', 'freeway',
    'frostbite', 'gopher', 'gravitar', 'hero', 'ice_hockey', 'jamesbond',
    'kangaroo', 'krull', 'kung_fu_master', 'montezuma_revenge', 'ms_pacman',
    'name_this_game', 'phoenix', 'pitfall', 'pong', 'private_eye', 'qbert',
    'riverraid', 'road_runner', 'robotank', 'seaquest', 'skiing', 'solaris',
    'space_invaders', 'star_gunner', 'surround', 'tennis', 'time_pilot',
    'tutankham', 'up_n_down', 'venture', 'video_pinball', 'wizard_of_wor',
    'yars_revenge', 'zaxxon',
)

START_REGIMES: Tuple[str, ...] = ('noop',)

_HUMAN_STARTS_MESSAGE = (
    "start_regime={!r}: the human-starts regime (Nair et al. 2015) starts "
    "each evaluation episode from one of 100 states sampled from a human "
    "expert's play, and those start states were never published. Only the "
    "no-op starts regime (start_regime='noop' with noop_max=30, Mnih et al. "
    "2015) can be run; the human-starts scores in the papers can be quoted, "
    "not reproduced.")

# Atari frames are 60 Hz: 108,000 frames = 30 minutes of play.
EVALUATION_EPISODE_FRAMES = 108_000
# Horgan et al. 2018 (Ape-X) s4.1: "The episode length is limited to 50000
# frames during training."
APEX_TRAINING_EPISODE_FRAMES = 50_000
# Mnih et al. 2015, Methods: evaluation episodes of "up to 5 min" = 18,000
# frames (also the Gorila null-op protocol, Nair et al. 2015).
DQN_EVALUATION_EPISODE_FRAMES = 18_000
# Mnih et al. 2015, Methods: "a random number (up to 30) of no-op actions"
# at the start of evaluation episodes; IMPALA s5.3.2: uniform in [1, 30].
NOOP_MAX = 30
# Machado et al. 2018: sticky actions p = 0.25.
STICKY_ACTION_PROBABILITY = 0.25

_FIRST = dm_env.StepType.FIRST
_MID = dm_env.StepType.MID
_LAST = dm_env.StepType.LAST
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)


@dataclasses.dataclass(frozen=True)
class AtariConfig:
  """How an Atari game is presented to the agent.

  The defaults are the papers' preprocessing with an evaluation-length cap and
  no reward clipping; use the classmethods for each paper's training and
  evaluation settings rather than editing fields one by one.

  Attributes:
    full_action_space: all 18 joystick actions instead of the game's minimal
      set (IMPALA's multi-task agent, Espeholt et al. 2018 App. G).
    action_repeat: emulator frames per agent action (Mnih et al. 2015: 4).
    frame_stack: frames stacked in one observation (Mnih et al. 2015: 4).
    pool_last_two_frames: max over the last two frames of each action
      (Mnih et al. 2015, Methods: preprocessing; IMPALA Table G.1: N=2).
    screen_size: side of the square observation (Mnih et al. 2015: 84).
    grayscale: ALE's luminance palette; False keeps RGB (3 channels a frame).
    clip_rewards: clip the agent's reward to [-1, 1] (Mnih et al. 2015;
      Ape-X App. C; IMPALA Table G.1). The raw score is kept regardless.
    max_episode_frames: cap in emulator frames (no-op frames included);
      reaching it truncates with discount 1. 0 or None: no cap.
    terminal_on_life_loss: a lost life ends the agent's episode with
      discount 0 (IMPALA Table G.1); the game continues at the next reset().
    noop_max: 0 disables no-op starts; otherwise 1..noop_max NOOP frames at
      each reset (Mnih et al. 2015, Methods: 30).
    sticky_action_probability: ALE repeats the previous action with this
      probability at every frame (Machado et al. 2018: 0.25). 0: the
      deterministic ALE of the 2015-2018 papers.
    start_regime: 'noop' only; the human starts were never published.
  """
  full_action_space: bool = False
  action_repeat: int = 4
  frame_stack: int = 4
  pool_last_two_frames: bool = True
  screen_size: int = 84
  grayscale: bool = True
  clip_rewards: bool = False
  max_episode_frames: Optional[int] = EVALUATION_EPISODE_FRAMES
  terminal_on_life_loss: bool = False
  noop_max: int = 0
  sticky_action_probability: float = 0.0
  start_regime: str = 'noop'

  def __post_init__(self):
    regime = str(self.start_regime)
    if 'human' in regime.lower():
      raise ValueError(_HUMAN_STARTS_MESSAGE.format(self.start_regime))
    if regime not in START_REGIMES:
      raise ValueError(
          f'Unknown start_regime {self.start_regime!r}; valid choices: '
          f'{", ".join(START_REGIMES)} (human starts, Nair et al. 2015, '
          f'cannot be run: their start states were never published).')
    if self.action_repeat < 1:
      raise ValueError(f'action_repeat must be >= 1, got {self.action_repeat}')
    if self.frame_stack < 1:
      raise ValueError(f'frame_stack must be >= 1, got {self.frame_stack}')
    if self.screen_size < 1:
      raise ValueError(f'screen_size must be >= 1, got {self.screen_size}')
    if self.noop_max < 0:
      raise ValueError(f'noop_max must be >= 0, got {self.noop_max}')
    if self.max_episode_frames is not None and self.max_episode_frames < 0:
      raise ValueError(
          f'max_episode_frames must be >= 0 or None, got '
          f'{self.max_episode_frames}')
    if not 0.0 <= self.sticky_action_probability <= 1.0:
      raise ValueError('sticky_action_probability must be in [0, 1], got '
                       f'{self.sticky_action_probability}')

  # Presets. Every paper value is cited where it is set.

  @classmethod
  def dqn_evaluation(cls) -> 'AtariConfig':
    """Mnih et al. 2015, Methods: up to 30 no-ops, episodes up to 5 minutes."""
    return cls(noop_max=NOOP_MAX,
               max_episode_frames=DQN_EVALUATION_EPISODE_FRAMES)

  @classmethod
  def apex_training(cls) -> 'AtariConfig':
    """Ape-X DQN actors (Horgan et al. 2018).

    App. C: DQN preprocessing with rewards clipped to [-1, 1]; s4.1: training
    episodes capped at 50,000 frames. No no-op starts are stated for training.
    """
    return cls(clip_rewards=True,
               max_episode_frames=APEX_TRAINING_EPISODE_FRAMES)

  @classmethod
  def apex_evaluation(cls) -> 'AtariConfig':
    """Ape-X no-op starts evaluation (Horgan et al. 2018 s4.1, Table 2).

    The paper only says evaluation episodes are longer than training ones
    (Table 2 caption); 108,000 frames (30 minutes) is the standard cap of the
    no-op regime of that period and is an assumption here.
    """
    return cls(noop_max=NOOP_MAX, max_episode_frames=EVALUATION_EPISODE_FRAMES)

  @classmethod
  def impala_training(cls, multi_task: bool = False) -> 'AtariConfig':
    """IMPALA actors (Espeholt et al. 2018, App. G, Table G.1).

    Life loss ends the episode, rewards clipped to [-1, 1]; the multi-task
    agent uses the full 18-action set, experts the minimal sets.
    """
    return cls(clip_rewards=True, terminal_on_life_loss=True,
               full_action_space=multi_task)

  @classmethod
  def impala_evaluation(cls, multi_task: bool = False) -> 'AtariConfig':
    """IMPALA s5.3.2: episodes start with uniform [1, 30] no-ops, raw score."""
    return cls(noop_max=NOOP_MAX, full_action_space=multi_task,
               max_episode_frames=EVALUATION_EPISODE_FRAMES)


def validate_game(game: str) -> str:
  """Returns `game` if it is one of the 57, else raises a helpful ValueError."""
  if game in ATARI57_GAMES:
    return game
  close = difflib.get_close_matches(str(game), ATARI57_GAMES, n=3)
  hint = f' Did you mean {" or ".join(repr(c) for c in close)}?' if close else ''
  raise ValueError(
      f'Unknown Atari game {game!r}.{hint} Valid games (Atari-57): '
      f'{", ".join(ATARI57_GAMES)}.')


def _area_weights(n_in: int, n_out: int) -> np.ndarray:
  """Integer overlaps of input cells with output cells (box filter weights).

  In units of 1/n_out of an input cell, input cell k spans
  [k*n_out, (k+1)*n_out) and output cell j spans [j*n_in, (j+1)*n_in): the
  overlaps are integers and every output column sums to n_in. Dividing by
  n_in gives exactly the weights of area interpolation (cv2.INTER_AREA when
  shrinking).
  """
  k = np.arange(n_in)[:, None]
  j = np.arange(n_out)[None, :]
  lo = np.maximum(k * n_out, j * n_in)
  hi = np.minimum((k + 1) * n_out, (j + 1) * n_in)
  return np.maximum(hi - lo, 0)


class _AreaResize:
  """Area-average resize of one greyscale frame, as two small BLAS products.

  Why not `cv2.resize(INTER_AREA)`: for 210x160 -> 84x84 OpenCV takes its
  generic non-integer-scale path, which costs a large share of the
  emulator's own time per agent step. The box weights are periodic: 210 -> 84
  repeats every 5 input rows (2 output rows), 160 -> 84 every 40 input
  columns (21 output columns). So the vertical pass is a batched (2x5)@(5xW)
  product and the horizontal pass one (rows*W/40 x 40)@(40 x 21) product.
  Float32 is exact enough: the exact average is an integer over 5*40 = 200,
  so a value that is not a tie is at least 1/200 away from a rounding
  boundary, far above float32 error. At exact half-way ties (about 1 pixel in
  10^4 on Atari frames) the rounding may differ from OpenCV's by one grey
  level: OpenCV's own float weights decide those either way.
  """

  def __init__(self, in_hw: Tuple[int, int], out_hw: Tuple[int, int]):
    (h_in, w_in), (h_out, w_out) = in_hw, out_hw
    gy, gx = math.gcd(h_in, h_out), math.gcd(w_in, w_out)
    self.py, self.qy = h_in // gy, h_out // gy  # rows: period py -> qy
    self.px, self.qx = w_in // gx, w_out // gx  # columns: period px -> qx
    wy = _area_weights(self.py, self.qy)  # (py, qy), columns sum to py
    wx = _area_weights(self.px, self.qx)  # (px, qx), columns sum to px
    self.wy_t = np.ascontiguousarray(wy.T, dtype=np.float32)  # (qy, py)
    # Both normalisations folded into the horizontal weights.
    self.wx = (wx / (self.py * self.px)).astype(np.float32)
    self.frame = np.zeros((h_in, w_in), np.float32)  # caller writes here
    self.frame_blocks = self.frame.reshape(gy, self.py, w_in)
    self.rows = np.zeros((gy, self.qy, w_in), np.float32)
    self.rows_blocks = self.rows.reshape(h_out * gx, self.px)
    self.out = np.zeros((h_out * gx, self.qx), np.float32)
    self.out_2d = self.out.reshape(h_out, w_out)

  @staticmethod
  def is_cheap(in_hw: Tuple[int, int], out_hw: Tuple[int, int]) -> bool:
    """Whether the periods are short enough for the products to beat OpenCV."""
    (h_in, w_in), (h_out, w_out) = in_hw, out_hw
    if h_out > h_in or w_out > w_in:
      return False  # Upscaling: INTER_AREA is not a box average then.
    py = h_in // math.gcd(h_in, h_out)
    px = w_in // math.gcd(w_in, w_out)
    # A value off a rounding boundary is at least 1/(py*px) away from it; keep
    # that well above float32 accumulation error (and the blocks small).
    return py * px <= 400

  def __call__(self, out_u8: np.ndarray) -> None:
    """Resizes `self.frame` (float32, filled by the caller) into `out_u8`."""
    np.matmul(self.wy_t, self.frame_blocks, out=self.rows)
    np.matmul(self.rows_blocks, self.wx, out=self.out)
    # Rounds to nearest and saturates, like OpenCV's own float -> uint8.
    cv2.convertScaleAbs(self.out_2d, dst=out_u8)


class _FramePipeline:
  """Screens -> max-pooled, resized frame -> stacked observation.

  Every buffer is allocated once. The per-step work is built as closures over
  local variables (`observe_pair`, `observe_one`): in CPython a closure
  variable is cheaper than an attribute lookup, and with so little work per
  agent step every lookup shows.
  """

  def __init__(self, raw_shape: Tuple[int, ...], size: int, stack: int):
    grayscale = len(raw_shape) == 2
    self.screen_a = np.zeros(raw_shape, np.uint8)  # second-to-last frame
    self.screen_b = np.zeros(raw_shape, np.uint8)  # last frame
    frame_shape = (size, size) if grayscale else (size, size, 3)
    # Ring of frames: after each rotation frames[0] is the oldest. cv2.merge
    # writes them into a fresh HWC array in one pass, far cheaper than
    # shifting a stored HWC stack by one frame.
    frames = [np.zeros(frame_shape, np.uint8) for _ in range(stack)]
    self._frames = frames
    screen_a, screen_b = self.screen_a, self.screen_b
    maximum = np.maximum
    merge = cv2.merge

    if stack == 1:
      if grayscale:
        def stacked():
          return frames[0][:, :, None].copy()
      else:
        def stacked():
          return frames[0].copy()
    else:
      def stacked():
        return merge(frames)
    self.stacked = stacked

    if grayscale and _AreaResize.is_cheap(raw_shape, (size, size)):
      resize = _AreaResize(raw_shape, (size, size))
      wide = resize.frame
      wide_blocks, wy_t = resize.frame_blocks, resize.wy_t
      rows, rows_blocks = resize.rows, resize.rows_blocks
      wx, out, out_2d = resize.wx, resize.out, resize.out_2d
      copyto = np.copyto
      matmul = np.matmul
      to_uint8 = cv2.convertScaleAbs

      def observe_pair() -> np.ndarray:
        frame = frames.pop(0)
        maximum(screen_a, screen_b, out=wide)  # max and uint8->float32 at once
        # _AreaResize.__call__, inlined.
        matmul(wy_t, wide_blocks, out=rows)
        matmul(rows_blocks, wx, out=out)
        to_uint8(out_2d, dst=frame)
        frames.append(frame)
        return stacked()

      def observe_one() -> np.ndarray:
        frame = frames.pop(0)
        copyto(wide, screen_b)
        resize(frame)
        frames.append(frame)
        return stacked()
    else:
      pooled = np.zeros(raw_shape, np.uint8)
      dsize = (size, size)
      resize_cv = cv2.resize
      area = cv2.INTER_AREA

      def observe_pair() -> np.ndarray:
        frame = frames.pop(0)
        maximum(screen_a, screen_b, out=pooled)
        resize_cv(pooled, dsize, dst=frame, interpolation=area)
        frames.append(frame)
        return stacked()

      def observe_one() -> np.ndarray:
        frame = frames.pop(0)
        resize_cv(screen_b, dsize, dst=frame, interpolation=area)
        frames.append(frame)
        return stacked()

    self.observe_pair = observe_pair
    self.observe_one = observe_one

  def restart(self) -> np.ndarray:
    """New episode: every stacked frame is the current screen (screen_b)."""
    self.observe_one()
    latest = self._frames[-1]
    for frame in self._frames[:-1]:
      frame[...] = latest
    return self.stacked()


class AtariEnvironment(dm_env.Environment):
  """One Atari game with the papers' preprocessing, as a dm_env.Environment.

  Observations: uint8 [screen_size, screen_size, frame_stack] (HWC, channel =
  time, oldest first; times 3 channels per frame when grayscale=False). A
  fresh array every step, so the agent and replay may keep it.
  Actions: an index into the minimal (default) or full 18-action set.
  Rewards: float32, clipped to [-1, 1] only if config.clip_rewards.
  Discounts: float32, 0 at game over (and at a lost life when
  terminal_on_life_loss), 1 on truncation by the frame cap.

  Bookkeeping the papers report (raw, never clipped), per game, i.e. since
  the last emulator reset (a game spans several agent episodes when
  terminal_on_life_loss is on):
    episode_raw_return: the game score so far;
    episode_frames: emulator frames so far, no-op frames included;
    last_raw_reward: raw reward of the last step;
    last_noop_count: no-op frames played at the last emulator reset;
    game_over: whether the last episode end was a real end of game.
  """

  def __init__(self, game: str, config: Optional[AtariConfig] = None,
               seed: Optional[int] = None):
    self._game = validate_game(game)
    self._config = config = config if config is not None else AtariConfig()
    if seed is None:
      seed = int(np.random.SeedSequence().generate_state(1)[0])
    self._seed = int(seed)
    # No-op counts come from numpy so that they do not consume the ALE's own
    # random stream (which drives sticky actions).
    self._rng = np.random.default_rng(self._seed)

    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt('random_seed', self._seed % (2**31 - 1))
    # ALE's default is 0.25 (Machado et al. 2018); the papers reproduced here
    # predate sticky actions, so it is set explicitly either way.
    ale.setFloat('repeat_action_probability',
                 float(config.sticky_action_probability))
    ale.setInt('frame_skip', 1)  # Action repeat is done here, with pooling.
    # ALE enforces the cap exactly, frame by frame, and reports it apart from
    # a real game over (game_truncated), so truncation gets discount 1.
    ale.setInt('max_num_frames_per_episode', int(config.max_episode_frames or 0))
    ale.loadROM(ale_roms.get_rom_path(self._game))
    self._ale = ale
    self._action_set = list(ale.getLegalActionSet() if config.full_action_space
                            else ale.getMinimalActionSet())
    self._noop = ale_py.Action.NOOP

    # Bound methods cached once: attribute lookups are a visible share of the
    # per-step budget.
    self._act = ale.act
    self._game_over = ale.game_over
    self._lives_fn = ale.lives

    screen_h, screen_w = ale.getScreenDims()
    size = config.screen_size
    if config.grayscale:
      raw_shape = (screen_h, screen_w)
      self._get_screen = ale.getScreenGrayscale
    else:
      raw_shape = (screen_h, screen_w, 3)
      self._get_screen = ale.getScreenRGB
    channels = config.frame_stack * (1 if config.grayscale else 3)
    self._obs_shape = (size, size, channels)
    pipeline = _FramePipeline(raw_shape, size, config.frame_stack)
    self._pipeline = pipeline
    self._screen_a = pipeline.screen_a
    self._screen_b = pipeline.screen_b
    self._observe_pair = pipeline.observe_pair
    self._observe_one = pipeline.observe_one
    self._frame_number = ale.getEpisodeFrameNumber

    self._pool = config.pool_last_two_frames and config.action_repeat >= 2
    # Frames played before the ones whose screens are fetched.
    self._head_frames = config.action_repeat - (2 if self._pool else 1)
    self._fast = self._pool and config.action_repeat == 4
    self._clip = config.clip_rewards
    self._life_loss = config.terminal_on_life_loss
    # numpy scalars are immutable, so one float32 per distinct reward value
    # can be shared by every TimeStep.
    self._reward_cache: Dict[int, np.float32] = {}

    self._reset_next_step = True
    self._resume_after_life_loss = False
    self._lives = 0
    self.episode_raw_return = 0.0
    self.episode_frames = 0
    self.last_raw_reward = 0.0
    self.last_noop_count = 0
    self.game_over = False

  # dm_env.Environment interface.

  def reset(self) -> dm_env.TimeStep:
    # Right after an episode ended by a lost life (terminal_on_life_loss)
    # the game carries on from where it is, with a fresh frame stack and no
    # no-ops; any other reset starts a new game.
    if not (self._resume_after_life_loss and not self._ale.game_over()):
      self._reset_game()
    self._reset_next_step = False
    self._resume_after_life_loss = False
    self.game_over = False
    self.last_raw_reward = 0.0
    self._lives = self._lives_fn()
    self._get_screen(self._screen_b)
    return dm_env.TimeStep(_FIRST, None, None, self._pipeline.restart())

  def step(self, action) -> dm_env.TimeStep:
    if self._reset_next_step:
      return self.reset()
    if action < 0:  # A list would silently wrap a negative index.
      raise IndexError(f'action {action} out of range')
    ale_action = self._action_set[action]
    act = self._act
    # Frames after a game over are no-ops in ALE (reward 0, no emulation),
    # so the repeat loop needs no per-frame game-over check.
    if self._fast:
      # The papers' setting, unrolled: screens of frames 3 and 4 only.
      reward = act(ale_action)
      reward += act(ale_action)
      reward += act(ale_action)
      self._get_screen(self._screen_a)
      reward += act(ale_action)
      self._get_screen(self._screen_b)
      observation = self._observe_pair()
    else:
      reward = 0
      for _ in range(self._head_frames):
        reward += act(ale_action)
      if self._pool:
        reward += act(ale_action)
        self._get_screen(self._screen_a)
      reward += act(ale_action)
      self._get_screen(self._screen_b)
      observation = (self._observe_pair() if self._pool
                     else self._observe_one())

    self.last_raw_reward = reward
    self.episode_raw_return += reward
    # ALE's own counter: exact even when the game ended mid-repeat.
    self.episode_frames = self._frame_number()
    if self._clip:
      reward = 1 if reward > 0 else (-1 if reward < 0 else 0)
    r = self._reward_cache.get(reward)
    if r is None:
      r = self._reward_cache[reward] = np.float32(reward)

    if self._game_over():
      self._reset_next_step = True
      if self._ale.game_truncated():
        return dm_env.TimeStep(_LAST, r, _ONE, observation)
      self.game_over = True
      return dm_env.TimeStep(_LAST, r, _ZERO, observation)
    if self._life_loss:
      lives = self._lives_fn()
      if lives != self._lives:
        lost = lives < self._lives  # Some games award extra lives.
        self._lives = lives
        if lost:
          self._reset_next_step = True
          self._resume_after_life_loss = True
          return dm_env.TimeStep(_LAST, r, _ZERO, observation)
    return dm_env.TimeStep(_MID, r, _ONE, observation)

  def observation_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray(self._obs_shape, np.uint8, minimum=0,
                              maximum=255, name='observation')

  def action_spec(self) -> specs.DiscreteArray:
    return specs.DiscreteArray(len(self._action_set), dtype=np.int32,
                               name='action')

  def reward_spec(self) -> specs.Array:
    return specs.Array((), np.float32, name='reward')

  def discount_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray((), np.float32, minimum=0.0, maximum=1.0,
                              name='discount')

  def close(self) -> None:
    self._ale = None
    self._act = self._game_over = self._lives_fn = self._get_screen = None

  # Introspection.

  @property
  def game(self) -> str:
    return self._game

  @property
  def config(self) -> AtariConfig:
    return self._config

  @property
  def ale(self) -> ale_py.ALEInterface:
    """The underlying emulator (for tests and diagnostics)."""
    return self._ale

  @property
  def action_set(self) -> Sequence[ale_py.Action]:
    return tuple(self._action_set)

  # Internals.

  def _reset_game(self) -> None:
    """Emulator reset plus no-op starts; replays if a game ends in no-ops."""
    ale = self._ale
    while True:
      ale.reset_game()
      self.episode_raw_return = 0.0
      noops = 0
      if self._config.noop_max > 0:
        noops = int(self._rng.integers(1, self._config.noop_max + 1))
      for _ in range(noops):
        self.episode_raw_return += ale.act(self._noop)
      if not ale.game_over():
        break
    self.last_noop_count = noops
    self.episode_frames = ale.getEpisodeFrameNumber()


def make_atari(game: str, config: Optional[AtariConfig] = None,
               seed: Optional[int] = None, **config_overrides
               ) -> AtariEnvironment:
  """Builds a game; keyword overrides replace fields of `config`.

  Example: make_atari('pong', AtariConfig.apex_training(), seed=1) or
  make_atari('pong', noop_max=30).
  """
  config = config if config is not None else AtariConfig()
  if config_overrides:
    fields = {f.name for f in dataclasses.fields(AtariConfig)}
    unknown = sorted(set(config_overrides) - fields)
    if unknown:
      raise ValueError(f'Unknown AtariConfig field(s) {unknown}; valid: '
                       f'{", ".join(sorted(fields))}.')
    config = dataclasses.replace(config, **config_overrides)
  return AtariEnvironment(game, config, seed=seed)
