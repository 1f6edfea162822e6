"""The whole IMPALA program, with real nodes, within bounds.

Queue (Reverb), learner, actors, evaluators, counter and supervisor run as
separate processes (`local_mp`). On Catch with the MLP torso the agent is the
paper's (V-trace, RMSProp, entropy and baseline costs, unroll 20); only the
learning rate and batch are scaled so that it learns in seconds.
"""


import os
import signal

import numpy as np

from reproductions import run_records

from conftest import kill_node_once_learning, once_learning, run_module

# No final evaluation unless a test asks for one (`--final_episodes N` later
# on the command line wins).
_CATCH_ARGS = ['--environment', 'catch', '--set', 'learning_rate=0.006',
               '--set', 'batch_size=16', '--final_episodes', '0']


def test_impala_program_solves_catch_within_bounded_learner_steps(tmp_path):
  result = run_module(
      'launch_programs.impala',
      _CATCH_ARGS + ['--minutes', '3', '--max_learner_steps', '400',
                     '--runs_root', str(tmp_path), '--run_id', 'catch'],
      timeout_s=300)
  output = result['output']
  assert result['returncode'] == 0, output[-5000:]
  assert not result['leftovers'], 'processes left behind'
  assert '[progress' in output
  record = run_records.RunRecord(tmp_path / 'catch')
  summary = record.read_summary()
  assert summary['stop_reason'] == 'learner steps reached 400', summary
  late = [e['score'] for e in record.read_evaluation_episodes()
          if e['learner_steps'] >= 250]
  assert len(late) >= 20, (len(late), output[-3000:])
  assert np.mean(late[-20:]) >= 0.8, late[-20:]
  config = record.read_config()
  assert config['agent'] == 'impala' and config['correction'] == 'vtrace'
  for actor in ('actor/0', 'actor/1'):
    assert summary['nodes'][actor]['items_sent'] > 0, summary['nodes'][actor]


def test_with_central_inference_the_program_solves_catch_too(tmp_path):
  # Table 1's "dyn. batch": every forward pass goes through the inference
  # node, batched across the 2 actors (8 environments each).
  result = run_module(
      'launch_programs.impala',
      _CATCH_ARGS + ['--set', 'central_inference=True', '--minutes', '3',
                     '--max_learner_steps', '400',
                     '--runs_root', str(tmp_path), '--run_id', 'dyn'],
      timeout_s=300)
  output = result['output']
  assert result['returncode'] == 0, output[-5000:]
  assert not result['leftovers'], 'processes left behind'
  record = run_records.RunRecord(tmp_path / 'dyn')
  summary = record.read_summary()
  assert summary['stop_reason'] == 'learner steps reached 400', summary
  assert record.read_topology()['nodes']['inference'] == 1
  inference = summary['nodes']['inference']
  assert inference['batch_limit'] == 16
  # More rows per pass than one actor has: batched across actors.
  assert inference['mean_batch_rows'] > 8.0, inference
  assert inference['parameter_refreshes'] > 10, inference
  for actor in ('actor/0', 'actor/1'):
    assert summary['nodes'][actor]['parameter_version'] > 0
  late = [e['score'] for e in record.read_evaluation_episodes()
          if e['learner_steps'] >= 250]
  assert len(late) >= 20, (len(late), output[-3000:])
  assert np.mean(late[-20:]) >= 0.8, late[-20:]


def test_a_killed_impala_actor_does_not_stop_learning(tmp_path):
  killed = {}
  result = run_module(
      'launch_programs.impala',
      _CATCH_ARGS + ['--no_evaluator', '--minutes', '4',
                     '--max_learner_steps', '400', '--report_period_s', '2',
                     '--runs_root', str(tmp_path), '--run_id', 'kill'],
      timeout_s=360,
      during=kill_node_once_learning(tmp_path / 'kill', 'actor/1', killed))
  assert 'learner_steps' in killed, result['output'][-3000:]
  assert result['returncode'] == 0 and not result['leftovers']
  summary = run_records.RunRecord(tmp_path / 'kill').read_summary()
  assert summary['stop_reason'] == 'learner steps reached 400', summary
  assert summary['counts']['learner_steps'] > killed['learner_steps'] + 200
  assert 'error' in summary['nodes']['actor/1']      # the dead actor
  assert summary['nodes']['actor/0']['steps'] > 0    # the live one went on


def test_a_restarted_impala_learner_resumes_from_its_checkpoint(tmp_path):
  common = _CATCH_ARGS + ['--no_evaluator', '--minutes', '3',
                          '--runs_root', str(tmp_path), '--run_id', 'resume']
  first = run_module('launch_programs.impala',
                     common + ['--max_learner_steps', '100'], timeout_s=300)
  assert first['returncode'] == 0, first['output'][-3000:]
  record = run_records.RunRecord(tmp_path / 'resume')
  steps_at_stop = record.read_summary()['nodes']['learner']['learner_steps']
  assert steps_at_stop >= 100
  assert list((record.checkpoint_dir / 'learner').glob('ckpt-*.index'))
  second = run_module('launch_programs.impala',
                      common + ['--max_learner_steps', '200', '--resume'],
                      timeout_s=300)
  assert second['returncode'] == 0, second['output'][-3000:]
  assert 'resuming' in second['output']
  learner = record.read_summary()['nodes']['learner']
  assert learner['learner_steps'] >= 200
  # The steps continued from the checkpoint, and so did the frame count that
  # anneals the learning rate.
  assert learner['learner_steps'] - learner['learner_steps_this_run'] >= 100
  assert learner['learner_frames'] > 100 * 16 * 20


