"""Reference scores: HNS's random/human anchors and the papers' per-game scores.

Why a module of its own: every number the comparison prints depends on which
random/human table it normalizes with, and the three papers did not use the
same one. Ape-X and IMPALA normalize no-op scores with the DQN-Nature random
scores and the Dueling paper's human scores (`atari57_reference.csv`); Gorila's
96% no-op median reproduces only with DQN-Nature's own random/human columns
(`dqn_nature_per_game.csv`, 49 games); human-starts scores use the human-starts
anchors (`atari57_reference_human_starts.csv`). Naming the regime explicitly
(`noop`, `human_starts`, `dqn_nature`) keeps that choice visible in every
output instead of buried in a default.

The tables are read at run time from `results/reference/` of this repository
(nowhere else), so what a comparison prints can always be traced to a file
and, through `results/reference/SOURCES.md`, to a paper.

HNS = (score - random) / (human - random); `human_normalized` returns it as a
fraction (1.0 = human level); printed tables show it in percent.
"""

import csv
import dataclasses
import difflib
import functools
import math
import pathlib
import re
import types
from typing import Dict, Mapping, Optional, Tuple, Union

REFERENCE_DIR = (
    pathlib.Path(__file__).resolve().parents[1] / 'results' / 'reference')

NOOP = 'noop'
HUMAN_STARTS = 'human_starts'
DQN_NATURE = 'dqn_nature'
REGIMES = (NOOP, HUMAN_STARTS, DQN_NATURE)

# `video_pinball`'s random score is 16256.9 in the reference table; some later
# papers use 0. Medians do not move either way, but means do: IMPALA Table 4's
# means reproduce (within 0.4 points) only with random = 0 (SOURCES.md).
VIDEO_PINBALL = 'video_pinball'
VIDEO_PINBALL_RANDOM_CHOICES = ('reference', 'zero')
VIDEO_PINBALL_NOTE = (
    "video_pinball random: 'reference' keeps the table's value (16256.9 in the "
    "no-op table); 'zero' uses 0 as some later papers do. Medians are "
    "unchanged either way; means change (IMPALA Table 4 means reproduce only "
    "with 'zero').")

_REGIME_FILES = {
    NOOP: ('atari57_reference.csv', 'random', 'human'),
    HUMAN_STARTS: ('atari57_reference_human_starts.csv', 'random', 'human'),
    DQN_NATURE: ('dqn_nature_per_game.csv', 'random', 'human'),
}
_REGIME_DESCRIPTIONS = {
    NOOP: ('no-op starts: DQN-Nature random, Dueling-paper human scores '
           '(dqn_zoo; the anchors of Ape-X and IMPALA), 57 games'),
    HUMAN_STARTS: ('human starts: Gorila-paper anchors (49 games) plus Double '
                   'DQN paper (8 games); approximate (Ape-X gives 350% here, '
                   '358% in the paper)'),
    DQN_NATURE: ('DQN Nature Extended Data Table 2 random/human columns, 49 '
                 "games (the anchors behind Gorila's 96% no-op median)"),
}


def _read_table(file_name: str) -> Tuple[Tuple[str, ...], list]:
  path = REFERENCE_DIR / file_name
  with open(path, newline='') as f:
    reader = csv.DictReader(f)
    return tuple(reader.fieldnames or ()), list(reader)


@functools.lru_cache(maxsize=None)
def atari57_games() -> Tuple[str, ...]:
  """The 57 snake_case game names (Ape-X Table 2 spelling), in table order."""
  _, rows = _read_table(_REGIME_FILES[NOOP][0])
  return tuple(row['game'] for row in rows)


def canonical_game_name(name: str) -> str:
  """Maps ALE/Gym ids ('MontezumaRevenge', 'PongNoFrameskip-v4') to snake_case.

  Only unambiguous spelling conversions are done (prefix/suffix, CamelCase);
  a name that is still not one of the 57 is left for the caller to reject, so
  a typo is never silently mapped onto a different game.
  """
  text = name.strip()
  text = re.sub(r'^ALE/', '', text)
  text = re.sub(r'(NoFrameskip|Deterministic)?-v\d+$', '', text)
  text = re.sub(r'(?<=[a-z0-9])(?=[A-Z])', '_', text)
  return text.lower().replace('-', '_').replace(' ', '_')


def suggest_game(name: str) -> Optional[str]:
  """Closest valid game name to `name`, for 'did you mean' messages."""
  matches = difflib.get_close_matches(
      canonical_game_name(name), atari57_games(), n=1, cutoff=0.5)
  return matches[0] if matches else None


def resolve_game(name: str) -> Optional[str]:
  """The snake_case name of `name`, or None when it is not an Atari-57 game."""
  game = canonical_game_name(name)
  return game if game in atari57_games() else None


