"""The whole Ape-X DQN program learns Catch, with real nodes, within a bound.

Replay (Reverb), learner, 2 actors, evaluator, counter and supervisor run as
separate processes (`local_mp`). The agent is the paper's (dueling network,
n = 3 double-Q, prioritized replay with actor-computed priorities, centered
RMSProp); only sizes and the learning rate are scaled to learn in seconds.
"""

import numpy as np

from reproductions import run_records

from conftest import run_module

_LEARNER_STEPS = 2500


def test_apex_dqn_solves_catch_within_a_bounded_number_of_steps(tmp_path):
  result = run_module(
      'launch_programs.apex_dqn',
      ['--environment', 'catch', '--num_actors', '2', '--minutes', '3',
       '--max_learner_steps', str(_LEARNER_STEPS),
       '--set', 'learning_rate=0.001', '--set', 'min_replay_size=500',
       '--set', 'batch_size=32', '--set', 'target_update_period=100',
       '--runs_root', str(tmp_path), '--run_id', 'catch'],
      timeout_s=300)
  output = result['output']
  assert result['returncode'] == 0, output[-5000:]
  assert not result['leftovers'], 'processes left behind'

  record = run_records.RunRecord(tmp_path / 'catch')
  summary = record.read_summary()
  assert summary['stop_reason'] == f'learner steps reached {_LEARNER_STEPS}', (
      summary, output[-3000:])
  episodes = record.read_evaluation_episodes()
  early = [e['score'] for e in episodes if e['learner_steps'] == 0]
  late = [e['score'] for e in episodes if e['learner_steps'] >= 1500]
  assert len(late) >= 20, (len(late), output[-3000:])
  # Catch scores +1 or -1 per episode; an untrained policy loses most.
  assert np.mean(late[-20:]) >= 0.8, late[-20:]
  if early:
    assert np.mean(early) < np.mean(late[-20:])

  # Replay really carried actor-prioritized data, and the run is recorded.
  learner = summary['nodes']['learner']
  assert learner['learner_steps'] >= _LEARNER_STEPS
  config = record.read_config()
  assert config['agent'] == 'apex_dqn' and config['num_actors'] == 2
  assert record.read_metrics('learner'), 'no learner metrics'
  for actor in ('actor/0', 'actor/1'):
    report = summary['nodes'][actor]
    assert report['items_sent'] > 0, report
  assert summary['nodes']['actor/0']['epsilon'] > summary['nodes']['actor/1']['epsilon']
