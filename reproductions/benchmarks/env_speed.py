r"""Speed of our Atari environment against the bare emulator, in one process.

  python -m reproductions.benchmarks.env_speed --game pong --seconds 10
  python -m reproductions.benchmarks.env_speed --game pong --seconds 6 \
      --with_acme

Configurations (random actions from the game's minimal set, drawn in advance
so that no random-number call is timed):
  bare      ale_py.ALEInterface.act only, one action per emulator frame, with a
            game-over check and reset (the ceiling);
  ours      reproductions.environments AtariEnvironment (Mnih et al. 2015
            preprocessing: 4-frame repeat, max-pool of the last 2, grey,
            84x84 area resize, 4-frame stack), one action per agent step;
  acme      (--with_acme) acme.wrappers.AtariWrapper (to_float=False, so it
            also returns uint8) over a minimal per-frame dm_env adapter
            written below, for context.

Emulator frames are read from ALE's own counter (getFrameNumber), so frames
lost at game over or spent in resets are counted exactly as the emulator ran
them. The machine is shared and drifts, so the configurations alternate for
--rounds rounds of --seconds/--rounds each, and every ratio is taken within
one round before the median across rounds is reported. `measure` with one
round is also the program benchmarks' bare-environment limit
(bare_limits.bare_environment).

Output: a table, then one JSON line with absolute figures and ratios.
"""

import argparse
import json
import statistics
import time
from typing import Any, Callable, Dict, List, Sequence

import dm_env
from dm_env import specs
import numpy as np

import ale_py
from ale_py import roms

from reproductions.environments import atari


def _new_ale(game: str, seed: int) -> ale_py.ALEInterface:
  ale = ale_py.ALEInterface()
  ale.setLoggerMode(ale_py.LoggerMode.Error)
  ale.setInt('random_seed', seed)
  ale.setFloat('repeat_action_probability', 0.0)
  ale.setInt('max_num_frames_per_episode', atari.EVALUATION_EPISODE_FRAMES)
  ale.loadROM(roms.get_rom_path(game))
  return ale


class _Runner:
  """One configuration: a `run(seconds) -> (agent_steps, frames, elapsed)`."""

  def __init__(self, name: str, run: Callable[[float], tuple]):
    self.name = name
    self.run = run


def _bare_runner(game: str, seed: int) -> _Runner:
  ale = _new_ale(game, seed)
  action_set = ale.getMinimalActionSet()
  rng = np.random.default_rng(seed)
  actions = [action_set[i]
             for i in rng.integers(len(action_set), size=4096)]
  act, game_over, reset = ale.act, ale.game_over, ale.reset_game

  def run(seconds: float):
    frames0 = ale.getFrameNumber()
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
      for action in actions:
        act(action)
        if game_over():
          reset()
      steps += len(actions)
    elapsed = time.perf_counter() - start
    return steps, ale.getFrameNumber() - frames0, elapsed

  return _Runner('bare', run)


def _agent_runner(name: str, step: Callable[[int], object],
                  actions: Sequence[int],
                  frame_number: Callable[[], int]) -> _Runner:
  """Steps `actions` round after round; frames from ALE's own counter."""

  def run(seconds: float):
    frames0 = frame_number()
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
      for action in actions:
        step(action)  # Steps after LAST reset by themselves (dm_env).
      steps += len(actions)
    elapsed = time.perf_counter() - start
    return steps, frame_number() - frames0, elapsed

  return _Runner(name, run)


def _ours_runner(game: str, seed: int) -> _Runner:
  env = atari.make_atari(game, seed=seed)
  num_actions = env.action_spec().num_values
  rng = np.random.default_rng(seed)
  actions = [int(i) for i in rng.integers(num_actions, size=1024)]
  env.reset()
  return _agent_runner('ours', env.step, actions, env.ale.getFrameNumber)


class _PerFrameAle(dm_env.Environment):
  """One emulator frame per step, shaped as acme's AtariWrapper expects.

  Observation (RGB [210, 160, 3] uint8, lives) with lives at index 1; the
  action spec is a list of one DiscreteArray and actions arrive as
  `[np.array([a])]`.
  """

  def __init__(self, game: str, seed: int):
    self.ale = _new_ale(game, seed)
    self._actions = self.ale.getMinimalActionSet()
    height, width = self.ale.getScreenDims()
    self._rgb_spec = specs.Array((height, width, 3), np.uint8, name='RGB')
    self._lives_spec = specs.Array((), np.float64, name='lives')
    self._action_spec = specs.DiscreteArray(len(self._actions),
                                            dtype=np.int64, name='action')
    self._reset_next_step = True

  def _observation(self):
    return (self.ale.getScreenRGB(), np.float64(self.ale.lives()))

  def reset(self) -> dm_env.TimeStep:
    self.ale.reset_game()
    self._reset_next_step = False
    return dm_env.restart(self._observation())

  def step(self, action) -> dm_env.TimeStep:
    if self._reset_next_step:
      return self.reset()
    reward = float(self.ale.act(self._actions[int(action[0][0])]))
    if self.ale.game_over():
      self._reset_next_step = True
      return dm_env.termination(reward, self._observation())
    return dm_env.transition(reward, self._observation())

  def observation_spec(self):
    return (self._rgb_spec, self._lives_spec)

  def action_spec(self) -> List[specs.DiscreteArray]:
    return [self._action_spec]


