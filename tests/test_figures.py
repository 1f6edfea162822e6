"""reproductions.figures draws every registered figure from run records.

Why these checks: the figures are how a reader compares our runs with the
papers', so each must show the panels and lines its paper figure shows (one
line per number of actors, per replay capacity, ...), say in its footer at
which scale the runs were made, and refuse loudly (not draw an empty or
misleading plot) when the runs it needs are missing. The runs are synthetic
run records written through the same RunRecord API the programs use.
"""

import json
import pathlib
import subprocess
import sys

from matplotlib.backends import backend_agg
import numpy as np
from PIL import Image
import pytest

from reproductions import figures
from reproductions import references
from reproductions import run_records

REPO = pathlib.Path(__file__).resolve().parents[1]
GAMES = ('pong', 'breakout')
HOUR = 3600.0


def _make_run(root, run_id, config, games=GAMES, hours=3.0, points=6,
              level=1.0, fps=None, game_scores=None):
  """A run record with evaluation episodes and supervisor metrics.

  Scores rise linearly in time to `level` times a per-game top score; two
  episodes per evaluation point (score +- 1) so points average episodes.
  """
  config = {'profile': 'local', 'seed': 0, **config}
  record = run_records.RunRecord.create(
      'synthetic', config, {'nodes': {'actor': config.get('num_actors', 1),
                                      'learner': 1, 'supervisor': 1}},
      root=root, run_id=run_id)
  top = game_scores or {'pong': 20.0, 'breakout': 300.0,
                        'humanoid_walk': 800.0}
  frames_per_s = fps or 1000.0
  for game in games:
    for i in range(points):
      t = hours * HOUR * (i + 1) / points
      score = level * top.get(game, 100.0) * (i + 1) / points
      for delta in (-1.0, 1.0):
        record.append_evaluation_episode(
            game=game, score=score + delta, frames=1000, wall_time_s=t,
            training_frames=int(t * frames_per_s), learner_steps=i * 100,
            node='evaluator')
  logger = record.metrics_logger('supervisor', tensorboard=False)
  rows = 10
  for i in range(rows):
    t = hours * HOUR * (i + 1) / rows
    # The first half ramps up; the steady state (second half) is exactly fps.
    rate = frames_per_s * (0.5 if i < rows // 2 else 1.0)
    logger.write({'wall_time_s': t, 'actor_frames': int(t * frames_per_s),
                  'actor_episodes': i, 'learner_steps': 100 * i,
                  'actor_frames_per_s': rate, 'learner_steps_per_s': 19.0,
                  'fraction_done': (i + 1) / rows, 'eta_s': 0.0})
  return record.run_dir


APEX = {'agent': 'apex_dqn', 'games': list(GAMES), 'replay_capacity': 1_000_000,
        'transition_copies': 1, 'prioritized': True,
        'epsilon_variant': 'per_actor'}


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """All synthetic runs in one folder; names of the groups each figure uses."""
  root = tmp_path_factory.mktemp('runs')
  groups = {}

  def add(group, run_id, config, **kwargs):
    path = _make_run(root, run_id, config, **kwargs)
    for g in (group if isinstance(group, tuple) else (group,)):
      groups.setdefault(g, []).append(path)
    return path

  # Fig. 4 (and 11): 8 (two seeds), 32, 256 actors, replay 1M.
  for n, seed in ((8, 0), (8, 1), (32, 0), (256, 0)):
    groups_of = ('fig4', 'fig11') + (('fig5',) if n == 256 else ()) + (
        ('fig6',) if n in (32, 256) else ()) + (
            ('fig7',) if n == 256 else ()) + (
                ('fig12',) if n in (8, 256) and seed == 0 else ())
    add(groups_of, f'apex-n{n}-s{seed}', {**APEX, 'num_actors': n,
                                           'seed': seed},
        level=0.2 + n / 300, fps=100.0 * n)
  # Fig. 5: capacities at 256 actors.
  for capacity in (250_000, 2_000_000):
    add('fig5', f'apex-cap{capacity}', {**APEX, 'num_actors': 256,
                                         'replay_capacity': capacity})
  # Fig. 6: 32 actors, 8 copies of each transition.
  add('fig6', 'apex-n32-k8', {**APEX, 'num_actors': 32,
                              'transition_copies': 8})
  # Fig. 7: 6 fixed epsilons.
  add('fig7', 'apex-fixed-eps', {**APEX, 'num_actors': 256,
                                 'epsilon_variant': 'fixed_set'})
  # Fig. 12: uniform replay at 8 and 256 actors, with both learning rates;
  # 0.00025 ends higher, so the figure must show it.
  for n in (8, 256):
    add('fig12', f'apex-uniform-n{n}', {**APEX, 'num_actors': n,
                                         'prioritized': False,
                                         'learning_rate': 0.00025}, level=0.3)
    add('fig12', f'apex-uniform-slow-n{n}',
        {**APEX, 'num_actors': n, 'prioritized': False,
         'learning_rate': 0.00025 / 4}, level=0.1)
  # Ape-X DPG (Fig. 3).
  for n in (16, 64):
    add('fig3', f'dpg-n{n}', {'agent': 'apex_dpg', 'game': 'humanoid_walk',
                              'num_actors': n}, games=('humanoid_walk',))
  # IMPALA Atari: shallow and deep experts, deep multi-task.
  for arch in ('shallow', 'deep'):
    for game in GAMES:
      add('impala_atari', f'impala-{arch}-{game}',
          {'agent': 'impala', 'game': game, 'architecture': arch,
           'correction': 'vtrace', 'replay_mixing': False}, games=(game,))
  add('impala_atari', 'impala-deep-multitask',
      {'agent': 'impala', 'games': list(GAMES), 'architecture': 'deep',
       'correction': 'vtrace', 'replay_mixing': False})
  # IMPALA Table 2: 4 corrections x with/without replay on pong.
  for correction in ('vtrace', 'one_step_is', 'epsilon_correction', 'none'):
    for mixing in (False, True):
      add('table2', f'impala-{correction}-{int(mixing)}',
          {'agent': 'impala', 'game': 'pong', 'architecture': 'shallow',
           'correction': correction, 'replay_mixing': mixing},
          games=('pong',), level=0.5 if correction == 'none' else 0.9)
  # Gorila: beats DQN (pong 18.9) only at the last evaluation point.
  add('gorila', 'gorila', {'agent': 'gorila', 'games': list(GAMES)},
      game_scores={'pong': 19.5, 'breakout': 300.0})
  # Broken runs: no num_actors; no agent.
  add('broken', 'apex-no-num-actors', {k: v for k, v in APEX.items()})
  add('broken', 'no-agent', {'games': ['pong'], 'num_actors': 8})
  return root, groups


def _load(paths):
  return figures.load_runs(paths)


def _ours(ax):
  return [l.get_label() for l in ax.get_lines() if l.get_gid() == figures.OURS]


def _paper(ax):
  return [l.get_label() for l in ax.get_lines()
          if l.get_gid() == figures.PAPER]


def _check_png(path):
  assert path.exists()
  with Image.open(path) as image:
    assert image.format == 'PNG'
    width, height = image.size
  assert width >= 400 and height >= 300
  assert not list(path.parent.glob(f'.{path.name}.*'))  # no temp file left


def _check_footer(fig):
  text = ' '.join(t.get_text() for t in fig.texts).replace('\n', ' ')
  assert 'profile: local' in text and 'NOT paper scale' in text
  assert 'frames:' in text and 'wall time:' in text and 'Paper scale:' in text


def _check_text_inside(fig):
  """Every title, label, legend entry and footer lies inside the PNG."""
  canvas = backend_agg.FigureCanvasAgg(fig)
  canvas.draw()
  renderer = canvas.get_renderer()
  width, height = fig.bbox.width, fig.bbox.height
  texts = [fig._suptitle, *fig.texts]
  texts += [t for legend in fig.legends for t in legend.get_texts()]
  for ax in fig.axes:
    texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label,
              ax.yaxis.label]
  for text in texts:
    if text is None or not text.get_visible() or not text.get_text().strip():
      continue
    box = text.get_window_extent(renderer)
    assert (box.x0 >= -1 and box.x1 <= width + 1 and box.y0 >= -1 and
            box.y1 <= height + 1), (text.get_text()[:80], box, width, height)


