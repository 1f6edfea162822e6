"""The README's main job: a short Ape-X DQN run on Pong that leaves its
learning curve (PNG) and score table in the run record."""

import pathlib

from reproductions import run_records

from conftest import run_module


def test_main_job_runs_apex_on_pong_and_leaves_curve_and_scores(tmp_path):
  result = run_module('launch_programs.main',
                      # 90 s: the learner's first step comes ~55 s after
                      # launch here (replay's minimum size first), the first
                      # evaluation episode ~20 s after.
                      ['--minutes', '1.5', '--final_episodes', '2',
                       '--runs_root', str(tmp_path)],
                      timeout_s=300)
  output = result['output']
  assert result['returncode'] == 0, output[-5000:]
  assert not result['leftovers'], 'processes left behind'
  (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
  record = run_records.RunRecord(run_dir)
  assert record.read_config()['game'] == 'pong'
  assert record.read_config()['profile'] == 'local'
  # The console: the plan, progress while it ran, and the closing summary;
  # no node chatter. Every node's whole output is in the run record instead.
  assert '[apex_dqn] launching {' in output
  assert '[progress' in output
  assert f'node logs: {run_dir / "logs"}/' in output
  assert '--resume' in output
  assert 'Binding:' not in output
  for group, count in record.read_topology()['nodes'].items():
    if count:
      logs = sorted((run_dir / 'logs' / group).glob('*.log'))
      assert len(logs) == count, (group, logs)
  assert 'Binding:' in (run_dir / 'logs' / 'learner' / '0.log').read_text()
  png = pathlib.Path(run_dir, 'apex_fig2.png')
  assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  scores = pathlib.Path(run_dir, 'scores.md').read_text()
  assert 'pong' in scores and 'median HNS = ' in scores
  assert record.read_evaluation_episodes(), 'no evaluation episode recorded'
  # The score is the final evaluation's: 2 episodes of the last checkpoint.
  final = record.read_final_evaluation()
  assert [e['episode'] for e in final] == [0, 1], final
  assert all(e['game'] == 'pong' and -21 <= e['score'] <= 21 for e in final)
  assert record.read_summary()['final_evaluation']['games']['pong'][
      'episodes'] == 2
  assert 'final-evaluation episodes' in scores
