"""Environments of the reproductions, behind one entry point.

  make_environment('atari/pong', seed=0)                 # evaluation-style
  make_environment('atari/pong', config=AtariConfig.apex_training(), seed=1)
  make_environment('atari/breakout', noop_max=30)        # config overrides
  make_environment('control/humanoid_run', seed=0)
  make_environment('catch', seed=0)

Names are '<family>/<name>'. Why one entry point: launch programs and tests
build environments from strings in configs and command lines; a single
parser gives one place for validation and for error messages that list the
valid choices. dm_control is imported only when a control task is built
(it is heavy, and probes for GL unless MUJOCO_GL is set first).
"""

import difflib
from typing import Any

import dm_env

from reproductions.environments.atari import ATARI57_GAMES
from reproductions.environments.atari import AtariConfig
from reproductions.environments.atari import AtariEnvironment
from reproductions.environments.atari import make_atari
from reproductions.environments.atari import validate_game
from reproductions.environments.catch import Catch
from reproductions.environments.control import CONTROL_TASKS
from reproductions.environments.control import make_control
from reproductions.environments.control import validate_task

FAMILIES = ('atari/<game>', 'control/<task>', 'catch')

__all__ = (
    'ATARI57_GAMES', 'CONTROL_TASKS', 'FAMILIES', 'AtariConfig',
    'AtariEnvironment', 'Catch', 'make_atari', 'make_control',
    'make_environment',
)


def make_environment(name: str, **kwargs: Any) -> dm_env.Environment:
  """Builds an environment from its name.

  Args:
    name: 'atari/<game>' (one of ATARI57_GAMES), 'control/<task>' (one of
      CONTROL_TASKS) or 'catch'.
    **kwargs: passed on. Atari: `config` (AtariConfig), `seed`, and any
      AtariConfig field as an override. Control: `seed`. Catch: `seed`,
      `rows`, `columns`.

  Raises:
    ValueError: unknown family, game or task; the message lists the valid
      choices (and a close match when there is one).
  """
  family, _, rest = str(name).partition('/')
  if family == 'atari':
    if not rest:
      raise ValueError(f'{name!r} names no game: use atari/<game> with one of '
                       f'{", ".join(ATARI57_GAMES)}.')
    validate_game(rest)
    return make_atari(rest, **kwargs)
  if family == 'control':
    if not rest:
      raise ValueError(f'{name!r} names no task: use control/<task> with one '
                       f'of {", ".join(CONTROL_TASKS)}.')
    validate_task(rest)
    return make_control(rest, **kwargs)
  if family == 'catch' and not rest:
    return Catch(**kwargs)
  families = ('atari', 'control', 'catch')
  close = difflib.get_close_matches(family, families, n=1)
  hint = f' Did you mean {close[0]!r}?' if close else ''
  raise ValueError(f'Unknown environment {name!r}.{hint} Valid names: '
                   f'{", ".join(FAMILIES)}; Atari games: '
                   f'{", ".join(ATARI57_GAMES)}; control tasks: '
                   f'{", ".join(CONTROL_TASKS)}.')
