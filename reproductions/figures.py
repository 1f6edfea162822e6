"""The papers' figures, drawn from our run records (and nothing else).

Usage:
  python -m reproductions.figures --list
  python -m reproductions.figures apex_fig4 results/runs --out results/figures
  python -m reproductions.figures apex_fig11 results/runs/<id> results/runs/<id2>
  python -m reproductions.figures --all results/runs --out results/figures

Inputs are run directories (`results/runs/<run-id>`) or folders of runs
(default: `results/runs`). Each figure writes `<out>/<name>.png` (atomically)
and `<out>/<name>.json` (the runs it used and the runs it skipped, and why).
`--no-paper` drops the paper's overlaid numbers (their scale can flatten a
short local run's curve); `--smooth N` overrides the curves' moving average.

Contract (launch programs follow it; this module reads only run records)
=========================================================================

Which runs a figure uses is decided by keys of the run's `config.json`:

  agent              'apex_dqn' | 'apex_dpg' | 'impala' | 'gorila'   REQUIRED
  games / game       a list of game names, or one name. Atari names in any
                     spelling `references.resolve_game` accepts ('pong',
                     'Pong', 'PongNoFrameskip-v4'); Ape-X DPG: task names.
                     A run with len(games) > 1 is ONE agent trained on all of
                     them (IMPALA multi-task); experts are one run per game.
  num_actors         int: actor count (Ape-X Figs. 3, 4, 6, 11, 12).
  replay_capacity    int: replay size in transitions (Ape-X Fig. 5); the
                     Ape-X config's `replay_soft_capacity` is read as an alias.
  transition_copies  int k: each transition added k times (Ape-X Fig. 6);
                     missing = 1.
  epsilon_variant    str: how actors' epsilons are chosen (Ape-X Fig. 7):
                     'per_actor' (the paper's eps_i = 0.4^(1+7i/(N-1)), the
                     default when missing), 'fixed_set' (a small fixed set of
                     6 values, App. B) or any other name (drawn as given).
  prioritized        bool: prioritized (True, missing = True) or uniform
                     replay (Ape-X Fig. 12).
  architecture       'shallow' | 'deep' (IMPALA Atari figure).
  correction         'vtrace' | 'one_step_is' | 'epsilon_correction' | 'none'
                     (IMPALA Table 2); missing = 'vtrace'.
  replay_mixing      bool: IMPALA learner mixes replayed data into batches
                     (Table 2 "with replay"); missing = False.
  profile            'paper' | 'local': printed in every figure's footer.
  seed               any: runs equal in all other keys are seeds; their
                     curves are averaged (the legend says how many).

Runs that differ in an experiment key the figure does not vary (num_actors,
replay_capacity, transition_copies, epsilon_variant, prioritized,
architecture, correction, replay_mixing, profile) are never averaged
together: they get lines (or, in impala_table2, panels) of their own whose
labels name the differing values, e.g. '256 actors, replay_capacity=250K'.

A key a figure needs (its `required` keys, shown by --list) that is missing
from a run's config: the run is skipped with a warning naming the run and the
key. A run of another agent, or one outside the figure's experiment (its
`controls`, e.g. Fig. 4 uses only transition_copies=1, prioritized runs with
per-actor epsilons, the missing-key defaults above applying), is left out
silently and counted in the figure's .json. A figure with no usable run fails
with a message naming the runs it needs.

Data each figure reads:
  learning curves   evaluation_episodes.csv: score against wall_time_s (drawn
                    in hours or minutes) or training_frames; episodes sharing
                    an x value are averaged into one point; per-game panels use
                    the episode's `game` column. Human-normalized where the
                    paper plots HNS (`references.human_normalized`, no-op
                    anchors; percent). Seeds are averaged on a common grid.
  final return      mean of the last 10% (at least 1) of a run's evaluation
                    episodes of a game, in training_frames order.
  throughput        metrics/supervisor.csv: actor_frames_per_s, steady state =
                    median over the rows of the second half of the run
                    (wall_time_s >= half the last wall_time_s).
  footer            runs, profiles, total frames (last supervisor
                    actor_frames, else the largest training_frames) and wall
                    time (last supervisor wall_time_s, else the largest
                    evaluation wall_time_s), the paper's scale, and the
                    config values of the runs drawn.

Every figure function returns a `FigureResult`: the matplotlib Figure (our
lines carry gid 'ours', the paper's overlays gid 'paper'; bars likewise),
the runs used and the warnings. The registry `FIGURES` (name -> FigureSpec)
is the one list that --list, --all, the errors and the README table
(`readme_table()`) are made from.
"""

import argparse
import csv
import dataclasses
import functools
import io
import json
import math
import pathlib
import sys
import textwrap
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple)

import matplotlib
matplotlib.use('Agg')
from matplotlib import figure as mpl_figure  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from reproductions import compare  # pylint: disable=g-import-not-at-top
from reproductions import references
from reproductions import run_records

DEFAULT_OUT = run_records.DEFAULT_ROOT.parent / 'figures'

MISSING = object()

# Config keys read under another name when the contract's name is absent.
KEY_ALIASES = {'replay_capacity': ('replay_soft_capacity',)}
# Values assumed for these keys when a run's config lacks them.
DEFAULTS = {'transition_copies': 1, 'prioritized': True,
            'epsilon_variant': 'per_actor', 'replay_mixing': False,
            'correction': 'vtrace'}
# Keys whose values the footer lists (those present in the drawn runs).
CONTEXT_KEYS = ('num_actors', 'replay_capacity', 'transition_copies',
                'epsilon_variant', 'prioritized', 'architecture', 'correction',
                'replay_mixing', 'seed')

# Config keys that define an experiment: runs differing in one are not seeds.
EXPERIMENT_KEYS = ('num_actors', 'replay_capacity', 'transition_copies',
                   'epsilon_variant', 'prioritized', 'architecture',
                   'correction', 'replay_mixing', 'learning_rate', 'profile')

CORRECTIONS = (('vtrace', 'V-trace'), ('one_step_is', '1-Step'),
               ('epsilon_correction', 'epsilon-correction'),
               ('none', 'No-correction'))

OURS, PAPER = 'ours', 'paper'
FOOTER_FONTSIZE = 7


class FigureError(ValueError):
  """A figure that cannot be drawn: unknown name, or no usable runs."""


# Runs -------------------------------------------------------------------------


class Run:
  """One run record with the parsed pieces the figures read (cached)."""

  def __init__(self, run_dir: pathlib.Path):
    self.record = run_records.RunRecord(run_dir)
    self.config: Dict[str, Any] = self.record.read_config()

  @property
  def name(self) -> str:
    return str(self.record.run_dir)

  def get(self, key: str, default: Any = MISSING) -> Any:
    """The config value of `key` (contract name, then aliases, then games)."""
    if key == 'games':
      games = self.config.get('games')
      if games is None and self.config.get('game') is not None:
        games = [self.config['game']]
      if isinstance(games, str):
        games = [games]
      return list(games) if games else default
    for name in (key,) + KEY_ALIASES.get(key, ()):
      if self.config.get(name) is not None:
        return self.config[name]
    return default

  def value(self, key: str) -> Any:
    """Like get, with the contract's defaults for optional keys."""
    return self.get(key, DEFAULTS.get(key, MISSING))

  @functools.cached_property
  def episodes(self) -> List[Dict[str, Any]]:
    return [e for e in self.record.read_evaluation_episodes()
            if _finite(e.get('score'))]

  @functools.cached_property
  def final_episodes(self) -> List[Dict[str, Any]]:
    """The final evaluation of the last checkpoint; [] if the run has none."""
    return [e for e in self.record.read_final_evaluation() or []
            if _finite(e.get('score'))]

  @functools.cached_property
  def supervisor(self) -> List[Dict[str, Any]]:
    return self.record.read_metrics('supervisor')

  @property
  def total_frames(self) -> float:
    frames = [r['actor_frames'] for r in self.supervisor
              if _finite(r.get('actor_frames'))]
    if frames:
      return float(frames[-1])
    return float(max((e.get('training_frames') or 0 for e in self.episodes),
                     default=0))

  @property
  def wall_time_s(self) -> float:
    times = [r['wall_time_s'] for r in self.supervisor
             if _finite(r.get('wall_time_s'))]
    if times:
      return float(times[-1])
    return float(max((e.get('wall_time_s') or 0 for e in self.episodes),
                     default=0))

  def steady_frames_per_s(self) -> Optional[float]:
    """Median actor_frames_per_s over the second half of the run."""
    rows = [r for r in self.supervisor if _finite(r.get('actor_frames_per_s'))
            and _finite(r.get('wall_time_s'))]
    if not rows:
      return None
    half = rows[-1]['wall_time_s'] / 2
    late = [r['actor_frames_per_s'] for r in rows if r['wall_time_s'] >= half]
    return float(np.median(late or [r['actor_frames_per_s'] for r in rows]))