def test_ctrl_c_saves_the_checkpoint_says_how_to_resume_and_exits_130(
    tmp_path):
  interrupted = {}

  def ctrl_c(process) -> bool:
    # Ctrl-C: SIGINT to the terminal's whole foreground process group.
    os.killpg(process.pid, signal.SIGINT)
    return True

  result = run_module(
      'launch_programs.impala',
      _CATCH_ARGS + ['--no_evaluator', '--minutes', '3',
                     '--report_period_s', '2', '--final_episodes', '3',
                     '--runs_root', str(tmp_path), '--run_id', 'int'],
      timeout_s=300,
      during=once_learning(tmp_path / 'int', ctrl_c, interrupted,
                          min_learner_steps=20))
  output = result['output']
  assert 'learner_steps' in interrupted, output[-3000:]
  assert result['returncode'] == 130, output[-3000:]
  assert not result['leftovers']
  assert '--run_id int --resume' in output
  record = run_records.RunRecord(tmp_path / 'int')
  assert list((record.checkpoint_dir / 'learner').glob('ckpt-*.index'))
  # Interrupted, so no final evaluation was played; the record says why.
  assert record.read_final_evaluation() is None
  assert record.read_summary()['launcher']['stop_cause'] == (
      'interrupted (SIGINT)')


def test_a_frame_bound_is_the_learning_rate_anneal_horizon():
  """Table G.1 anneals "to 0 from start to end of training": a run bounded
  by frames anneals over them; one bounded by time keeps 200M and records
  it; an explicit --set wins."""
  from launch_programs import distributed  # pylint: disable=g-import-not-at-top
  from launch_programs import impala  # pylint: disable=g-import-not-at-top
  from launch_programs import program_config  # pylint: disable=g-import-not-at-top
  bounded = program_config.ProgramConfig(max_actor_frames=5_000_000)
  builder = distributed.make_builder(impala.Builder, bounded)
  assert builder.config.total_frames == 5_000_000
  timed = distributed.make_builder(impala.Builder,
                                   program_config.ProgramConfig())
  assert timed.config.total_frames == 200_000_000
  assert distributed.record_config(timed, program_config.ProgramConfig())[
      'learning_rate_anneal_frames'] == 200_000_000
  explicit = distributed.make_builder(impala.Builder, bounded,
                                      total_frames=10**9)
  assert explicit.config.total_frames == 10**9


def test_multi_task_program_gives_each_game_its_actors_and_evaluator(tmp_path):
  """Table 4's multi-task row: fixed actors per game, 18 actions, per-game
  evaluation nodes; bounded to a few learner steps on the shallow network."""
  result = run_module(
      'launch_programs.impala',
      ['--environment', 'atari/pong,atari/breakout', '--num_actors', '4',
       '--actors_per_node', '2', '--set', 'action_set=full',
       '--set', 'network=shallow', '--set', 'batch_size=4',
       '--minutes', '3', '--max_learner_steps', '3', '--final_episodes', '1',
       '--runs_root', str(tmp_path), '--run_id', 'mt'],
      timeout_s=300)
  output = result['output']
  assert result['returncode'] == 0, output[-5000:]
  assert not result['leftovers']
  record = run_records.RunRecord(tmp_path / 'mt')
  topology = record.read_topology()
  assert topology['games'] == ['pong', 'breakout']
  assert topology['nodes']['evaluator'] == 2
  summary = record.read_summary()
  assert summary['stop_reason'] == 'learner steps reached 3', summary
  assert summary['nodes']['evaluator/0']['game'] == 'pong'
  assert summary['nodes']['evaluator/1']['game'] == 'breakout'
  for actor in ('actor/0', 'actor/1'):  # each: a pong and a breakout actor
    assert summary['nodes'][actor]['items_sent'] > 0
  assert record.read_config()['impala']['action_set'] == 'full'
  # The final evaluation scores each game of the one agent (Table 4).
  final = record.read_final_evaluation()
  assert sorted(e['game'] for e in final) == ['breakout', 'pong'], final
  # One checkpoint, the learner's last: saved after the summary's snapshot.
  (steps,) = {e['learner_steps'] for e in final}
  assert steps >= summary['nodes']['learner']['learner_steps']
  # Bad multi-task requests name what is valid.
  bad = run_module('launch_programs.impala',
                   ['--environment', 'atari/pong,atari/breakout',
                    '--num_actors', '3', '--set', 'action_set=full'],
                   timeout_s=60)
  assert bad['returncode'] != 0 and 'multiple' in bad['output']