@dataclasses.dataclass(frozen=True)
class Reference:
  """Random and human anchors of one regime, after the video_pinball choice."""
  regime: str
  video_pinball_random: str
  random: Mapping[str, float]
  human: Mapping[str, float]
  file: str
  description: str

  @property
  def games(self) -> Tuple[str, ...]:
    return tuple(self.random)

  def human_normalized(self, score: float, game: str) -> float:
    """HNS as a fraction: (score - random) / (human - random)."""
    if game not in self.random:
      raise KeyError(f'{game!r} is not in the {self.regime} reference '
                     f'({self.file}, {len(self.random)} games)')
    random_score = self.random[game]
    return (score - random_score) / (self.human[game] - random_score)

  def describe(self) -> str:
    vp = self.random.get(VIDEO_PINBALL)
    vp_text = ('' if vp is None else
               f'; video_pinball random = {vp:g} '
               f'({self.video_pinball_random!r})')
    return (f'{self.regime} -- {self.file}: {self.description}{vp_text}')


@functools.lru_cache(maxsize=None)
def load_reference(regime: str = NOOP,
                   video_pinball_random: str = 'reference') -> Reference:
  """Loads the random/human anchors of `regime` from `results/reference/`."""
  if regime not in REGIMES:
    raise ValueError(f'unknown reference {regime!r}; valid choices: '
                     f'{", ".join(REGIMES)}')
  if video_pinball_random not in VIDEO_PINBALL_RANDOM_CHOICES:
    raise ValueError(
        f'unknown video_pinball random choice {video_pinball_random!r}; valid '
        f'choices: {", ".join(VIDEO_PINBALL_RANDOM_CHOICES)}')
  file_name, random_column, human_column = _REGIME_FILES[regime]
  _, rows = _read_table(file_name)
  random = {row['game']: float(row[random_column]) for row in rows}
  human = {row['game']: float(row[human_column]) for row in rows}
  if video_pinball_random == 'zero' and VIDEO_PINBALL in random:
    random[VIDEO_PINBALL] = 0.0
  # Read-only views: the object is cached and shared by every caller.
  return Reference(regime=regime, video_pinball_random=video_pinball_random,
                   random=types.MappingProxyType(random),
                   human=types.MappingProxyType(human), file=file_name,
                   description=_REGIME_DESCRIPTIONS[regime])


def human_normalized(score: float, game: str,
                     reference: Union[str, Reference] = NOOP,
                     video_pinball_random: str = 'reference') -> float:
  """HNS of `score` on `game` as a fraction (1.0 = human, 0.0 = random)."""
  if isinstance(reference, str):
    reference = load_reference(reference, video_pinball_random)
  return reference.human_normalized(score, game)


# Papers' per-game scores ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Paper:
  """One column of published per-game scores and how its paper aggregated it.

  `regime` and `video_pinball_random` are the anchors with which the paper's
  own reported aggregate reproduces from these scores; `evaluation` is the
  protocol the scores were measured under, which decides beside which of our
  runs they belong.
  """
  name: str
  file: str
  column: str
  family: str
  evaluation: str  # 'noop' or 'human_starts'
  regime: str
  video_pinball_random: str
  description: str


PAPERS: Dict[str, Paper] = {p.name: p for p in (
    Paper('apex_noop', 'apex_dqn_scores.csv', 'noop', 'apex', NOOP, NOOP,
          'reference', 'Ape-X DQN, Table 2, no-op starts'),
    Paper('apex_human_starts', 'apex_dqn_scores.csv', 'human_starts', 'apex',
          HUMAN_STARTS, HUMAN_STARTS, 'reference',
          'Ape-X DQN, Table 2, human starts'),
    Paper('impala_shallow_experts', 'impala_atari57_per_game.csv',
          'impala_shallow_experts', 'impala', NOOP, NOOP, 'zero',
          'IMPALA shallow, experts (one agent per game), App. C.1'),
    Paper('impala_deep_experts', 'impala_atari57_per_game.csv',
          'impala_deep_experts', 'impala', NOOP, NOOP, 'zero',
          'IMPALA deep, experts (one agent per game), App. C.1'),
    Paper('impala_deep_multitask', 'impala_atari57_per_game.csv',
          'impala_deep_multitask', 'impala', NOOP, NOOP, 'zero',
          'IMPALA deep, multi-task (one agent for 57 games), App. C.1'),
    Paper('gorila_noop', 'gorila_per_game.csv', 'gorila_noop', 'gorila', NOOP,
          DQN_NATURE, 'reference', 'Gorila DQN, no-op starts'),
    Paper('gorila_human_starts', 'gorila_per_game.csv', 'gorila_human_starts',
          'gorila', HUMAN_STARTS, HUMAN_STARTS, 'reference',
          'Gorila DQN, human starts'),
    Paper('dqn_human_starts', 'gorila_per_game.csv', 'dqn_human_starts', 'dqn',
          HUMAN_STARTS, HUMAN_STARTS, 'reference',
          'DQN (Nature), human starts, as tabulated in the Gorila paper'),
    Paper('dqn_nature', 'dqn_nature_per_game.csv', 'dqn', 'dqn', NOOP,
          DQN_NATURE, 'reference', 'DQN Nature, Extended Data Table 2'),
    Paper('rainbow_noop', 'rainbow_per_game.csv', 'rainbow_noop', 'rainbow',
          NOOP, NOOP, 'reference', 'Rainbow, no-op starts (54 games)'),
    Paper('rainbow_human_starts', 'rainbow_per_game.csv',
          'rainbow_human_starts', 'rainbow', HUMAN_STARTS, HUMAN_STARTS,
          'reference', 'Rainbow, human starts (54 games)'),
    Paper('distributional_dqn_noop', 'rainbow_per_game.csv',
          'distributional_dqn_noop', 'rainbow', NOOP, NOOP, 'reference',
          'Distributional DQN (C51), no-op starts, Rainbow appendix '
          '(54 games)'),
    Paper('distributional_dqn_human_starts', 'rainbow_per_game.csv',
          'distributional_dqn_human_starts', 'rainbow', HUMAN_STARTS,
          HUMAN_STARTS, 'reference',
          'Distributional DQN (C51), human starts, Rainbow appendix '
          '(54 games)'),
)}


