"""The final evaluation: the last checkpoint's network, N seeded episodes.

A real learner checkpoint (agents/checkpointing.LearnerCheckpoint, as every
learner writes it) of an IMPALA network on Catch, evaluated in spawned
worker processes as a program does at its end.
"""

import numpy as np
import pytest
import tensorflow as tf

from agents import builders
from agents import checkpointing
from agents import final_evaluation
from agents import node_runtime
from agents.impala import builder as impala_builder
from agents.impala import config as config_lib
from launch_programs import distributed
from launch_programs import program_config
from reproductions import evaluate as evaluate_cli
from reproductions import run_records

STEP = 7


def _run_with_checkpoint(tmp_path, save=True):
  config = config_lib.ImpalaConfig.local(network='mlp', mlp_sizes=(16,),
                                         use_lstm=False)
  builder = impala_builder.ImpalaBuilder(config, 'catch', seed=3)
  program = program_config.ProgramConfig(environment='catch', seed=3)
  record = run_records.RunRecord.create(
      'impala', distributed.record_config(builder, program),
      distributed.topology(builder, program), root=tmp_path, run_id='run')
  _, policy = builder.make_evaluation_policy(0)
  rng = np.random.default_rng(0)
  for v in policy.network.variables:  # Distinct from any fresh network's.
    v.assign(rng.normal(size=v.shape).astype(np.float32))
  if save:
    checkpointing.LearnerCheckpoint(
        str(final_evaluation.checkpoint_dir(record.run_dir)), counter=None,
        increments=node_runtime.BackgroundIncrements(None),
        num_steps=tf.Variable(STEP, dtype=tf.int64),
        network=policy.network).save()
  return record, [v.numpy() for v in policy.network.variables]


def test_run_config_rebuilds_the_builder(tmp_path):
  record, _ = _run_with_checkpoint(tmp_path, save=False)
  builder = builders.from_run_config(record.read_config())
  assert isinstance(builder, impala_builder.ImpalaBuilder)
  assert builder.config.mlp_sizes == (16,) and builder.seed == 3
  assert builder.environment == 'catch'
  with pytest.raises(ValueError, match='valid choices: apex_dqn, impala'):
    builders.builder_class('gorilla')


def test_restore_loads_the_checkpointed_network(tmp_path):
  record, saved = _run_with_checkpoint(tmp_path)
  path = final_evaluation.latest_checkpoint(record.run_dir)
  assert path == tf.train.latest_checkpoint(
      str(final_evaluation.checkpoint_dir(record.run_dir)))
  builder = builders.from_run_config(record.read_config())
  _, policy = builder.make_evaluation_policy(0)
  step, _ = final_evaluation.restore_policy(policy, path)
  assert step == STEP
  for variable, value in zip(policy.network.variables, saved):
    np.testing.assert_array_equal(variable.numpy(), value)


def test_scores_do_not_depend_on_the_number_of_processes(tmp_path):
  record, _ = _run_with_checkpoint(tmp_path)
  one = final_evaluation.evaluate(record.run_dir, episodes=7, processes=1)
  rows_one = record.read_final_evaluation()
  two = final_evaluation.evaluate(record.run_dir, episodes=7, processes=2)
  rows_two = record.read_final_evaluation()
  assert rows_one == rows_two
  assert [r['episode'] for r in rows_one] == list(range(7))
  assert {r['score'] for r in rows_one} <= {-1.0, 1.0}
  assert {r['learner_steps'] for r in rows_one} == {STEP}
  assert one['games']['catch']['episodes'] == 7 and not one['cut_short']
  assert one['games'] == two['games']
  # A spent budget starts no episode: nothing is written as if played.
  cut = final_evaluation.evaluate(record.run_dir, episodes=7, max_seconds=0)
  assert cut['cut_short'] and record.read_final_evaluation() == []


def test_a_run_without_checkpoint_is_refused_with_the_reason(tmp_path,
                                                             capsys):
  record, _ = _run_with_checkpoint(tmp_path, save=False)
  with pytest.raises(FileNotFoundError, match='no learner checkpoint'):
    final_evaluation.evaluate(record.run_dir)
  assert evaluate_cli.main([str(record.run_dir)]) == 1
  assert 'no learner checkpoint' in capsys.readouterr().err
  with pytest.raises(SystemExit):
    evaluate_cli.main([str(tmp_path / 'nothing')])
  assert 'not a run directory' in capsys.readouterr().err
