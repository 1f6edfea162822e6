"""Our Atari scores beside the papers': per-game HNS, median/mean, IQM with CIs.

Usage:
  python -m reproductions.compare results/runs/<run-id> [more runs ...]
  python -m reproductions.compare scores.csv --column score
  python -m reproductions.compare --paper-only apex_noop   # a paper alone

Why it is built this way:
- The papers' headline numbers are medians of human-normalized scores (HNS)
  whose value depends on the random/human anchors, so the anchors are always
  named in the output (`--reference`, `--video-pinball-random`) and the papers'
  own aggregates can be recomputed through the same code path
  (`--paper-only NAME`): if those reproduce, the same code applied to our runs
  is comparable to them.
- A game's score is the mean over a run's evaluation episodes, then the mean
  over runs (seeds), and the table says how many of each: a median over one
  short episode is not the same evidence as a median over 3 seeds x 30
  episodes.
- Games without a score are listed, never dropped silently: a median over the
  20 games that happened to finish is not a median over Atari-57.
- Medians over ~57 games hide run-to-run variance; with several runs (or
  episodes) per game we also print the interquartile mean (IQM) with 95%
  stratified-bootstrap CIs (Agarwal et al. 2021, via rliable).
- The last line is always `median HNS = X% , mean HNS = Y% over N games`,
  the one line scripts and tests parse.
"""