def _render(name, paths, out):
  result = figures.render(name, _load(paths), out_dir=out)
  _check_png(result.path)
  _check_footer(result.figure)
  _check_text_inside(result.figure)
  assert json.loads((out / f'{name}.json').read_text())['runs'] == result.runs
  return result


def test_registry_lists_every_figure():
  expected = {'apex_fig2', 'apex_fig3', 'apex_fig4', 'apex_fig5', 'apex_fig6',
              'apex_fig7', 'apex_fig11', 'apex_fig12', 'impala_table2',
              'impala_atari_curves', 'gorila_curves'}
  assert expected <= set(figures.FIGURES)
  out = subprocess.run([sys.executable, '-m', 'reproductions.figures',
                        '--list'], cwd=REPO, capture_output=True, text=True,
                       check=True).stdout
  for name in figures.FIGURES:
    assert name in out
  table = figures.readme_table()
  assert all(f'`{name}`' in table for name in figures.FIGURES)


def test_apex_fig4_one_line_per_num_actors(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig4', groups['fig4'], tmp_path)
  fig = result.figure
  assert [ax.get_title() for ax in fig.axes] == ['breakout', 'pong']
  for ax in fig.axes:
    assert _ours(ax) == ['8 actors (mean of 2 runs)', '32 actors',
                         '256 actors']
    assert 'hours' in ax.get_xlabel()
  pong = fig.axes[1]
  assert len(_paper(pong)) == 1
  line = [l for l in pong.get_lines() if l.get_gid() == figures.PAPER][0]
  assert line.get_ydata()[0] == pytest.approx(
      references.load_paper_scores('apex_noop')['pong'])


def test_apex_fig2_median_hns_and_per_game(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig2', groups['fig4'], tmp_path)
  axes = result.figure.axes
  assert [ax.get_title() for ax in axes] == [
      'median HNS over 2 games (no-op starts)', 'breakout', 'pong']
  assert len(_ours(axes[0])) == 3  # one median line per number of actors
  assert any('Ape-X DQN 434%' in label for label in _paper(axes[0]))
  assert 'human-normalized' in axes[0].get_ylabel()
  # The 256-actor median equals the median of the two games' HNS at the end.
  line = [l for l in axes[0].get_lines() if l.get_gid() == figures.OURS][-1]
  final = [100 * references.human_normalized(s * (0.2 + 256 / 300), g)
           for g, s in (('pong', 20.0), ('breakout', 300.0))]
  assert line.get_ydata()[-1] == pytest.approx(np.median(final))


def test_apex_fig2_of_one_game_fits_its_title(tmp_path):
  """The main job's figure: one game, so two panels and a narrow figure."""
  path = _make_run(tmp_path, 'one', {**APEX, 'games': ['pong'],
                                     'num_actors': 4}, games=('pong',))
  result = _render('apex_fig2', [path], tmp_path / 'out')
  assert len(result.figure.axes) == 2
  assert 'Ape-X Fig. 2' in result.figure._suptitle.get_text()


def test_apex_fig5_capacity_smoothed(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig5', groups['fig5'], tmp_path)
  for ax in result.figure.axes:
    assert _ours(ax) == ['replay 250K', 'replay 1M', 'replay 2M']
  assert 'smoothed over 20' in result.figure._suptitle.get_text()


def test_apex_fig6_recency(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig6', groups['fig6'], tmp_path)
  for ax in result.figure.axes:
    assert sorted(_ours(ax)) == ['n=256, k=1', 'n=32, k=1', 'n=32, k=8']


def test_apex_fig7_epsilon_variants(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig7', groups['fig7'], tmp_path)
  for ax in result.figure.axes:
    assert sorted(_ours(ax)) == [
        '6 fixed epsilons, prioritized replay',
        'full range of epsilon (per actor), prioritized replay']


def test_apex_fig11_steady_state_throughput(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig11', groups['fig11'], tmp_path)
  total, each = result.figure.axes
  [mean] = [l for l in total.get_lines() if l.get_gid() == figures.OURS]
  assert list(mean.get_xdata()) == [8, 32, 256]
  # Second-half median of each run, averaged over seeds: 100 frames/s/actor.
  np.testing.assert_allclose(mean.get_ydata(), [800, 3200, 25600])
  assert total.get_xlabel() == 'number of actors'
  [per_actor] = [l for l in each.get_lines() if l.get_gid() == figures.OURS]
  np.testing.assert_allclose(per_actor.get_ydata(), [100, 100, 100])
  assert _paper(total) and _paper(each)


def test_apex_fig12_prioritized_vs_uniform(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig12', groups['fig12'], tmp_path)
  titles = [ax.get_title() for ax in result.figure.axes]
  assert titles == ['breakout, 8 actors', 'breakout, 256 actors',
                    'pong, 8 actors', 'pong, 256 actors']
  for ax in result.figure.axes:
    assert _ours(ax) == ['prioritized', 'uniform']
    lines = [l for l in ax.get_lines() if l.get_gid() == figures.OURS]
    assert [l.get_color() for l in lines] == ['tab:blue', 'tab:red']
    # The better learning rate's run (level 0.3), not their average.
    top = 20.0 if ax.get_title().startswith('pong') else 300.0
    assert lines[1].get_ydata()[-1] == pytest.approx(0.3 * top)
  # The footer names each choice and the final scores it was made on (the
  # last 10% of the training-time episodes: the last one, score + 1).
  footer = ' '.join(' '.join(t.get_text() for t in result.figure.texts).split())
  assert 'pong 8 actors uniform: lr 0.00025 (6.25e-05 -> 3.0, 0.00025 -> ' \
         '7.0)' in footer, footer


def test_apex_fig3_dpg(runs, tmp_path):
  _, groups = runs
  result = _render('apex_fig3', groups['fig3'], tmp_path)
  [ax] = result.figure.axes
  assert ax.get_title() == 'humanoid_walk'
  assert _ours(ax) == ['16 actors', '64 actors']


def test_impala_table2_bars_ours_and_paper(runs, tmp_path):
  _, groups = runs
  result = _render('impala_table2', groups['table2'], tmp_path)
  axes = result.figure.axes
  assert [ax.get_title() for ax in axes] == (
      ['ours: Atari pong'] +
      [f'paper: DMLab task {i}\n(not our task)' for i in range(1, 6)])
  ours = [p for p in axes[0].patches if p.get_gid() == figures.OURS]
  assert len(ours) == 8  # 4 methods x without/with replay
  # Final return: mean of the last 10% (here: the last 1) of 12 episodes.
  heights = sorted(round(p.get_height(), 6) for p in ours)
  assert heights[0] == pytest.approx(0.5 * 20 + 1)
  assert heights[-1] == pytest.approx(0.9 * 20 + 1)
  paper = [p.get_height() for p in axes[1].patches
           if p.get_gid() == figures.PAPER]
  assert len(paper) == 8 and 46.8 in paper and 47.1 in paper
  title = result.figure._suptitle.get_text()
  assert 'Atari' in title and 'DMLab' in title and 'different tasks' in title


def test_impala_atari_curves_variants(runs, tmp_path):
  _, groups = runs
  result = _render('impala_atari_curves', groups['impala_atari'], tmp_path)
  axes = result.figure.axes
  assert [ax.get_title() for ax in axes] == [
      'median HNS over 2 games', 'breakout', 'pong']
  for ax in axes:
    assert sorted(_ours(ax), key=lambda s: s.split(' (')[0]) == sorted(
        _ours(ax))
    assert {l.split(' (')[0].replace('ours: ', '') for l in _ours(ax)} == {
        'shallow, experts', 'deep, experts', 'deep, multi-task'}
    assert len(_paper(ax)) == 3
    assert 'human-normalized' in ax.get_ylabel()
    assert 'frames per game' in ax.get_xlabel()
  assert any('191.8%' in label for label in _paper(axes[0]))
  # Multi-task x axis is frames per game: half the run's training frames.
  multi = [l for l in axes[2].get_lines()
           if l.get_label().startswith('deep, multi-task')][0]
  expert = [l for l in axes[2].get_lines()
            if l.get_label().startswith('deep, experts')][0]
  assert multi.get_xdata()[-1] == pytest.approx(expert.get_xdata()[-1] / 2)


def test_gorila_curves_time_to_beat_dqn(runs, tmp_path):
  _, groups = runs
  result = _render('gorila_curves', groups['gorila'], tmp_path)
  titles = [ax.get_title() for ax in result.figure.axes]
  # DQN Nature: pong 18.9 (ours 19.5 + 1 at the end), breakout 401.2.
  assert titles == ['breakout: not above DQN', 'pong: beats DQN at 3.0 h']
  for ax in result.figure.axes:
    assert len(_paper(ax)) == 2


def test_missing_key_skips_run_with_warning(runs, tmp_path, capsys):
  _, groups = runs
  result = figures.render('apex_fig4', _load(groups['fig4'] + groups['broken']))
  err = capsys.readouterr().err
  assert "apex-no-num-actors" in err and "'num_actors'" in err
  assert "no-agent" in err and "'agent'" in err
  assert not any('broken' in r or 'no-num-actors' in r for r in result.runs)
  assert len(result.runs) == 4
  assert any('num_actors' in w for w in result.warnings)


def test_no_usable_runs_names_what_is_needed(runs, capsys):
  _, groups = runs
  with pytest.raises(figures.FigureError) as exc:
    figures.render('apex_fig3', _load(groups['fig4']))
  text = str(exc.value)
  assert "agent='apex_dpg'" in text and 'num_actors' in text
  assert "agent 'apex_dqn'" in text  # why the runs given were left out
  with pytest.raises(figures.FigureError, match='transition_copies'):
    figures.render('apex_fig6', _load(groups['table2']))
  assert figures.main(['apex_fig3', *map(str, groups['fig4']), '--out',
                       '/nonexistent-never-written']) == 1
  assert "agent='apex_dpg'" in capsys.readouterr().err


def test_unknown_figure_lists_valid_names(capsys):
  with pytest.raises(figures.FigureError) as exc:
    figures.spec('apex_fig99')
  for name in figures.FIGURES:
    assert name in str(exc.value)
  with pytest.raises(SystemExit) as exit_info:
    figures.main(['apex_fig99'])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert 'apex_fig99' in err and 'impala_table2' in err


def test_cli_all_draws_every_figure_from_one_folder(runs, tmp_path, capsys):
  root, _ = runs
  out = tmp_path / 'figs'
  assert figures.main(['--all', str(root), '--out', str(out)]) == 0
  stdout = capsys.readouterr().out
  assert f'drew {len(figures.FIGURES)} of {len(figures.FIGURES)}' in stdout
  for name in figures.FIGURES:
    _check_png(out / f'{name}.png')
  # With every run in one folder, runs differing in another experiment key
  # are not averaged together: Fig. 4's lines name the replay capacity.
  report = json.loads((out / 'apex_fig4.json').read_text())
  assert any('outside the experiment' in why
             for why in report['left_out'].values())