def _finite(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(
      value, bool) and math.isfinite(value)


def load_runs(inputs: Sequence[Any]) -> List[Run]:
  """Runs from run directories and folders of runs (default results/runs)."""
  paths = [pathlib.Path(p) for p in inputs] or [run_records.DEFAULT_ROOT]
  runs, seen = [], set()
  for path in paths:
    if not path.exists():
      raise FigureError(f'{path}: no such directory')
    try:
      dirs = compare.expand_run_dirs(path)
    except compare.InputError as e:
      raise FigureError(str(e)) from e
    for d in dirs:
      key = d.resolve()
      if key not in seen:
        seen.add(key)
        runs.append(Run(d))
  return runs


def _game_name(name: Any) -> str:
  """Atari names to snake_case; other names (DPG tasks) as given."""
  text = str(name)
  return references.resolve_game(text) or text


# Registry ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FigureSpec:
  """One figure: what it reproduces, which runs it takes, how it is drawn."""
  name: str
  paper_figure: str
  description: str
  agents: Tuple[str, ...]
  required: Tuple[str, ...]
  controls: Mapping[str, Tuple[Any, ...]]
  paper_scale: str
  draw: Callable[..., mpl_figure.Figure]
  needs_data: str = 'evaluation'  # or 'throughput'

  def needs(self) -> str:
    parts = [f"agent in {list(self.agents)}" if len(self.agents) > 1
             else f"agent='{self.agents[0]}'"]
    parts.append('config keys ' + ', '.join(self.required))
    parts += [f'{k} in {list(v)}' if len(v) > 1 else f'{k}={v[0]!r}'
              for k, v in self.controls.items()]
    data = ('metrics/supervisor.csv with actor_frames_per_s'
            if self.needs_data == 'throughput'
            else 'evaluation episodes in evaluation_episodes.csv')
    return f'runs with {"; ".join(parts)}; and {data}'


@dataclasses.dataclass
class FigureResult:
  """What a figure function returns: the figure and how it was made."""
  name: str
  figure: mpl_figure.Figure
  runs: List[str]
  warnings: List[str]
  left_out: Dict[str, str]
  path: Optional[pathlib.Path] = None

  def panels(self) -> Dict[str, List[str]]:
    """Panel title -> labels of our lines (for tests and quick checks)."""
    return {ax.get_title(): [l.get_label() for l in ax.get_lines()
                             if l.get_gid() == OURS]
            for ax in self.figure.axes}


FIGURES: Dict[str, FigureSpec] = {}


def _register(**kwargs) -> Callable:
  def wrap(fn):
    FIGURES[kwargs['name']] = FigureSpec(draw=fn, **kwargs)
    return fn
  return wrap


def figure_names() -> List[str]:
  return list(FIGURES)


def spec(name: str) -> FigureSpec:
  if name not in FIGURES:
    raise FigureError(f'unknown figure {name!r}; valid figures: '
                      f'{", ".join(FIGURES)}')
  return FIGURES[name]


def readme_table() -> str:
  """Markdown table of the figures (for the README)."""
  lines = ['| figure | reproduces | what it shows | needs |',
           '|---|---|---|---|']
  for s in FIGURES.values():
    lines.append(f'| `{s.name}` | {s.paper_figure} | {s.description} | '
                 f'{s.needs()} |')
  return '\n'.join(lines)


# Selection --------------------------------------------------------------------


def select_runs(figure_spec: FigureSpec, runs: Sequence[Run],
                warn: Callable[[str], None]) -> Tuple[List[Run], Dict[str, str]]:
  """The runs a figure draws; warns for each run missing a needed key."""
  usable, left_out = [], {}
  for run in runs:
    agent = run.get('agent')
    if agent is MISSING:
      warn(f'{figure_spec.name}: skipping run {run.name}: config.json has no '
           f"key 'agent' (this figure needs agent "
           f"{' or '.join(map(repr, figure_spec.agents))})")
      left_out[run.name] = "missing key 'agent'"
      continue
    if agent not in figure_spec.agents:
      left_out[run.name] = f'agent {agent!r}'
      continue
    missing = [k for k in figure_spec.required if run.get(k) is MISSING]
    if missing:
      warn(f'{figure_spec.name}: skipping run {run.name}: config.json has no '
           f'key {", ".join(repr(k) for k in missing)}')
      left_out[run.name] = f'missing key {", ".join(missing)}'
      continue
    outside = [f'{k}={run.value(k)!r}' for k, allowed in
               figure_spec.controls.items() if run.value(k) not in allowed]
    if outside:
      left_out[run.name] = 'outside the experiment: ' + ', '.join(outside)
      continue
    if figure_spec.needs_data == 'throughput':
      if run.steady_frames_per_s() is None:
        warn(f'{figure_spec.name}: skipping run {run.name}: '
             "metrics/supervisor.csv has no key 'actor_frames_per_s'")
        left_out[run.name] = 'no actor_frames_per_s'
        continue
    elif not run.episodes:
      warn(f'{figure_spec.name}: skipping run {run.name}: no evaluation '
           'episodes')
      left_out[run.name] = 'no evaluation episodes'
      continue
    usable.append(run)
  return usable, left_out


def _no_runs_message(figure_spec: FigureSpec, runs: Sequence[Run],
                     left_out: Mapping[str, str]) -> str:
  text = (f'{figure_spec.name} ({figure_spec.paper_figure}) has no usable '
          f'runs: it needs {figure_spec.needs()}.')
  if not runs:
    return text + ' No run records were found in the inputs.'
  reasons: Dict[str, int] = {}
  for why in left_out.values():
    reasons[why] = reasons.get(why, 0) + 1
  return (text + f' Read {len(runs)} run(s), left out: ' +
          '; '.join(f'{n} x {why}' for why, n in reasons.items()))


# Curves -----------------------------------------------------------------------

Curve = Tuple[np.ndarray, np.ndarray]


def _episode_curve(episodes: Iterable[Mapping[str, Any]], x_key: str,
                   y: Callable[[Mapping[str, Any]], float]) -> Optional[Curve]:
  """Points (x, mean y) of episodes, one per distinct x, sorted by x."""
  by_x: Dict[float, List[float]] = {}
  for e in episodes:
    x = e.get(x_key)
    if not _finite(x):
      continue
    value = y(e)
    if value is not None and math.isfinite(value):
      by_x.setdefault(float(x), []).append(value)
  if not by_x:
    return None
  xs = np.array(sorted(by_x))
  return xs, np.array([np.mean(by_x[x]) for x in xs])


def _smooth(curve: Curve, window: int) -> Curve:
  """Trailing moving average over `window` points (fewer at the start)."""
  x, y = curve
  if window <= 1 or len(y) < 2:
    return curve
  c = np.concatenate([[0.0], np.cumsum(y)])
  idx = np.arange(1, len(y) + 1)
  lo = np.maximum(0, idx - window)
  return x, (c[idx] - c[lo]) / (idx - lo)


def _mean_curve(curves: Sequence[Curve], points: int = 100) -> Optional[Curve]:
  """Seeds averaged on a common grid over the x range all of them cover."""
  curves = [c for c in curves if c is not None]
  if not curves:
    return None
  if len(curves) == 1:
    return curves[0]
  lo = max(c[0][0] for c in curves)
  hi = min(c[0][-1] for c in curves)
  if hi <= lo:
    return (np.array([hi]), np.array([np.mean([c[1][-1] for c in curves])]))
  grid = np.linspace(lo, hi, points)
  return grid, np.mean([np.interp(grid, x, y) for x, y in curves], axis=0)


def _median_curve(curves: Mapping[str, Curve],
                  points: int = 100) -> Optional[Curve]:
  """Median over games on the x range every game covers."""
  curves = {g: c for g, c in curves.items() if c is not None}
  if not curves:
    return None
  lo = max(c[0][0] for c in curves.values())
  hi = min(c[0][-1] for c in curves.values())
  if hi <= lo:
    return (np.array([hi]),
            np.array([np.median([c[1][-1] for c in curves.values()])]))
  grid = np.linspace(lo, hi, points)
  return grid, np.median([np.interp(grid, x, y) for x, y in curves.values()],
                         axis=0)


def _score(e: Mapping[str, Any]) -> float:
  return float(e['score'])


def _hns_pct(e: Mapping[str, Any]) -> Optional[float]:
  game = references.resolve_game(str(e['game']))
  if game is None:
    return None
  return 100.0 * references.human_normalized(float(e['score']), game)


def _run_game_curves(run: Run, x_key: str, y: Callable,
                     x_scale: float = 1.0) -> Dict[str, Curve]:
  by_game: Dict[str, List[Mapping[str, Any]]] = {}
  for e in run.episodes:
    by_game.setdefault(_game_name(e.get('game')), []).append(e)
  out = {}
  for game, episodes in by_game.items():
    curve = _episode_curve(episodes, x_key, y)
    if curve is not None:
      out[game] = (curve[0] * x_scale, curve[1])
  return out


def _final_score(run: Run, game: str) -> Optional[float]:
  """The run's final score on `game`: its final evaluation when it has one
  (the papers' protocol), else the mean of the last 10% of the evaluation
  episodes played during training (`final_score_sources` says which)."""
  final = [e['score'] for e in run.final_episodes
           if _game_name(e['game']) == game]
  if final:
    return float(np.mean(final))
  episodes = sorted((e for e in run.episodes if _game_name(e['game']) == game),
                    key=lambda e: (e.get('training_frames') or 0,
                                   e.get('wall_time_s') or 0))
  if not episodes:
    return None
  k = max(1, len(episodes) // 10)
  return float(np.mean([e['score'] for e in episodes[-k:]]))


def final_score_sources(runs: Sequence[Run]) -> str:
  """The footer's account of where final scores came from."""
  final = sum(1 for r in runs if r.final_episodes)
  if final == len(runs):
    return 'Final scores: final evaluation of the last checkpoint.'
  if final == 0:
    return ('Final scores: last 10% of the training-time evaluation '
            'episodes (no run has a final evaluation).')
  return (f'Final scores: final evaluation for {final} of {len(runs)} runs, '
          'the last 10% of training-time evaluation for the rest.')


# Drawing helpers --------------------------------------------------------------


@dataclasses.dataclass
class _Context:
  figure_spec: FigureSpec
  runs: List[Run]
  warn: Callable[[str], None]
  overlay: bool = True
  smooth: Optional[int] = None


def _time_axis(max_s: float) -> Tuple[float, str]:
  if max_s >= 2 * 3600:
    return 3600.0, 'wall-clock training time (hours)'
  if max_s >= 120:
    return 60.0, 'wall-clock training time (minutes)'
  return 1.0, 'wall-clock training time (seconds)'


def _frames_axis(max_frames: float, what: str = 'environment frames'
                 ) -> Tuple[float, str]:
  if max_frames >= 1e9:
    return 1e9, f'{what} (billions)'
  if max_frames >= 1e6:
    return 1e6, f'{what} (millions)'
  if max_frames >= 1e4:
    return 1e3, f'{what} (thousands)'
  return 1.0, what


def _new_figure(n_panels: int, ncols: int, panel_w: float = 4.0,
                panel_h: float = 3.0):
  ncols = max(1, min(ncols, n_panels))
  nrows = max(1, math.ceil(n_panels / ncols))
  # At least 6.5 in wide, so the footer stays readable under one panel.
  fig = mpl_figure.Figure(figsize=(max(6.5, panel_w * ncols),
                                  panel_h * nrows + 1.2))
  axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
  for ax in axes[n_panels:]:
    fig.delaxes(ax)
  return fig, axes[:n_panels]


def _colors(n: int, ordered: bool):
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  if ordered and n > 1:
    cmap = colormaps['viridis']
    return [cmap(0.05 + 0.85 * i / (n - 1)) for i in range(n)]
  cmap = colormaps['tab10']
  return [cmap(i % 10) for i in range(n)]


def _fmt_count(value: float) -> str:
  for size, suffix in ((1e9, 'B'), (1e6, 'M'), (1e3, 'K')):
    if abs(value) >= size:
      return f'{value / size:.3g}{suffix}'
  return f'{value:.0f}'


def _fmt_duration(seconds: float) -> str:
  if seconds >= 2 * 86400:
    return f'{seconds / 86400:.1f} days'
  if seconds >= 2 * 3600:
    return f'{seconds / 3600:.1f} h'
  if seconds >= 120:
    return f'{seconds / 60:.1f} min'
  return f'{seconds:.0f} s'


def footer_text(figure_spec: FigureSpec, runs: Sequence[Run]) -> str:
  profiles = sorted({str(r.get('profile', 'unknown')) for r in runs})
  frames = [r.total_frames for r in runs]
  walls = [r.wall_time_s for r in runs]
  line1 = (f'{len(runs)} run(s); profile: {", ".join(profiles)}; frames: '
           f'{_fmt_count(sum(frames))} total, {_fmt_count(max(frames))} max '
           f'per run; wall time: {_fmt_duration(sum(walls))} total, '
           f'{_fmt_duration(max(walls))} max per run.')
  if profiles != ['paper']:
    line1 += ' NOT paper scale.'
  values = []
  for key in CONTEXT_KEYS:
    seen = {json.dumps(r.get(key), default=str): r.get(key) for r in runs
            if r.get(key) is not MISSING}
    if seen:
      shown = [_fmt_count(v) if key == 'replay_capacity' and _finite(v)
               else str(v) for v in _sorted_series(seen.values())]
      values.append(f'{key}={"/".join(shown)}')
  line2 = f'Paper scale: {figure_spec.paper_scale}.'
  line3 = 'Runs: ' + ', '.join(values) if values else ''
  return '\n'.join(l for l in (line1, line2, line3) if l)


def _wrap(text: str, width_in: float, fontsize: float) -> List[str]:
  """`text` in lines that fit `width_in` inches at `fontsize` points (an
  average glyph is ~0.55 em wide; a margin keeps the widest lines inside)."""
  chars = max(20, int(0.92 * width_in * 72 / (fontsize * 0.55)))
  lines = []
  for line in text.split('\n'):
    lines += textwrap.wrap(line, chars) or ['']
  return lines


_TITLE_FONTSIZE = 11
_LEGEND_FONTSIZE = 7
_LEGEND_COLUMN_IN = 3.3


def _finish(fig: mpl_figure.Figure, title: str, footer: str) -> None:
  width_in = fig.get_figwidth()
  lines = _wrap(footer, width_in - 0.2, FOOTER_FONTSIZE)
  title = '\n'.join(_wrap(title, width_in - 0.2, _TITLE_FONTSIZE))
  # One legend for the whole figure, between the panels and the footer: the
  # same series recur in every panel, and in-panel legends hide the curves.
  entries: Dict[str, Any] = {}
  for ax in fig.axes:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      entries.setdefault(label, handle)
  ncol = max(1, min(len(entries), int(width_in // _LEGEND_COLUMN_IN)))
  # A label wider than its column is wrapped to it.
  column_in = min(_LEGEND_COLUMN_IN, (width_in - 0.2) / ncol) - 0.4
  labels = ['\n'.join(_wrap(label, column_in, _LEGEND_FONTSIZE))
            for label in entries]
  rows = [max(l.count('\n') + 1 for l in labels[i:i + ncol])
          for i in range(0, len(labels), ncol)]
  legend_in = 0.1 + 0.05 * len(rows) + 0.13 * sum(rows) if entries else 0.0
  footer_in = 0.2 + 0.13 * len(lines)
  title_in = 0.2 + 0.22 * (title.count('\n') + 1)
  fig.set_figheight(fig.get_figheight() - 1.2 + footer_in + legend_in
                    + title_in)
  height_in = fig.get_figheight()
  fig.suptitle(title, fontsize=_TITLE_FONTSIZE, y=1 - 0.1 / height_in,
               va='top')
  fig.text(0.01, 0.08 / height_in, '\n'.join(lines), fontsize=FOOTER_FONTSIZE,
           ha='left', va='bottom', color='0.25')
  if entries:
    fig.legend(list(entries.values()), labels, loc='lower left',
               bbox_to_anchor=(0.01, (footer_in + 0.02) / height_in),
               ncol=ncol, fontsize=_LEGEND_FONTSIZE, frameon=False)
  # tight_layout makes room for the suptitle itself.
  fig.tight_layout(rect=(0, (footer_in + legend_in) / height_in, 1, 1))


def _hline(ax, y: float, label: str, color: Any = 'black',
           style: str = '--') -> None:
  ax.axhline(y, color=color, linestyle=style, linewidth=1.0, label=label,
             gid=PAPER)


def _series_curves(runs: Sequence[Run], key: Callable[[Run], Any],
                   x_key: str, y: Callable, x_scale: float = 1.0,
                   smooth: int = 1) -> Dict[Any, Dict[str, Tuple[Curve, int]]]:
  """series value -> game -> (seed-averaged curve, number of runs)."""
  grouped: Dict[Any, Dict[str, List[Curve]]] = {}
  for run in runs:
    for game, curve in _run_game_curves(run, x_key, y, x_scale).items():
      grouped.setdefault(key(run), {}).setdefault(game, []).append(
          _smooth(curve, smooth))
  return {s: {g: (_mean_curve(cs), len(cs)) for g, cs in games.items()}
          for s, games in grouped.items()}


def _sort_key(value: Any) -> Any:
  """Orders numbers numerically, then everything else by text; recursive."""
  if isinstance(value, tuple):
    return (2, 0.0, tuple(_sort_key(v) for v in value))
  if _finite(value):
    return (0, float(value), ())
  return (1, 0.0, (str(value),))


def _sorted_series(values: Iterable[Any]) -> List[Any]:
  return sorted(values, key=_sort_key)


def _split_by_others(runs: Sequence[Run], main: Callable[[Run], Any],
                     main_keys: Sequence[str]) -> Callable[[Run], Any]:
  """Series key (main value, other experiment keys that vary among runs).

  Runs that differ in an experiment key the figure does not vary (e.g.
  replay_capacity in the actor-scaling figure) are never averaged into one
  line: they get lines of their own, labelled with the differing values.
  """
  others = [k for k in EXPERIMENT_KEYS if k not in main_keys and len(
      {json.dumps(r.value(k) if r.value(k) is not MISSING else None,
                  default=str) for r in runs}) > 1]

  def key(run: Run) -> Any:
    return (main(run), tuple(
        (k, None if run.value(k) is MISSING else run.value(k))
        for k in others))
  return key


def _others_label(others: Sequence[Tuple[str, Any]]) -> str:
  def fmt(k, v):
    if k == 'replay_capacity' and _finite(v):
      return _fmt_count(v)
    return str(v)
  return ''.join(f', {k}={fmt(k, v)}' for k, v in others)


def _per_game_curves_figure(
    ctx: _Context, *, series: Callable[[Run], Any], main_keys: Sequence[str],
    label: Callable[[Any], str], x: str = 'wall', y: str = 'score',
    smooth: int = 1, ordered: bool = True, title: str,
    overlay: Optional[Callable[[Any, str], None]] = None,
    games: Optional[Sequence[str]] = None) -> mpl_figure.Figure:
  """One panel per game, one line per series value (seeds averaged)."""
  smooth = ctx.smooth if ctx.smooth is not None else smooth
  x_key = 'wall_time_s' if x == 'wall' else 'training_frames'
  y_fn = _score if y == 'score' else _hns_pct
  main_label = label
  label = lambda s: main_label(s[0]) + _others_label(s[1])
  data = _series_curves(ctx.runs, _split_by_others(ctx.runs, series, main_keys),
                        x_key, y_fn, smooth=smooth)
  all_games = games or sorted({g for s in data.values() for g in s})
  max_x = max((c[0][-1] for s in data.values() for c, _ in s.values()),
              default=1.0)
  scale, xlabel = (_time_axis(max_x) if x == 'wall' else _frames_axis(max_x))
  keys = _sorted_series(data)
  colors = dict(zip(keys, _colors(len(keys), ordered)))
  fig, axes = _new_figure(len(all_games), ncols=3)
  for ax, game in zip(axes, all_games):
    for s in keys:
      if game not in data[s]:
        continue
      (cx, cy), n = data[s][game]
      text = label(s) + (f' (mean of {n} runs)' if n > 1 else '')
      ax.plot(cx / scale, cy, color=colors[s], label=text, gid=OURS,
              marker='.' if len(cx) < 3 else None)
    if overlay is not None and ctx.overlay:
      overlay(ax, game)
    ax.set_title(game)
    ax.set_xlabel(xlabel)
    ax.set_ylabel('human-normalized score (%)' if y == 'hns' else 'score')
  _finish(fig, title, footer_text(ctx.figure_spec, ctx.runs))
  return fig


def _apex_overlay(ax, game: str) -> None:
  score = references.load_paper_scores('apex_noop').get(game)
  if score is not None:
    _hline(ax, score, 'Ape-X paper final (Table 2 no-op; 360 actors, 5 days)')


def _apex_controls(**override) -> Dict[str, Tuple[Any, ...]]:
  controls = {'transition_copies': (1,), 'prioritized': (True,),
              'epsilon_variant': ('per_actor',)}
  controls.update(override)
  return {k: v for k, v in controls.items() if v is not None}


APEX_SCALE = ('Ape-X DQN Atari: 360 actors, 5 days, 22.8B frames (Table 1); '
              'Figs. 4-7/12: 8-256 actors, 35 h, replay 1M')


# Ape-X figures ----------------------------------------------------------------


def _table1_medians() -> List[Tuple[str, float, str]]:
  path = references.REFERENCE_DIR / 'apex_table1_median.csv'
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  out = []
  for row in rows:
    text = (row.get('median_noop_pct') or '').strip()
    if text:
      out.append((row['algorithm'], float(text), row.get('training_time', '')))
  return out


@_register(
    name='apex_fig2', paper_figure='Ape-X Fig. 2 (and Fig. 9)',
    description=('left: median human-normalized score over games vs wall-clock '
                 "time with Table 1's medians as lines; right: per-game score "
                 'vs wall-clock time with Table 2 finals dashed'),
    agents=('apex_dqn',), required=('games',), controls=_apex_controls(),
    paper_scale=APEX_SCALE)
def apex_fig2(ctx: _Context) -> mpl_figure.Figure:
  num = _split_by_others(ctx.runs, lambda r: r.get('num_actors', None),
                         ('num_actors',))
  label = lambda s: (f'Ape-X DQN (ours, {s[0]} actors)' if s[0] is not None
                     else 'Ape-X DQN (ours)') + _others_label(s[1])
  hns = _series_curves(ctx.runs, num, 'wall_time_s', _hns_pct)
  raw = _series_curves(ctx.runs, num, 'wall_time_s', _score,
                       smooth=ctx.smooth or 1)
  games = sorted({g for s in raw.values() for g in s})
  keys = _sorted_series(raw)
  colors = dict(zip(keys, _colors(len(keys), ordered=True)))
  max_x = max(c[0][-1] for s in raw.values() for c, _ in s.values())
  scale, xlabel = _time_axis(max_x)
  fig, axes = _new_figure(1 + len(games), ncols=4, panel_w=3.6)
  left = axes[0]
  n_median = 0
  for s in keys:
    per_game = {g: c for g, (c, _) in hns.get(s, {}).items()
                if references.resolve_game(g)}
    median = _median_curve(per_game)
    if median is not None:
      left.plot(median[0] / scale, median[1], color=colors[s], gid=OURS,
                label=label(s), marker='o' if len(median[0]) < 3 else None)
      n_median = max(n_median, len(per_game))
  if ctx.overlay:
    table = _table1_medians()
    line_colors = _colors(len(table), ordered=False)
    for (name, value, when), color in zip(table, line_colors):
      _hline(left, value, f'{name} {value:g}% (Table 1, {when or "?"})',
             color=color, style=':')
  left.set_title(f'median HNS over {n_median} games (no-op starts)')
  left.set_xlabel(xlabel)
  left.set_ylabel('median human-normalized score (%)')
  for ax, game in zip(axes[1:], games):
    for s in keys:
      if game in raw[s]:
        (cx, cy), n = raw[s][game]
        ax.plot(cx / scale, cy, color=colors[s], gid=OURS,
                label=label(s) + (f' (mean of {n} runs)' if n > 1 else ''),
                marker='.' if len(cx) < 3 else None)
    if ctx.overlay:
      _apex_overlay(ax, game)
    ax.set_title(game)
    ax.set_xlabel(xlabel)
    ax.set_ylabel('score')
  _finish(fig, 'Ape-X Fig. 2: Atari, no-op starts -- median HNS and per-game '
          'training curves vs wall-clock time',
          footer_text(ctx.figure_spec, ctx.runs))
  return fig


@_register(
    name='apex_fig3', paper_figure='Ape-X Fig. 3',
    description=('Ape-X DPG continuous control: return vs wall-clock time per '
                 'task, one line per number of actors'),
    agents=('apex_dpg',), required=('games', 'num_actors'), controls={},
    paper_scale=('Ape-X DPG: 64 actors (~14K FPS); the DDPG baseline line '
                 '(5 days) has no numbers in results/reference'))
def apex_fig3(ctx: _Context) -> mpl_figure.Figure:
  return _per_game_curves_figure(
      ctx, series=lambda r: r.get('num_actors'), main_keys=('num_actors',),
      label=lambda n: f'{n} actors', x='wall',
      title='Ape-X Fig. 3: Ape-X DPG, return vs wall-clock time by number of '
            'actors')


@_register(
    name='apex_fig4', paper_figure='Ape-X Fig. 4',
    description=('scaling the number of actors (8..256): per-game score vs '
                 'wall-clock time, one line per num_actors'),
    agents=('apex_dqn',), required=('games', 'num_actors'),
    controls=_apex_controls(), paper_scale=APEX_SCALE)
def apex_fig4(ctx: _Context) -> mpl_figure.Figure:
  return _per_game_curves_figure(
      ctx, series=lambda r: r.get('num_actors'), main_keys=('num_actors',),
      label=lambda n: f'{n} actors', overlay=_apex_overlay,
      title='Ape-X Fig. 4: scaling the number of actors (learner update rate '
            'unchanged)')


@_register(
    name='apex_fig5', paper_figure='Ape-X Fig. 5',
    description=('replay capacity: per-game score vs wall-clock time, one line '
                 'per replay_capacity, smoothed over 20 points'),
    agents=('apex_dqn',), required=('games', 'replay_capacity'),
    controls=_apex_controls(), paper_scale=APEX_SCALE + '; Fig. 5: 256 actors')
def apex_fig5(ctx: _Context) -> mpl_figure.Figure:
  return _per_game_curves_figure(
      ctx, series=lambda r: r.get('replay_capacity'),
      main_keys=('replay_capacity',),
      label=lambda c: f'replay {_fmt_count(c)}', smooth=20,
      overlay=_apex_overlay,
      title='Ape-X Fig. 5: varying the replay capacity (curves smoothed over '
            '20 points)')


@_register(
    name='apex_fig6', paper_figure='Ape-X Fig. 6',
    description=('recency: n actors x k copies of each transition; per-game '
                 'score vs wall-clock time, one line per (n, k)'),
    agents=('apex_dqn',),
    required=('games', 'num_actors', 'transition_copies'),
    controls=_apex_controls(transition_copies=None), paper_scale=APEX_SCALE)
def apex_fig6(ctx: _Context) -> mpl_figure.Figure:
  return _per_game_curves_figure(
      ctx, series=lambda r: (r.get('num_actors'), r.value('transition_copies')),
      main_keys=('num_actors', 'transition_copies'),
      label=lambda s: f'n={s[0]}, k={s[1]}', ordered=False,
      overlay=_apex_overlay,
      title='Ape-X Fig. 6: is recency alone the cause? n actors, k copies of '
            'each transition')


@_register(
    name='apex_fig7', paper_figure='Ape-X Fig. 7',
    description=('data-generating policies: per-game score vs wall-clock '
                 'time, one line per epsilon_variant (and replay kind)'),
    agents=('apex_dqn',), required=('games', 'epsilon_variant'),
    controls=_apex_controls(epsilon_variant=None, prioritized=None),
    paper_scale=APEX_SCALE)
def apex_fig7(ctx: _Context) -> mpl_figure.Figure:
  names = {'per_actor': 'full range of epsilon (per actor)',
           'fixed_set': '6 fixed epsilons'}
  return _per_game_curves_figure(
      ctx, series=lambda r: (str(r.value('epsilon_variant')),
                             bool(r.value('prioritized'))),
      main_keys=('epsilon_variant', 'prioritized'),
      label=lambda s: (f'{names.get(s[0], s[0])}, '
                       f'{"prioritized" if s[1] else "uniform"} replay'),
      ordered=False, overlay=_apex_overlay,
      title='Ape-X Fig. 7: varying the data-generating policies (epsilon '
            'choice)')


@_register(
    name='apex_fig11', paper_figure='Ape-X Fig. 11',
    description=('data-generation speed (environment frames/s, steady state) '
                 'vs number of actors, with the linear-scaling line'),
    agents=('apex_dqn',), required=('num_actors',), controls={},
    paper_scale='Ape-X: ~139 frames/s per actor; 256 actors ~37K FPS, 360 '
                'actors ~50K FPS', needs_data='throughput')
def apex_fig11(ctx: _Context) -> mpl_figure.Figure:
  per_n: Dict[int, List[float]] = {}
  for run in ctx.runs:
    per_n.setdefault(int(run.get('num_actors')), []).append(
        run.steady_frames_per_s())
  ns = np.array(sorted(per_n))
  means = np.array([np.mean(per_n[n]) for n in ns])
  fig, axes = _new_figure(2, ncols=2, panel_w=4.6, panel_h=3.6)
  total, each = axes
  xs = [n for n in ns for _ in per_n[n]]
  ys = [v for n in ns for v in per_n[n]]
  total.scatter(xs, ys, s=12, color='tab:blue', alpha=0.5, gid=OURS)
  total.plot(ns, means, marker='o', color='tab:blue', gid=OURS,
             label='ours (mean over runs; dots: runs)')
  total.plot(ns, means[0] / ns[0] * ns, color='tab:blue', linestyle=':',
             linewidth=1, label=f'linear from {ns[0]} actors')
  each.plot(ns, means / ns, marker='o', color='tab:blue', gid=OURS,
            label='ours: frames/s per actor')
  if ctx.overlay:
    total.plot([256, 360], [37_000, 50_000], 'k*', markersize=9, gid=PAPER,
               label='paper: 256 actors ~37K FPS (Sec. 5), 360 ~50K (Sec. 4.1)')
    total.plot(ns, 139 * ns, color='black', linestyle='--', linewidth=1,
               gid=PAPER, label='paper: 139 FPS per actor')
    _hline(each, 139, 'paper: ~139 FPS per actor (Sec. 4.1)')
  total.set_title('environment frames per second')
  total.set_xlabel('number of actors')
  total.set_ylabel('frames / s (steady state)')
  each.set_title('frames per second per actor')
  each.set_xlabel('number of actors')
  each.set_ylabel('frames / s / actor')
  _finish(fig, 'Ape-X Fig. 11: speed of data generation vs number of actors '
          '(median actor_frames_per_s, second half of each run)',
          footer_text(ctx.figure_spec, ctx.runs))
  return fig


@_register(
    name='apex_fig12', paper_figure='Ape-X Fig. 12',
    description=('prioritized (blue) vs uniform (red) replay: per game and '
                 'number of actors, score vs wall-clock time'),
    agents=('apex_dqn',), required=('games', 'num_actors', 'prioritized'),
    controls=_apex_controls(prioritized=None), paper_scale=APEX_SCALE)
def apex_fig12(ctx: _Context) -> mpl_figure.Figure:
  runs, chosen = _best_learning_rates(ctx.runs)
  key = _split_by_others(
      runs, lambda r: (int(r.get('num_actors')), bool(r.get('prioritized'))),
      ('num_actors', 'prioritized', 'learning_rate'))
  data = _series_curves(runs, key, 'wall_time_s', _score,
                        smooth=ctx.smooth or 1)
  games = sorted({g for s in data.values() for g in s})
  actors = sorted({main[0] for main, _ in data})
  # The same other-key values get the same line style in every panel.
  all_others = _sorted_series({others for _, others in data})
  styles = dict(zip(all_others, ('-', '--', ':', '-.') * len(all_others)))
  max_x = max(c[0][-1] for s in data.values() for c, _ in s.values())
  scale, xlabel = _time_axis(max_x)
  fig, axes = _new_figure(len(games) * len(actors), ncols=len(actors),
                          panel_w=3.4, panel_h=2.8)
  for i, game in enumerate(games):
    for j, n in enumerate(actors):
      ax = axes[i * len(actors) + j]
      for prioritized, color, name in ((True, 'tab:blue', 'prioritized'),
                                       (False, 'tab:red', 'uniform')):
        keys = _sorted_series(s for s in data if s[0] == (n, prioritized))
        for s in keys:
          style = styles[s[1]]
          entry = data[s].get(game)
          if entry is None:
            continue
          (cx, cy), count = entry
          lr, tried = chosen.get((game, n, prioritized), (None, {}))
          ax.plot(cx / scale, cy, color=color, gid=OURS, linestyle=style,
                  label=name + _others_label(s[1]) +
                  (f' (mean of {count} runs)' if count > 1 else ''),
                  marker='.' if len(cx) < 3 else None)
          if lr is not None:
            ax.annotate(f'{name}: lr {lr:g}' + (
                f', best of {len(tried)}' if len(tried) > 1 else ''),
                xy=(0.02, 0.95 if prioritized else 0.87),
                xycoords='axes fraction', fontsize=7, color=color, va='top')
      if ctx.overlay:
        _apex_overlay(ax, game)
      ax.set_title(f'{game}, {n} actors')
      ax.set_xlabel(xlabel)
      ax.set_ylabel('score')
  picks = '; '.join(
      f'{g} {n} actors {"prioritized" if p else "uniform"}: lr {lr:g} ('
      + ', '.join(f'{k:g} -> {v:.1f}' for k, v in sorted(tried.items())) + ')'
      for (g, n, p), (lr, tried) in sorted(chosen.items()) if len(tried) > 1)
  _finish(fig, 'Ape-X Fig. 12: prioritized (blue) vs uniform (red) replay by '
          'number of actors', footer_text(ctx.figure_spec, ctx.runs) +
          '\n' + final_score_sources(runs) + '\nLearning rate per variant: '
          'the better final score of those tried ("we tried both of these '
          'learning rates and selected the best"): ' + (picks or 'one tried'))
  return fig


def _best_learning_rates(runs: Sequence[Run]):
  """Fig. 12's selection: per game, actor count and replay kind, the runs
  of the learning rate with the best mean final score.

  Returns the kept runs and {(game, actors, prioritized): (lr, {lr: score})}.
  """
  scores: Dict[Tuple[str, int, bool], Dict[Any, List[float]]] = {}
  for run in runs:
    lr = run.value('learning_rate')
    lr = None if lr is MISSING else lr
    for game in {_game_name(e['game'])
                 for e in run.episodes + run.final_episodes}:
      score = _final_score(run, game)
      if score is not None:
        cell = (game, int(run.get('num_actors')), bool(run.get('prioritized')))
        scores.setdefault(cell, {}).setdefault(lr, []).append(score)
  chosen = {}
  for cell, by_lr in scores.items():
    means = {lr: float(np.mean(v)) for lr, v in by_lr.items()}
    best = max(means, key=lambda lr: means[lr])
    chosen[cell] = (best, {lr: m for lr, m in means.items() if lr is not None})
  kept = [r for r in runs if all(
      chosen.get((g, int(r.get('num_actors')), bool(r.get('prioritized'))),
                 (None,))[0] == (None if r.value('learning_rate') is MISSING
                                 else r.value('learning_rate'))
      for g in {_game_name(e['game']) for e in r.episodes + r.final_episodes})]
  return kept, chosen


# IMPALA figures ---------------------------------------------------------------


def _impala_table2_paper() -> Dict[Tuple[str, str], List[float]]:
  path = references.REFERENCE_DIR / 'impala_table2_vtrace.csv'
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
  return {(row['replay'], row['method']):
          [float(row[f'task{i}']) for i in range(1, 6)] for row in rows}


@_register(
    name='impala_table2', paper_figure='IMPALA Table 2',
    description=('final return per off-policy correction method, without and '
                 "with replay: ours (Atari) beside the paper's (DMLab tasks "
                 '1-5, different tasks)'),
    agents=('impala',), required=('games', 'correction'), controls={},
    paper_scale=('IMPALA Table 2: 5 DMLab tasks, average final return over 3 '
                 'best hyperparameters'))
def impala_table2(ctx: _Context) -> mpl_figure.Figure:
  # One panel per game and per value of any other experiment key that varies
  # (e.g. architecture): runs differing there are not averaged into a bar.
  panel_of = _split_by_others(ctx.runs, lambda r: None,
                              ('correction', 'replay_mixing'))
  finals: Dict[Tuple[Any, str, bool], List[float]] = {}
  for run in ctx.runs:
    others = panel_of(run)[1]
    for game in sorted({_game_name(e['game'])
                        for e in run.episodes + run.final_episodes}):
      score = _final_score(run, game)
      if score is not None:
        finals.setdefault(((game, others), str(run.value('correction')),
                           bool(run.value('replay_mixing'))), []).append(score)
  panels = _sorted_series({p for p, _, _ in finals})
  known = [c for c, _ in CORRECTIONS]
  methods = known + sorted({c for _, c, _ in finals} - set(known))
  names = dict(CORRECTIONS)
  show_paper = ctx.overlay
  top = len(panels)
  # Ours on the first row(s), the paper's five tasks on a row of their own.
  ncols = max(min(top, 5), 5 if show_paper else 1)
  ours_rows = math.ceil(top / ncols)
  fig, grid = _new_figure(ncols * (ours_rows + (1 if show_paper else 0)),
                          ncols=ncols, panel_w=3.2, panel_h=3.0)
  ours_axes = grid[:top]
  paper_axes = grid[ncols * ours_rows:ncols * ours_rows + 5] if show_paper else []
  for ax in grid:
    if ax not in ours_axes and ax not in paper_axes:
      fig.delaxes(ax)
  width = 0.38
  x = np.arange(len(methods))
  replay_kinds = ((False, 'without replay', 'tab:blue'),
                  (True, 'with replay', 'tab:orange'))
  for ax, panel in zip(ours_axes, panels):
    for k, (mixing, text, color) in enumerate(replay_kinds):
      vals = [finals.get((panel, m, mixing)) for m in methods]
      pos = [x[i] + (k - 0.5) * width for i, v in enumerate(vals) if v]
      heights = [float(np.mean(v)) for v in vals if v]
      errs = [float(np.std(v)) if len(v) > 1 else 0.0 for v in vals if v]
      if heights:
        ax.bar(pos, heights, width, yerr=errs, color=color,
               label=f'ours, {text}', gid=OURS)
    ax.set_xticks(x)
    ax.set_xticklabels([names.get(m, m) for m in methods], rotation=30,
                       fontsize=7, ha='right')
    game, others = panel
    ax.set_title(f'ours: Atari {game}' + _others_label(others), fontsize=10)
    ax.set_ylabel('final return (raw score)')
  if show_paper:
    paper = _impala_table2_paper()
    paper_methods = [names[m] for m in known]
    for t, ax in enumerate(paper_axes):
      for k, (mixing, text, color) in enumerate(replay_kinds):
        key = 'with_replay' if mixing else 'without_replay'
        heights = [paper[(key, m)][t] for m in paper_methods]
        ax.bar(np.arange(4) + (k - 0.5) * width, heights, width, color=color,
               alpha=0.6, hatch='//', label=f'paper, {text}', gid=PAPER)
      ax.set_xticks(np.arange(4))
      ax.set_xticklabels(paper_methods, rotation=30, fontsize=7, ha='right')
      ax.set_title(f'paper: DMLab task {t + 1}\n(not our task)', fontsize=10)
      ax.set_ylabel('final return')
  _finish(fig, 'IMPALA Table 2 as bars: off-policy correction methods without '
          'and with replay\n' + ('Top: ours on Atari games. Bottom: the paper '
                                 'on DMLab tasks -- different tasks: compare '
                                 'orderings, not values' if show_paper else
                                 'Ours on Atari games (the paper\'s numbers '
                                 'are on DMLab tasks)'),
          footer_text(ctx.figure_spec, ctx.runs) + '\n' +
          final_score_sources(ctx.runs) +
          '\nFinal return = mean of the last 10% of each run\'s evaluation '
          'episodes; error bars = std over runs.')
  return fig


IMPALA_VARIANT_PAPERS = {
    ('shallow', False): ('impala_shallow_experts', 'IMPALA, shallow, experts'),
    ('deep', False): ('impala_deep_experts', 'IMPALA, deep, experts'),
    ('deep', True): ('impala_deep_multitask', 'IMPALA, deep, multi-task'),
}


def _impala_variant(run: Run) -> Tuple[str, bool]:
  return (str(run.get('architecture')), len(run.get('games')) > 1)


def _impala_table4() -> Dict[str, float]:
  path = references.REFERENCE_DIR / 'impala_table4_atari57.csv'
  with open(path, newline='') as f:
    return {row['model']: float(row['median_hns_pct'])
            for row in csv.DictReader(f)}


@_register(
    name='impala_atari_curves', paper_figure='IMPALA Sec. 5.3.2, Table 4, '
    'App. C.1',
    description=('Atari: median HNS and per-game HNS vs frames per game, '
                 'shallow vs deep experts vs deep multi-task; Table 4 medians '
                 'and App. C.1 per-game finals dashed'),
    agents=('impala',), required=('games', 'architecture'),
    controls={'correction': ('vtrace',), 'replay_mixing': (False,)},
    paper_scale=('IMPALA Atari: experts 200M frames per game; multi-task 200M '
                 'per game, 11.4B in all'))
def impala_atari_curves(ctx: _Context) -> mpl_figure.Figure:
  data: Dict[Any, Dict[str, List[Curve]]] = {}
  variant_of = _split_by_others(ctx.runs, _impala_variant, ('architecture',))
  for run in ctx.runs:
    per_game = 1.0 / len(run.get('games'))
    for game, curve in _run_game_curves(run, 'training_frames', _hns_pct,
                                        x_scale=per_game).items():
      if references.resolve_game(game) is None:
        ctx.warn(f'impala_atari_curves: run {run.name}: {game!r} is not an '
                 'Atari-57 game; no HNS, left out')
        continue
      data.setdefault(variant_of(run), {}).setdefault(game, []).append(
          _smooth(curve, ctx.smooth or 1))
  curves = {v: {g: (_mean_curve(cs), len(cs)) for g, cs in games.items()}
            for v, games in data.items()}
  if not curves:
    raise FigureError('impala_atari_curves: no evaluation episode of the runs '
                      'is on an Atari-57 game (HNS needs one)')
  games = sorted({g for v in curves.values() for g in v})
  variants = _sorted_series(curves)
  palette = {('shallow', False): 'tab:green', ('deep', False): 'tab:blue',
             ('deep', True): 'tab:red', ('shallow', True): 'tab:olive'}
  other = iter(_colors(10, ordered=False)[4:])
  base_colors: Dict[Any, Any] = {}
  for v in variants:
    if v[0] not in base_colors:
      base_colors[v[0]] = palette.get(v[0]) or next(other)
  colors = {v: base_colors[v[0]] for v in variants}
  label = lambda v: (f'{v[0][0]}, {"multi-task" if v[0][1] else "experts"}'
                     + _others_label(v[1]))
  max_x = max(c[0][-1] for v in curves.values() for c, _ in v.values())
  scale, xlabel = _frames_axis(max_x, 'environment frames per game')
  fig, axes = _new_figure(1 + len(games), ncols=4, panel_w=3.6)
  medians = _impala_table4()
  paper_variants = [b for b in base_colors if b in IMPALA_VARIANT_PAPERS]
  n_median = 0
  for v in variants:
    per_game = {g: c for g, (c, _) in curves[v].items()}
    median = _median_curve(per_game)
    if median is not None:
      axes[0].plot(median[0] / scale, median[1], color=colors[v], gid=OURS,
                   label=label(v), marker='o' if len(median[0]) < 3 else None)
      n_median = max(n_median, len(per_game))
  for b in paper_variants if ctx.overlay else ():
    model = IMPALA_VARIANT_PAPERS[b][1]
    _hline(axes[0], medians[model], f'paper: {model} {medians[model]:g}% '
           '(Table 4, 57 games)', color=base_colors[b])
  axes[0].set_title(f'median HNS over {n_median} games')
  axes[0].set_ylabel('median human-normalized score (%)')
  axes[0].set_xlabel(xlabel)
  for ax, game in zip(axes[1:], games):
    for v in variants:
      if game in curves[v]:
        (cx, cy), n = curves[v][game]
        ax.plot(cx / scale, cy, color=colors[v], gid=OURS,
                label=label(v) + (f' (mean of {n} runs)' if n > 1 else ''),
                marker='.' if len(cx) < 3 else None)
    for b in paper_variants if ctx.overlay else ():
      name, model = IMPALA_VARIANT_PAPERS[b]
      score = references.load_paper_scores(name).get(game)
      if score is not None:
        _hline(ax, 100 * references.human_normalized(score, game),
               f'paper: {model} (App. C.1)', color=base_colors[b])
    ax.set_title(game)
    ax.set_xlabel(xlabel)
    ax.set_ylabel('human-normalized score (%)')
  _finish(fig, 'IMPALA Atari: shallow vs deep experts vs deep multi-task '
          '(human-normalized, no-op starts)',
          footer_text(ctx.figure_spec, ctx.runs) +
          '\nx = training_frames / number of games the run trains on.')
  return fig


# Gorila -----------------------------------------------------------------------


@_register(
    name='gorila_curves', paper_figure='Gorila, time-to-beat-DQN figure',
    description=('per-game score vs wall-clock time with DQN (Nature) and '
                 "Gorila's final no-op scores dashed; titles give the time our "
                 'run first beat DQN'),
    agents=('gorila',), required=('games',), controls={},
    paper_scale='Gorila: 100 actors/learners, ~4 days per game (Ape-X Table 1)')
def gorila_curves(ctx: _Context) -> mpl_figure.Figure:
  dqn = references.load_paper_scores('dqn_nature')
  gorila = references.load_paper_scores('gorila_noop')
  beat: Dict[str, Optional[float]] = {}

  def overlay(ax, game):
    if game in dqn:
      _hline(ax, dqn[game], 'DQN Nature final (Ext. Data Table 2)',
             color='tab:green')
    if game in gorila:
      _hline(ax, gorila[game], 'Gorila paper final (no-op)', color='black')

  fig = _per_game_curves_figure(
      ctx, series=lambda r: 'Gorila (ours)', main_keys=(), label=str,
      overlay=overlay,
      title='Gorila: per-game training curves against DQN (no-op starts)')
  scale_s = None
  for ax in fig.axes:
    game = ax.get_title()
    if game not in dqn:
      continue
    for line in ax.get_lines():
      if line.get_gid() != OURS:
        continue
      if scale_s is None:
        scale_s = _axis_seconds(ax.get_xlabel())
      x, y = line.get_xdata(), line.get_ydata()
      above = np.nonzero(np.asarray(y) > dqn[game])[0]
      beat[game] = float(x[above[0]]) * scale_s if len(above) else None
      ax.set_title(f'{game}: ' + ('beats DQN at ' + _fmt_duration(beat[game])
                                  if beat[game] is not None
                                  else 'not above DQN'), fontsize=9)
  return fig


def _axis_seconds(label: str) -> float:
  return 3600.0 if 'hours' in label else 60.0 if 'minutes' in label else 1.0


# Rendering --------------------------------------------------------------------


def render(name: str, runs: Sequence[Run], out_dir: Optional[Any] = None,
           overlay: bool = True, smooth: Optional[int] = None,
           warn: Optional[Callable[[str], None]] = None) -> FigureResult:
  """Draws figure `name` from `runs`; writes <out_dir>/<name>.png if given."""
  figure_spec = spec(name)
  messages: List[str] = []

  def _warn(text: str) -> None:
    messages.append(text)
    (warn or (lambda t: print(f'warning: {t}', file=sys.stderr)))(text)

  usable, left_out = select_runs(figure_spec, runs, _warn)
  if not usable:
    raise FigureError(_no_runs_message(figure_spec, runs, left_out))
  ctx = _Context(figure_spec, usable, _warn, overlay=overlay, smooth=smooth)
  fig = figure_spec.draw(ctx)
  result = FigureResult(name=name, figure=fig, runs=[r.name for r in usable],
                        warnings=messages, left_out=left_out)
  if out_dir is not None:
    out_dir = pathlib.Path(out_dir)
    buffer = io.BytesIO()
    fig.savefig(buffer, format='png', dpi=110)
    result.path = out_dir / f'{name}.png'
    run_records.atomic_write_bytes(result.path, buffer.getvalue())
    run_records.atomic_write_json(out_dir / f'{name}.json', {
        'figure': name, 'reproduces': figure_spec.paper_figure,
        'png': result.path.name, 'runs': result.runs,
        'left_out': left_out, 'warnings': messages,
        'paper_overlay': overlay})
  return result


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='python -m reproductions.figures',
      description='Draws the papers\' figures from run records.',
      epilog='figures: ' + ', '.join(FIGURES))
  parser.add_argument('figure', nargs='?', help='figure name (see --list)')
  parser.add_argument('inputs', nargs='*', help='run directories or folders '
                      f'of runs (default: {run_records.DEFAULT_ROOT})')
  parser.add_argument('--all', action='store_true',
                      help='draw every figure that has usable runs')
  parser.add_argument('--list', action='store_true',
                      help='list the figures and exit')
  parser.add_argument('--markdown', action='store_true',
                      help='with --list: the README table')
  parser.add_argument('--out', default=str(DEFAULT_OUT),
                      help=f'output folder (default: {DEFAULT_OUT})')
  parser.add_argument('--no-paper', action='store_true',
                      help="don't overlay the papers' numbers")
  parser.add_argument('--smooth', type=int, default=None,
                      help='moving average over N points (default: as the '
                      'paper, e.g. 20 for apex_fig5)')
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = _parser()
  args = parser.parse_args(argv)
  if args.list:
    if args.markdown:
      print(readme_table())
    else:
      width = max(len(n) for n in FIGURES)
      for s in FIGURES.values():
        print(f'{s.name.ljust(width)}  {s.paper_figure}: {s.description}')
    return 0
  inputs = list(args.inputs)
  if args.all:
    if args.figure is not None:
      inputs.insert(0, args.figure)
    names = list(FIGURES)
  else:
    if args.figure is None:
      parser.error('give a figure name, --all or --list; figures: ' +
                   ', '.join(FIGURES))
    if args.figure not in FIGURES:
      parser.error(f'unknown figure {args.figure!r}; valid figures: '
                   f'{", ".join(FIGURES)}')
    names = [args.figure]
  try:
    runs = load_runs(inputs)
  except FigureError as e:
    parser.error(str(e))
  seen = set()

  def warn(text: str) -> None:
    if text not in seen:
      seen.add(text)
      print(f'warning: {text}', file=sys.stderr)

  drawn, failed = [], []
  for name in names:
    try:
      result = render(name, runs, out_dir=args.out, overlay=not args.no_paper,
                      smooth=args.smooth, warn=warn)
    except FigureError as e:
      if not args.all:
        print(f'error: {e}', file=sys.stderr)
        return 1
      failed.append(name)
      print(f'skipped {name}: {e}', file=sys.stderr)
      continue
    drawn.append(name)
    print(f'{name}: {result.path} ({len(result.runs)} runs)')
  if args.all:
    print(f'drew {len(drawn)} of {len(names)} figures'
          + (f'; no usable runs for: {", ".join(failed)}' if failed else ''))
  return 0 if drawn else 1


if __name__ == '__main__':
  sys.exit(main())