import argparse
import csv
import dataclasses
import math
import pathlib
import sys
import warnings
from typing import (Any, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from reproductions import references
from reproductions import run_records

ScoreInput = Union[float, Sequence[float], Sequence[Sequence[float]]]

DEFAULT_BOOTSTRAP_REPS = 2000
DEFAULT_SEED = 0
FAMILY_KEYWORDS = {'apex': ('apex', 'ape_x', 'ape-x'), 'impala': ('impala',),
                   'gorila': ('gorila',)}


class InputError(ValueError):
  """An input the comparison refuses (unknown game, non-numeric score, ...)."""


# Python API -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunScore:
  """One run's score on one game: an episode mean, or a single given score."""
  score: float
  episode_scores: Optional[Tuple[float, ...]] = None

  @property
  def episodes(self) -> Optional[int]:
    return None if self.episode_scores is None else len(self.episode_scores)


@dataclasses.dataclass(frozen=True)
class GameRow:
  """One line of the per-game table."""
  game: str
  score: float  # mean over runs of each run's mean over episodes
  runs: int
  episodes: Optional[int]  # over all runs; None when only scores were given
  hns_pct: float
  hns_rank: int  # among the games present, 1 = highest HNS
  paper_scores: Dict[str, Optional[float]]
  paper_hns_pct: Dict[str, Optional[float]]
  rank_vs_papers: int  # 1 = ours is best among ours + papers with this game
  entries: int  # how many were ranked (ours + papers with a score)


@dataclasses.dataclass(frozen=True)
class PaperSummary:
  """A paper's median/mean HNS over the games it shares with ours."""
  name: str
  median_pct: Optional[float]
  mean_pct: Optional[float]
  n: int
  reported: Optional[references.ReportedAggregate]


@dataclasses.dataclass(frozen=True)
class IntervalEstimates:
  """Median, IQM and mean of HNS (%) with stratified-bootstrap 95% CIs."""
  rows_kind: str  # 'runs' or 'episodes'
  num_rows: int
  num_games: int
  point: Dict[str, float]
  lower: Dict[str, float]
  upper: Dict[str, float]
  reps: int
  seed: int
  note: str

  @property
  def iqm(self) -> float:
    return self.point['IQM']


@dataclasses.dataclass(frozen=True)
class ComparisonResult:
  """Everything the CLI prints, for figures and tests."""
  reference: references.Reference
  rows: List[GameRow]
  median_pct: float
  mean_pct: float
  n: int
  missing: List[str]  # games of the reference with no score
  not_in_reference: List[str]  # games with a score that the reference lacks
  papers: Dict[str, PaperSummary]
  intervals: Optional[IntervalEstimates]

  @property
  def hns_pct(self) -> Dict[str, float]:
    return {row.game: row.hns_pct for row in self.rows}

  def aggregate_line(self) -> str:
    return format_aggregate_line(self.median_pct, self.mean_pct, self.n)


def format_aggregate_line(median_pct: float, mean_pct: float, n: int) -> str:
  return (f'median HNS = {median_pct:.1f}% , mean HNS = {mean_pct:.1f}% '
          f'over {n} games')


def _is_number(value: Any) -> bool:
  return (isinstance(value, (int, float, np.integer, np.floating))
          and not isinstance(value, bool))


def _as_runs(game: str, value: Any) -> List[RunScore]:
  """float: one run; [float]: runs (seeds); [[float]]: runs of episodes."""
  if isinstance(value, RunScore):
    return [value]
  if _is_number(value):
    return [RunScore(float(value))]
  if isinstance(value, (str, bytes)):
    raise InputError(f'{game}: score {value!r} is not a number')
  runs = []
  for item in value:
    if isinstance(item, RunScore):
      runs.append(item)
    elif _is_number(item):
      runs.append(RunScore(float(item)))
    else:
      episodes = tuple(float(x) for x in item)
      if not episodes:
        continue  # a run without episodes of this game says nothing about it
      runs.append(RunScore(float(np.mean(episodes)), episodes))
  for run in runs:
    if not math.isfinite(run.score):
      raise InputError(f'{game}: score {run.score} is not a finite number')
  return runs


def _rank_descending(values: Sequence[float], value: float) -> int:
  """1 + how many are strictly higher: ties share the better rank."""
  return 1 + sum(v > value for v in values)


def compare_scores(
    scores: Mapping[str, ScoreInput],
    reference: Union[str, references.Reference] = references.NOOP,
    video_pinball_random: str = 'reference',
    papers: Sequence[str] = (),
    bootstrap_reps: int = DEFAULT_BOOTSTRAP_REPS,
    seed: int = DEFAULT_SEED) -> ComparisonResult:
  """Compares per-game scores with the papers' under one reference.

  Args:
    scores: game -> a score, a list of per-run scores (seeds), or a list of
      per-run lists of episode scores. Game names are snake_case (ALE/Gym
      CamelCase ids are converted); an unknown name raises InputError.
    reference: a regime name (`references.REGIMES`) or a loaded Reference.
    video_pinball_random: 'reference' or 'zero' (ignored for a Reference).
    papers: names from `references.PAPERS` to put beside ours.
    bootstrap_reps: stratified-bootstrap replications for the IQM CIs.
    seed: seed of the bootstrap, so printed CIs are reproducible.

  Returns:
    A ComparisonResult; `intervals` is None when there is only one score per
    game (nothing to bootstrap).
  """
  if isinstance(reference, str):
    reference = references.load_reference(reference, video_pinball_random)
  papers = list(dict.fromkeys(papers))
  for name in papers:
    references.paper(name)

  runs_by_game: Dict[str, List[RunScore]] = {}
  for name, value in scores.items():
    game = references.resolve_game(name)
    if game is None:
      raise InputError(_unknown_game_message(name))
    runs = _as_runs(game, value)
    if runs:
      runs_by_game.setdefault(game, []).extend(runs)

  not_in_reference = sorted(
      g for g in runs_by_game if g not in reference.random)
  present = [g for g in reference.games if g in runs_by_game]
  missing = [g for g in reference.games if g not in runs_by_game]
  if not present:
    raise InputError(
        f'no game of the {reference.regime} reference has a score '
        f'({len(missing)} missing)')

  game_score = {g: float(np.mean([r.score for r in runs_by_game[g]]))
                for g in present}
  hns = {g: 100.0 * reference.human_normalized(game_score[g], g)
         for g in present}
  paper_scores = {name: references.load_paper_scores(name) for name in papers}
  all_hns = list(hns.values())

  rows = []
  for g in present:
    cells = {name: paper_scores[name].get(g) for name in papers}
    cells_hns = {name: (None if s is None else
                        100.0 * reference.human_normalized(s, g))
                 for name, s in cells.items()}
    ranked = [hns[g]] + [v for v in cells_hns.values() if v is not None]
    episode_counts = [r.episodes for r in runs_by_game[g]]
    rows.append(GameRow(
        game=g, score=game_score[g], runs=len(runs_by_game[g]),
        episodes=(None if None in episode_counts else sum(episode_counts)),
        hns_pct=hns[g], hns_rank=_rank_descending(all_hns, hns[g]),
        paper_scores=cells, paper_hns_pct=cells_hns,
        rank_vs_papers=_rank_descending(ranked, hns[g]), entries=len(ranked)))

  summaries = {}
  for name in papers:
    values = [row.paper_hns_pct[name] for row in rows
              if row.paper_hns_pct[name] is not None]
    summaries[name] = PaperSummary(
        name=name,
        median_pct=float(np.median(values)) if values else None,
        mean_pct=float(np.mean(values)) if values else None,
        n=len(values), reported=references.reported_aggregate(name))

  return ComparisonResult(
      reference=reference, rows=rows,
      median_pct=float(np.median(all_hns)), mean_pct=float(np.mean(all_hns)),
      n=len(present), missing=missing, not_in_reference=not_in_reference,
      papers=summaries,
      intervals=_interval_estimates(
          {g: runs_by_game[g] for g in present}, reference, bootstrap_reps,
          seed))


def _score_matrix(
    runs_by_game: Mapping[str, List[RunScore]],
    reference: references.Reference) -> Optional[Tuple[np.ndarray, str, str]]:
  """[rows x games] HNS (%) matrix for rliable, or None with one score a game.

  rliable needs a rectangle, so each game contributes the same number of rows:
  the smallest count over the games, taking the first ones in input order.
  Rows are runs (seeds, each its mean over episodes) when every game has at
  least two runs; otherwise evaluation episodes (pooled over the game's runs),
  whose CI then reflects episode-to-episode variation only, not seeds'.
  """
  games = list(runs_by_game)
  run_counts = [len(runs_by_game[g]) for g in games]
  if min(run_counts) >= 2:
    k = min(run_counts)
    values = [[r.score for r in runs_by_game[g][:k]] for g in games]
    kind = 'runs'
    note = (f'rows = {k} runs (seeds) per game, each its mean over evaluation '
            'episodes')
    truncated = max(run_counts) > k
  else:
    pooled = []
    for g in games:
      if any(r.episode_scores is None for r in runs_by_game[g]):
        return None
      pooled.append([s for r in runs_by_game[g] for s in r.episode_scores])
    k = min(len(p) for p in pooled)
    if k < 2:
      return None
    values = [p[:k] for p in pooled]
    kind = 'episodes'
    note = (f'rows = {k} evaluation episodes per game (fewer than 2 runs for '
            'some game, so episodes are the samples; the CI reflects episode-'
            'to-episode variation, not seed-to-seed)')
    truncated = max(len(p) for p in pooled) > k
  if truncated:
    note += f'; games with more use their first {k} (rliable needs a rectangle)'
  matrix = np.array(
      [[100.0 * reference.human_normalized(v, g) for v in column]
       for g, column in zip(games, values)]).T
  return matrix, kind, note


def _interval_estimates(runs_by_game: Mapping[str, List[RunScore]],
                        reference: references.Reference, reps: int,
                        seed: int) -> Optional[IntervalEstimates]:
  built = _score_matrix(runs_by_game, reference)
  if built is None or reps <= 0:
    return None
  matrix, kind, note = built
  # Imported here: rliable pulls in arch/statsmodels (slow to import), needed
  # only when there is something to bootstrap.
  from rliable import library as rly  # pylint: disable=g-import-not-at-top
  from rliable import metrics  # pylint: disable=g-import-not-at-top
  names = ('median', 'IQM', 'mean')

  def aggregates(x: np.ndarray) -> np.ndarray:
    return np.array([metrics.aggregate_median(x), metrics.aggregate_iqm(x),
                     metrics.aggregate_mean(x)])

  with warnings.catch_warnings():
    # rliable 1.2 hands arch a RandomState, which arch 7 deprecates (but
    # honours); the warning is about their interface, not about our numbers.
    warnings.filterwarnings('ignore', message='random_state is deprecated',
                            category=FutureWarning)
    points, intervals = rly.get_interval_estimates(
        {'ours': matrix}, aggregates, reps=reps,
        random_state=np.random.RandomState(seed))
  point, ci = points['ours'], intervals['ours']
  return IntervalEstimates(
      rows_kind=kind, num_rows=matrix.shape[0], num_games=matrix.shape[1],
      point={n: float(point[i]) for i, n in enumerate(names)},
      lower={n: float(ci[0, i]) for i, n in enumerate(names)},
      upper={n: float(ci[1, i]) for i, n in enumerate(names)},
      reps=reps, seed=seed, note=note)


def _unknown_game_message(name: str) -> str:
  suggestion = references.suggest_game(name)
  hint = f"; did you mean '{suggestion}'?" if suggestion else ''
  return (f"unknown game '{name}'{hint} Valid names are the 57 snake_case "
          'Atari-57 names of results/reference/atari57_reference.csv (e.g. '
          'montezuma_revenge, up_n_down).')


# Inputs -----------------------------------------------------------------------


def read_scores_csv(path: pathlib.Path,
                    column: Optional[str] = None) -> Dict[str, List[float]]:
  """Per-game scores from a CSV with a `game` column; one run per row.

  Several rows of the same game are several runs (seeds). Any bad row fails
  the whole file with its line number: a comparison over a silently shortened
  table would be wrong without looking wrong.
  """
  path = pathlib.Path(path)
  with open(path, newline='') as f:
    reader = csv.DictReader(f)
    fields = reader.fieldnames or []
    if 'game' not in fields:
      raise InputError(f'{path}: line 1: no `game` column (columns: '
                       f'{", ".join(fields) or "none"})')
    if column is None:
      others = [c for c in fields if c != 'game']
      if 'score' in fields:
        column = 'score'
      elif len(others) == 1:
        column = others[0]
      else:
        raise InputError(f'{path}: choose the score column with --column '
                         f'(columns: {", ".join(others)})')
    if column not in fields:
      raise InputError(f'{path}: line 1: no column {column!r} (columns: '
                       f'{", ".join(fields)})')
    scores: Dict[str, List[float]] = {}
    for row in reader:
      line = reader.line_num
      name = (row.get('game') or '').strip()
      game = references.resolve_game(name)
      if game is None:
        raise InputError(f'{path}: line {line}: {_unknown_game_message(name)}')
      text = (row.get(column) or '').strip()
      try:
        value = float(text)
      except ValueError:
        value = math.nan
      if not math.isfinite(value):
        raise InputError(f'{path}: line {line}: score {text!r} in column '
                         f'{column!r} for {game} is not a number')
      scores.setdefault(game, []).append(value)
  return scores


@dataclasses.dataclass(frozen=True)
class RunInfo:
  """What the output says about each run it read."""
  run_dir: pathlib.Path
  program: str
  seed: Any
  games: Tuple[str, ...]
  episodes: int
  # What the scores are: the final evaluation of the last checkpoint, or,
  # for a run without one, every evaluation episode played while training.
  source: str = 'training'


def expand_run_dirs(path: pathlib.Path) -> List[pathlib.Path]:
  """A run directory, or a directory of runs (e.g. results/runs)."""
  path = pathlib.Path(path)
  if (path / run_records.CONFIG_FILE).exists():
    return [path]
  if path.is_dir():
    runs = [r.run_dir for r in run_records.list_runs(path)]
    if runs:
      return runs
  raise InputError(f'{path}: neither a CSV file nor a run directory (no '
                   f'{run_records.CONFIG_FILE}, and no runs inside)')


def read_runs(run_dirs: Sequence[pathlib.Path]
             ) -> Tuple[Dict[str, List[RunScore]], List[RunInfo]]:
  """Per game, one RunScore per run: the mean over its evaluation episodes.

  The episodes are the run's final evaluation (final_evaluation.csv: the
  last checkpoint, as the papers score) when it has one; otherwise every
  evaluation episode played during training, which mixes the untrained start
  with the end and so understates a run that learned (RunInfo.source says
  which).
  """
  scores: Dict[str, List[RunScore]] = {}
  infos = []
  seen = set()
  for run_dir in run_dirs:
    key = pathlib.Path(run_dir).resolve()
    if key in seen:
      continue  # the same run twice would count as two seeds
    seen.add(key)
    record = run_records.RunRecord(run_dir)
    config = record.read_config()
    episodes_by_game: Dict[str, List[float]] = {}
    seeds = set()
    final = record.read_final_evaluation()
    if final:
      source, file_name, episodes = 'final', run_records.FINAL_EVALUATION_FILE, final
    else:
      source, file_name = 'training', run_records.EVALUATION_FILE
      episodes = record.read_evaluation_episodes()
    for episode in episodes:
      name = str(episode.get('game') or '')
      game = references.resolve_game(name)
      if game is None:
        raise InputError(f'{run_dir}: {file_name}: '
                         f'{_unknown_game_message(name)}')
      score = episode.get('score')
      if not _is_number(score) or not math.isfinite(score):
        raise InputError(f'{run_dir}: {file_name}: score '
                         f'{score!r} for {game} is not a number')
      episodes_by_game.setdefault(game, []).append(float(score))
      if episode.get('seed') is not None:
        seeds.add(episode['seed'])
    for game, values in episodes_by_game.items():
      scores.setdefault(game, []).append(
          RunScore(float(np.mean(values)), tuple(values)))
    seed = config.get('seed')
    if seed is None and seeds:
      seed = seeds.pop() if len(seeds) == 1 else sorted(seeds)
    infos.append(RunInfo(
        run_dir=pathlib.Path(run_dir), program=str(config.get('program', '')),
        seed=seed, games=tuple(sorted(episodes_by_game)),
        episodes=sum(len(v) for v in episodes_by_game.values()),
        source=source))
  return scores, infos


_SOURCE_TEXT = {
    'final': ('final-evaluation episodes of the last checkpoint '
              '(final_evaluation.csv)'),
    'training': ('evaluation episodes played during training (no '
                 'final_evaluation.csv: the mean mixes the start with the '
                 'end; python -m reproductions.evaluate RUN adds it)'),
}


def run_families(configs: Sequence[Mapping[str, Any]]) -> List[str]:
  """Agent families ('apex', 'impala', 'gorila') named in runs' configs."""
  families = []
  for config in configs:
    text = ' '.join(str(config.get(k, '')) for k in
                    ('program', 'agent', 'algorithm')).lower()
    for family, keywords in FAMILY_KEYWORDS.items():
      if any(k in text for k in keywords) and family not in families:
        families.append(family)
  return families


def default_papers(regime: str, games: Sequence[str],
                   families: Sequence[str] = ()) -> Tuple[List[str], str]:
  """Which papers to show beside ours, and why (printed in the header)."""
  evaluation = (references.HUMAN_STARTS if regime == references.HUMAN_STARTS
                else references.NOOP)
  games = set(games)
  candidates = [p.name for p in references.PAPERS.values()
                if p.evaluation == evaluation
                and games & set(references.load_paper_scores(p.name))]
  protocol = ('human starts' if evaluation == references.HUMAN_STARTS
              else 'no-op starts')
  same_family = [n for n in candidates
                 if references.PAPERS[n].family in families]
  if same_family:
    return same_family, (
        f'the papers of the agent named in the runs\' config '
        f'({", ".join(families)}) measured with {protocol}, as the '
        f'{regime} reference implies; pick others with --paper')
  return candidates, (
      f'every paper with a score for at least one of these games measured with '
      f'{protocol}, as the {regime} reference implies; pick with --paper')


# Output -----------------------------------------------------------------------


def _fmt(value: Optional[float], digits: int = 1) -> str:
  return '-' if value is None else f'{value:.{digits}f}'


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> List[str]:
  widths = [max(len(header[i]), *(len(r[i]) for r in body)) if body
            else len(header[i]) for i in range(len(header))]

  def line(cells):
    out = [cells[0].ljust(widths[0])]
    out += [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
    return '  '.join(out).rstrip()
  return [line(header)] + [line(r) for r in body]


def render(result: ComparisonResult, input_lines: Sequence[str],
           papers_reason: str, paper_only: Optional[str] = None) -> str:
  """The CLI's text: header, table, missing games, papers, CIs, final line."""
  ref = result.reference
  papers = list(result.papers)
  out = ['Atari human-normalized scores (HNS): ours beside the papers\'']
  out += list(input_lines)
  out.append(f'reference: {ref.describe()}')
  out.append(f'  {references.VIDEO_PINBALL_NOTE}')
  out.append('HNS % = 100 * (score - random) / (human - random), random and '
             'human from the reference above, for ours and the papers alike.')
  if papers:
    out.append('papers shown: ' + ', '.join(papers) +
               f' -- chosen as {papers_reason}')
    for name in papers:
      out.append(f'  {name}: {references.PAPERS[name].description}')
  else:
    out.append(f'papers shown: none ({papers_reason})')
  out.append('columns:')
  out.append('  score      our raw score: mean over each run\'s evaluation '
             'episodes, then mean over runs')
  out.append('  runs       runs (seeds) averaged for the game; episodes = '
             'evaluation episodes over those runs (- when the input gave one '
             'score per run)')
  out.append(f'  rank       rank of our HNS among the {result.n} games present '
             '(1 = highest); the median lies at rank '
             f'{(result.n + 1) / 2:g}')
  if papers:
    out.append('  <paper>    the paper\'s raw score and its HNS (same '
               'reference); - where it has no score for the game')
    out.append('  vs_papers  our place among ours and the papers with a score '
               'for the game, by HNS (1 = best; 1/3 = best of 3)')
  out.append('')

  header = ['game', 'runs', 'episodes', 'score', 'hns%', 'rank']
  for name in papers:
    header += [name, f'{name} hns%']
  if papers:
    header.append('vs_papers')
  body = []
  for row in result.rows:
    cells = [row.game, str(row.runs),
             '-' if row.episodes is None else str(row.episodes),
             _fmt(row.score), _fmt(row.hns_pct), str(row.hns_rank)]
    for name in papers:
      cells += [_fmt(row.paper_scores[name]), _fmt(row.paper_hns_pct[name])]
    if papers:
      cells.append(f'{row.rank_vs_papers}/{row.entries}')
    body.append(cells)
  out += _table(header, body)
  out.append('')

  total = len(ref.games)
  if result.missing:
    out.append(f'missing: {len(result.missing)} of the {total} games of the '
               f'{ref.regime} reference have no score (not in N): '
               + ', '.join(result.missing))
  else:
    out.append(f'missing: none; all {total} games of the {ref.regime} '
               'reference have a score')
  if result.not_in_reference:
    out.append(f'not in the {ref.regime} reference (scored but no HNS, not in '
               'N): ' + ', '.join(result.not_in_reference))

  if papers:
    out.append(f'papers over the games they share with ours (same reference):')
    for name, s in result.papers.items():
      text = (f'  {name}: median {_fmt(s.median_pct)}%, mean '
              f'{_fmt(s.mean_pct)}% over {s.n} games')
      if s.reported is not None:
        text += '; ' + _reported_text(s.reported)
        spec = references.PAPERS[name]
        if (spec.regime, spec.video_pinball_random) != (
            ref.regime, ref.video_pinball_random):
          text += (f' with its own anchors ({spec.regime}, video_pinball '
                   f'random {spec.video_pinball_random!r}; --paper-only '
                   f'{name} recomputes it)')
      out.append(text)
  if paper_only is not None:
    reported = references.reported_aggregate(paper_only)
    out.append(f'{paper_only} as published: ' +
               (_reported_text(reported) if reported else
                'no aggregate of these per-game scores is in the reference '
                'tables'))

  iv = result.intervals
  if iv is None:
    out.append('IQM: not computed -- one score per game (needs several runs '
               'or evaluation episodes per game to bootstrap)')
  else:
    out.append(f'uncertainty: score matrix [{iv.num_rows} {iv.rows_kind} x '
               f'{iv.num_games} games] of HNS %; {iv.note}.')
    out.append(f'  95% stratified-bootstrap CIs (rliable, percentile, '
               f'{iv.reps} reps, seed {iv.seed}); median/mean here are over '
               'these rows, so they can differ from the line below')
    for name in ('IQM', 'median', 'mean'):
      out.append(f'  {name} HNS = {iv.point[name]:.1f}% '
                 f'[{iv.lower[name]:.1f}, {iv.upper[name]:.1f}]')
  out.append(result.aggregate_line())
  return '\n'.join(out) + '\n'


def _reported_text(reported: references.ReportedAggregate) -> str:
  parts = []
  if reported.median_pct is not None:
    parts.append(f'median {reported.median_pct:g}%')
  if reported.mean_pct is not None:
    parts.append(f'mean {reported.mean_pct:g}%')
  return (f'the paper reports {", ".join(parts)} over all its games '
          f'({reported.source})')


# CLI --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='python -m reproductions.compare',
      description=('Per-game scores and human-normalized medians/means of our '
                   'runs beside the papers\'. Ends with the line '
                   '"median HNS = X% , mean HNS = Y% over N games".'))
  parser.add_argument(
      'inputs', nargs='*',
      help='run directories (results/runs/<id>, or a folder of runs) and/or '
           'CSV files of per-game scores with a `game` column')
  parser.add_argument('--column', help='score column of the CSV inputs '
                      '(default: `score`, or the only other column)')
  parser.add_argument('--reference', choices=references.REGIMES, default=None,
                      help='random/human anchors (default: noop; with '
                      '--paper-only, the one the paper used)')
  parser.add_argument('--video-pinball-random',
                      choices=references.VIDEO_PINBALL_RANDOM_CHOICES,
                      default=None,
                      help="video_pinball random score: the table's value or 0 "
                      "(default: reference; with --paper-only, the paper's)")
  parser.add_argument('--paper', action='append', default=None,
                      choices=list(references.PAPERS),
                      help='papers to show beside ours (repeatable; default: '
                      'those matching the runs and the reference)')
  parser.add_argument('--no-papers', action='store_true',
                      help='show no paper columns')
  parser.add_argument('--paper-only', choices=list(references.PAPERS),
                      default=None,
                      help="compute a paper's own aggregate from its per-game "
                      'scores (instead of inputs)')
  parser.add_argument('--bootstrap-reps', type=int,
                      default=DEFAULT_BOOTSTRAP_REPS,
                      help='bootstrap replications for the IQM CIs')
  parser.add_argument('--seed', type=int, default=DEFAULT_SEED,
                      help='seed of the bootstrap')
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = _parser()
  args = parser.parse_args(argv)
  try:
    text = _run(args)
  except InputError as e:
    parser.error(str(e))
  sys.stdout.write(text)
  return 0


def _run(args: argparse.Namespace) -> str:
  input_lines = []
  families: List[str] = []
  scores: Dict[str, List[Any]] = {}
  if args.paper_only is not None:
    if args.inputs:
      raise InputError('--paper-only takes no inputs')
    spec = references.paper(args.paper_only)
    regime = args.reference or spec.regime
    vp = args.video_pinball_random or spec.video_pinball_random
    scores = {g: [s] for g, s in
              references.load_paper_scores(args.paper_only).items()}
    input_lines.append(
        f'input: the published per-game scores of {spec.name} '
        f'({spec.description}): results/reference/{spec.file}, column '
        f'{spec.column!r}')
    if args.reference is None or args.video_pinball_random is None:
      input_lines.append(
          f'  reference defaults to the paper\'s own ({spec.regime}, '
          f'video_pinball random {spec.video_pinball_random!r}), with which '
          'its published aggregate reproduces')
  else:
    if not args.inputs:
      raise InputError(
          'give run directories or CSV files, or --paper-only NAME')
    regime = args.reference or references.NOOP
    vp = args.video_pinball_random or 'reference'
    run_dirs: List[pathlib.Path] = []
    for text in args.inputs:
      path = pathlib.Path(text)
      if path.is_file():
        csv_scores = read_scores_csv(path, args.column)
        rows = sum(len(v) for v in csv_scores.values())
        input_lines.append(f'input: {path} (column {args.column or "auto"}): '
                           f'{rows} rows, {len(csv_scores)} games; one row = '
                           'one run')
        for game, values in csv_scores.items():
          scores.setdefault(game, []).extend(values)
      elif path.exists():
        run_dirs.extend(expand_run_dirs(path))
      else:
        raise InputError(f'{path}: no such file or directory')
    if run_dirs:
      run_scores, infos = read_runs(run_dirs)
      for game, runs in run_scores.items():
        scores.setdefault(game, []).extend(runs)
      input_lines.append(f'input: {len(infos)} run(s):')
      for info in infos:
        input_lines.append(
            f'  {info.run_dir} (program {info.program or "?"}, seed '
            f'{info.seed if info.seed is not None else "?"}): '
            f'{info.episodes} {_SOURCE_TEXT[info.source]} over '
            f'{len(info.games)} games')
      families = run_families(
          [run_records.RunRecord(d).read_config() for d in run_dirs])

  if args.no_papers:
    papers, reason = [], '--no-papers'
  elif args.paper:
    papers, reason = list(dict.fromkeys(args.paper)), 'asked with --paper'
  elif args.paper_only is not None:
    papers, reason = [], 'the input is itself a paper; add others with --paper'
  else:
    present = [references.resolve_game(g) for g in scores]
    papers, reason = default_papers(regime, present, families)

  result = compare_scores(
      scores, reference=regime, video_pinball_random=vp, papers=papers,
      bootstrap_reps=args.bootstrap_reps, seed=args.seed)
  return render(result, input_lines, reason, paper_only=args.paper_only)


if __name__ == '__main__':
  sys.exit(main())