def _acme_runner(game: str, seed: int) -> _Runner:
  from acme import wrappers  # pylint: disable=g-import-not-at-top
  base = _PerFrameAle(game, seed)
  env = wrappers.AtariWrapper(base, to_float=False,
                              max_episode_len=atari.EVALUATION_EPISODE_FRAMES)
  num_actions = env.action_spec().num_values
  rng = np.random.default_rng(seed)
  actions = [int(i) for i in rng.integers(num_actions, size=1024)]
  env.reset()
  return _agent_runner('acme', env.step, actions[:256],
                       base.ale.getFrameNumber)


def measure(game: str, seconds: float, rounds: int = 3, seed: int = 0,
            with_acme: bool = False) -> Dict[str, Dict[str, Any]]:
  """Per configuration: medians over `rounds` alternating rounds.

  Args:
    game: an Atari game (reproductions.environments.atari).
    seconds: measured time per configuration, all rounds together.
    rounds: how many times the configurations alternate.
    seed: of the emulators and the drawn actions.
    with_acme: also Acme's AtariWrapper.

  Returns:
    {'bare' | 'ours' | 'acme': {'agent_steps_per_s', 'frames_per_s',
    'frames_ratio_to_bare', 'per_round_ratios'}}, in that order, unrounded.
  """
  atari.validate_game(game)
  runners = [_bare_runner(game, seed), _ours_runner(game, seed)]
  if with_acme:
    runners.append(_acme_runner(game, seed))
  per_round = seconds / rounds
  for runner in runners:  # Warm-up: caches, lazy imports, first episode.
    runner.run(min(0.3, per_round))

  rates = {r.name: {'steps_per_s': [], 'frames_per_s': []} for r in runners}
  ratios = {r.name: [] for r in runners}
  for _ in range(rounds):
    bare_fps = None
    for runner in runners:
      steps, frames, elapsed = runner.run(per_round)
      fps = frames / elapsed
      rates[runner.name]['steps_per_s'].append(steps / elapsed)
      rates[runner.name]['frames_per_s'].append(fps)
      if runner.name == 'bare':
        bare_fps = fps
      ratios[runner.name].append(fps / bare_fps)
  return {
      name: {'agent_steps_per_s': statistics.median(rate['steps_per_s']),
             'frames_per_s': statistics.median(rate['frames_per_s']),
             'frames_ratio_to_bare': statistics.median(ratios[name]),
             'per_round_ratios': ratios[name]}
      for name, rate in rates.items()}


def main(argv=None) -> Dict[str, object]:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--game', default='pong')
  parser.add_argument('--seconds', type=float, default=10.0,
                      help='measured time per configuration, all rounds')
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--with_acme', action='store_true')
  args = parser.parse_args(argv)

  figures = measure(args.game, args.seconds, args.rounds, args.seed,
                    args.with_acme)
  result = {'game': args.game, 'seconds': args.seconds,
            'rounds': args.rounds}
  print(f'{args.game}: median of {args.rounds} alternating rounds of '
        f'{args.seconds / args.rounds:.1f} s each')
  print(f'{"config":8s} {"agent steps/s":>14s} {"frames/s":>10s} '
        f'{"vs bare":>8s}  per-round ratios')
  for name, config in figures.items():
    print(f'{name:8s} {config["agent_steps_per_s"]:14.0f} '
          f'{config["frames_per_s"]:10.0f} '
          f'{config["frames_ratio_to_bare"]:8.3f}  '
          + ' '.join(f'{x:.3f}' for x in config['per_round_ratios']))
    result[name] = {
        'agent_steps_per_s': round(config['agent_steps_per_s'], 1),
        'frames_per_s': round(config['frames_per_s'], 1),
        'frames_ratio_to_bare': round(config['frames_ratio_to_bare'], 4),
        'per_round_ratios': [round(x, 4) for x in config['per_round_ratios']],
    }
  print(json.dumps(result))
  return result


if __name__ == '__main__':
  main()
