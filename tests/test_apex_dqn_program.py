"""The whole Ape-X DQN program learns Catch, with real nodes, within a bound.

Replay (Reverb), learner, 2 actors, evaluator, counter and supervisor run as
separate processes (`local_mp`). The agent is the paper's (dueling network,
n = 3 double-Q, prioritized replay with actor-computed priorities, centered
RMSProp); only sizes and the learning rate are scaled to learn in seconds.
"""


import numpy as np

from reproductions import run_records

from conftest import kill_node_once_learning, run_module

_LEARNER_STEPS = 2500


def test_apex_dqn_solves_catch_within_a_bounded_number_of_steps(tmp_path):
  result = run_module(
      'launch_programs.apex_dqn',
      ['--environment', 'catch', '--num_actors', '2', '--minutes', '3',
       '--actors_per_node', '1',
       '--max_learner_steps', str(_LEARNER_STEPS),
       '--set', 'learning_rate=0.001', '--set', 'min_replay_size=500',
       '--set', 'batch_size=32', '--set', 'target_update_period=100',
       '--final_episodes', '6',
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
  # The final evaluation played the last checkpoint after the run.
  final = record.read_final_evaluation()
  assert [e['episode'] for e in final] == list(range(6)), final
  assert {e['score'] for e in final} <= {-1.0, 1.0}
  # One checkpoint, the learner's last: saved after the summary's snapshot.
  (steps,) = {e['learner_steps'] for e in final}
  assert steps >= learner['learner_steps']
  assert summary['final_evaluation']['games']['catch']['episodes'] == 6


# No final evaluation: only the first test checks it.
_CATCH_ARGS = ['--environment', 'catch', '--num_actors', '2', '--no_evaluator',
               '--actors_per_node', '1', '--final_episodes', '0',
               '--set', 'learning_rate=0.001', '--set', 'min_replay_size=500',
               '--set', 'batch_size=32', '--set', 'target_update_period=100']


def test_a_killed_actor_does_not_stop_learning(tmp_path):
  """App. F: actors may die at any time; the learner carries on."""
  killed = {}
  result = run_module(
      'launch_programs.apex_dqn',
      # Progress rows every 2 s, so that the kill lands within the first
      # ~200 steps, far below the bound less the 1,000 steps asserted after.
      _CATCH_ARGS + ['--minutes', '5', '--max_learner_steps', '2000',
                     '--report_period_s', '2',
                     '--runs_root', str(tmp_path), '--run_id', 'kill'],
      timeout_s=420,
      during=kill_node_once_learning(tmp_path / 'kill', 'actor/1', killed))
  assert 'learner_steps' in killed, result['output'][-3000:]
  assert result['returncode'] == 0 and not result['leftovers']
  summary = run_records.RunRecord(tmp_path / 'kill').read_summary()
  # The program ran on to its learner-step bound, stopped by its supervisor.
  assert summary['stop_reason'] == 'learner steps reached 2000', summary
  assert summary['counts']['learner_steps'] > killed['learner_steps'] + 1000
  assert summary['launcher']['stop_cause'] == 'program'
  assert 'error' in summary['nodes']['actor/1']       # the dead actor
  assert summary['nodes']['actor/0']['steps'] > 0     # the live one went on


def test_a_restarted_program_resumes_the_learner_from_its_checkpoint(tmp_path):
  """Network, optimizer, target network and counters come back (App. F)."""
  common = _CATCH_ARGS + ['--minutes', '3', '--runs_root', str(tmp_path),
                          '--run_id', 'resume']
  first = run_module('launch_programs.apex_dqn',
                     common + ['--max_learner_steps', '300'], timeout_s=300)
  assert first['returncode'] == 0, first['output'][-3000:]
  record = run_records.RunRecord(tmp_path / 'resume')
  first_summary = record.read_summary()
  steps_at_stop = first_summary['nodes']['learner']['learner_steps']
  assert steps_at_stop >= 300
  checkpoints = list((record.checkpoint_dir / 'learner').glob('ckpt-*.index'))
  assert checkpoints, 'the learner left no checkpoint'

  second = run_module('launch_programs.apex_dqn',
                      common + ['--max_learner_steps', '600', '--resume'],
                      timeout_s=300)
  assert second['returncode'] == 0, second['output'][-3000:]
  assert 'resuming' in second['output']
  summary = record.read_summary()
  learner = summary['nodes']['learner']
  # Steps continue from the checkpoint: this run took fewer than its total.
  assert learner['learner_steps'] >= 600
  assert learner['learner_steps_this_run'] < learner['learner_steps']
  assert learner['learner_steps'] - learner['learner_steps_this_run'] >= 300
  # The counter was restored too: its counts continue from the first run's,
  # from a snapshot a few seconds old at most if the counter stopped first.
  first_counts = first_summary['counts']['learner_steps']
  restored_learner_steps = (summary['counts']['learner_steps']
                            - learner['learner_steps_this_run'])
  restored_learner_state = learner['learner_steps'] - learner['learner_steps_this_run']
  # Never ahead of the learner's own checkpointed steps (each count follows a
  # step), and far from the zero of a counter that was not restored.
  assert 0.5 * first_counts <= restored_learner_steps <= restored_learner_state, (
      first_summary['counts'], summary['counts'], learner)
  assert summary['counts']['actor_steps'] > first_summary['counts']['actor_steps']


def test_256_actors_all_step_and_insert_then_stop_cleanly(tmp_path):
  """Sec. 4.1's hundreds of actors, placed 64 to a node (4 actor processes).

  Every one of the 256 actors has its own environment and epsilon and must
  have sent at least one batch of B = 50 transitions of its own.

  The frame bound is a total over the 4 nodes, and the summary is a snapshot
  taken when it is reached. A lane's first batch (about step 52) is sent in
  the background and confirmed at the latest when its second (about step
  102) is submitted. With 600 frames per actor the nodes take 2,400 node
  steps in all: a node with unconfirmed first batches at the stop (at most
  102 steps) means the other three averaged over 760, 7 times its speed. A
  margin in relative speed, which the machine's load does not change.
  """
  num_actors, frames_per_actor = 256, 600
  result = run_module(
      'launch_programs.apex_dqn',
      ['--environment', 'catch', '--num_actors', str(num_actors),
       '--actors_per_node', '64', '--no_evaluator', '--minutes', '3',
       '--max_actor_frames', str(num_actors * frames_per_actor),
       '--runs_root', str(tmp_path), '--run_id', 'many'],
      timeout_s=300)
  output = result['output']
  assert result['returncode'] == 0, output[-5000:]
  assert not result['leftovers'], 'processes left behind'
  record = run_records.RunRecord(tmp_path / 'many')
  summary = record.read_summary()
  assert summary['stop_reason'].startswith('actor frames reached'), summary
  assert record.read_topology()['nodes']['actor'] == 4
  lanes = [lane for node in range(4)
           for lane in summary['nodes'][f'actor/{node}']['actors']]
  assert sorted(lane['actor_id'] for lane in lanes) == list(range(num_actors))
  idle = [lane['actor_id'] for lane in lanes if lane['items_sent'] < 50]
  assert not idle, f'actors that inserted nothing: {idle}'
  epsilons = {lane['actor_id']: lane['epsilon'] for lane in lanes}
  assert epsilons[0] == 0.4 and abs(epsilons[255] - 0.4 ** 8) < 1e-12