def paper(name: str) -> Paper:
  if name not in PAPERS:
    raise ValueError(f'unknown paper {name!r}; valid choices: '
                     f'{", ".join(PAPERS)}')
  return PAPERS[name]


@functools.lru_cache(maxsize=None)
def _paper_scores(name: str) -> Tuple[Tuple[str, float], ...]:
  spec = paper(name)
  _, rows = _read_table(spec.file)
  out = []
  for row in rows:
    text = (row.get(spec.column) or '').strip()
    if text:
      out.append((row['game'], float(text)))
  return tuple(out)


def load_paper_scores(name: str) -> Dict[str, float]:
  """A paper's raw per-game scores, keyed by snake_case game name."""
  return dict(_paper_scores(name))


@dataclasses.dataclass(frozen=True)
class ReportedAggregate:
  """The aggregate a paper printed, to set beside the one recomputed here."""
  median_pct: Optional[float]
  mean_pct: Optional[float]
  source: str


# Where each paper printed its aggregate: (file, key column, row, median column,
# mean column). Only rows computed from the same per-game data are listed: Ape-X
# Table 1's DQN row (79/68%) comes from a different DQN evaluation than the
# per-game columns here, so it is not attached to `dqn_*`.
_REPORTED = {
    'apex_noop': ('apex_table1_median.csv', 'algorithm', 'Ape-X DQN',
                  'median_noop_pct', None, 'Ape-X Table 1'),
    'apex_human_starts': ('apex_table1_median.csv', 'algorithm', 'Ape-X DQN',
                          'median_human_starts_pct', None,
                          'Ape-X Table 1; the human-starts anchors here are '
                          'approximate'),
    'gorila_noop': ('apex_table1_median.csv', 'algorithm', 'Gorila DQN',
                    'median_noop_pct', None, 'Ape-X Table 1'),
    'gorila_human_starts': ('apex_table1_median.csv', 'algorithm', 'Gorila DQN',
                            'median_human_starts_pct', None,
                            'Ape-X Table 1; the human-starts anchors here are '
                            'approximate'),
    'rainbow_noop': ('apex_table1_median.csv', 'algorithm', 'Rainbow',
                     'median_noop_pct', None,
                     'Ape-X Table 1; 57 games there, 54 here'),
    'rainbow_human_starts': ('apex_table1_median.csv', 'algorithm', 'Rainbow',
                             'median_human_starts_pct', None,
                             'Ape-X Table 1; 57 games there, 54 here'),
    'distributional_dqn_noop': ('apex_table1_median.csv', 'algorithm',
                                'Distributional (C51)', 'median_noop_pct', None,
                                'Ape-X Table 1; 57 games there, 54 here'),
    'distributional_dqn_human_starts': (
        'apex_table1_median.csv', 'algorithm', 'Distributional (C51)',
        'median_human_starts_pct', None,
        'Ape-X Table 1; 57 games there, 54 here'),
    'impala_shallow_experts': ('impala_table4_atari57.csv', 'model',
                               'IMPALA, shallow, experts', 'median_hns_pct',
                               'mean_hns_pct', 'IMPALA Table 4'),
    'impala_deep_experts': ('impala_table4_atari57.csv', 'model',
                            'IMPALA, deep, experts', 'median_hns_pct',
                            'mean_hns_pct', 'IMPALA Table 4'),
    'impala_deep_multitask': ('impala_table4_atari57.csv', 'model',
                              'IMPALA, deep, multi-task', 'median_hns_pct',
                              'mean_hns_pct', 'IMPALA Table 4'),
}


def _optional_float(text: Optional[str]) -> Optional[float]:
  text = (text or '').strip()
  if not text:
    return None
  value = float(text)
  return value if math.isfinite(value) else None


@functools.lru_cache(maxsize=None)
def reported_aggregate(name: str) -> Optional[ReportedAggregate]:
  """What the paper itself printed for `name`, from the reference tables."""
  paper(name)  # validates the name
  if name not in _REPORTED:
    return None
  file_name, key, row_name, median_col, mean_col, source = _REPORTED[name]
  _, rows = _read_table(file_name)
  for row in rows:
    if row[key] == row_name:
      return ReportedAggregate(
          median_pct=_optional_float(row.get(median_col)),
          mean_pct=_optional_float(row.get(mean_col)) if mean_col else None,
          source=source)
  return None
