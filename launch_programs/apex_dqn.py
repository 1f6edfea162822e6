"""The Ape-X DQN program: replay, learner, N actors, evaluator, counter, supervisor.

Horgan et al. 2018, Sec. 3 and Fig. 1: many actors with their own epsilon feed
one prioritized replay; one learner samples it, writes priorities back and
serves parameters; an evaluator runs the no-op starts protocol. Scale is a
profile (`ApeXDQNConfig.paper()` / `.local()`), never a code path: the same
program runs 1 or 360 actors.

    python -m launch_programs.apex_dqn --environment atari/pong --minutes 10
    python -m launch_programs.apex_dqn --environment catch --num_actors 2

Placement: under `local_mp` each node is a process. `actors_per_node` = 1
gives every actor its own process, the paper's one-actor-per-machine layout;
it costs a TF runtime per actor (~550 MB), so 256 actors would need ~140 GB.
`actors_per_node` = K hosts K of the paper's actors in one node (each still
with its own environment, epsilon, n-step stream and buffer; see
agents/apex_dqn/actor.py) and batches their forward passes; 256 actors then
fit in ~3 GB (README "Measured performance"). `--learner_cpus` /
`--other_cpus` pin the learner and everything else to disjoint cores, the
CPU budget the benchmark states.
"""

import argparse
import dataclasses
import functools
import json
import sys
from typing import Any, Dict, Optional, Sequence, Tuple

import launchpad as lp

from agents.apex_dqn import config as config_lib
from launch_programs import launching
from launch_programs import replay_node
from launch_programs import program_config
from reproductions import run_records

PROFILES = program_config.PROFILES
ProgramConfig = program_config.ProgramConfig
# Local profile placement: measured in README "Measured performance".
LOCAL_ACTORS_PER_NODE = 4
_FAMILIES = ('atari', 'catch')


def make_agent_config(program: ProgramConfig,
                      **overrides: Any) -> config_lib.ApeXDQNConfig:
  """The profile's agent config; feature observations are stored uncompressed."""
  make = (config_lib.ApeXDQNConfig.paper if program.profile == 'paper'
          else config_lib.ApeXDQNConfig.local)
  if not program.environment.startswith('atari/'):
    # PNG is for frames; Catch boards are tiny, and its steps are 1 frame.
    overrides = {'compress_observations': False, 'action_repeat': 1,
                 **overrides}
  return make(**overrides)


def game_name(program: ProgramConfig) -> str:
  return program.environment.split('/', 1)[-1]


def frames_per_step(program: ProgramConfig,
                    agent: config_lib.ApeXDQNConfig) -> int:
  return agent.action_repeat if program.environment.startswith('atari/') else 1


def make_environment(program: ProgramConfig, agent: config_lib.ApeXDQNConfig,
                     evaluation: bool, seed: int):
  """The protocol's environment: Ape-X training or no-op-starts evaluation."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from reproductions import environments  # pylint: disable=g-import-not-at-top
  if program.environment == 'catch':
    return environments.make_environment('catch', seed=seed, dtype=np.uint8)
  if evaluation:
    atari = environments.AtariConfig.apex_evaluation()
    atari = dataclasses.replace(
        atari, noop_max=agent.evaluation_noop_max,
        max_episode_frames=agent.evaluation_max_episode_frames)
  else:
    atari = dataclasses.replace(environments.AtariConfig.apex_training(),
                                max_episode_frames=agent.max_episode_frames)
  return environments.make_environment(program.environment, config=atari,
                                       seed=seed)


def make_network(environment_spec: Tuple[Tuple[int, ...], int],
                 agent: config_lib.ApeXDQNConfig):
  """Dueling DQN on frames (App. C), a dueling MLP on feature observations."""
  from networks import dqn  # pylint: disable=g-import-not-at-top
  observation_shape, num_actions = environment_spec
  scale = dqn.DUELING_GRADIENT_SCALE if agent.dueling_gradient_rescale else None
  if len(observation_shape) == 3:
    return dqn.DuelingDQN(num_actions, hidden_size=agent.dueling_hidden_size,
                          gradient_scale=scale)
  return dqn.DuelingMLP(num_actions, gradient_scale=scale)


def _spec(environment) -> Tuple[Tuple[int, ...], int]:
  """(observation shape, number of actions): what the network is built from."""
  return (tuple(environment.observation_spec().shape),
          int(environment.action_spec().num_values))


def _replay_tables(program, agent):
  from agents.apex_dqn import replay  # pylint: disable=g-import-not-at-top
  observation_shape, _ = _spec(
      make_environment(program, agent, evaluation=False, seed=0))
  signature = replay.transition_signature(
      observation_shape, compressed=agent.compress_observations)
  return replay.make_replay_tables(agent, signature)


def actor_groups(program: ProgramConfig,
                 agent: config_lib.ApeXDQNConfig) -> Tuple[Tuple[int, ...], ...]:
  """The actor ids each actor node hosts: consecutive blocks of K."""
  k = program.actors_per_node
  return tuple(tuple(range(start, min(start + k, agent.num_actors)))
               for start in range(0, agent.num_actors, k))


def _pinned_replay_tables(program, agent):
  launching.pin_process_to_cpus(program.other_cpus)
  return _replay_tables(program, agent)


def _learner(replay_client, counter, program, agent, run_dir):
  launching.pin_process_to_cpus(program.learner_cpus)
  launching.limit_tf_threads(
      intra_op=len(program.learner_cpus) if program.learner_cpus else 2)
  from acme import specs  # pylint: disable=g-import-not-at-top
  from agents.apex_dqn import learning  # pylint: disable=g-import-not-at-top
  from agents.apex_dqn import replay  # pylint: disable=g-import-not-at-top
  environment = make_environment(program, agent, evaluation=False, seed=0)
  spec = _spec(environment)
  record = run_records.RunRecord(run_dir)
  return learning.ApeXDQNLearner(
      make_network(spec, agent), make_network(spec, agent),
      replay_client=replay_client, config=agent, counter=counter,
      logger=record.metrics_logger('learner', time_delta_s=5.0),
      checkpoint_dir=str(record.checkpoint_dir / 'learner'),
      observation_spec=specs.make_environment_spec(environment).observations,
      input_pipeline_cpus=program.other_cpus if program.learner_cpus else None,
      make_dataset=functools.partial(
          replay.make_dataset, replay_client.server_address, agent,
          observation_shape=spec[0], rate_limiter_timeout_ms=1000))


def _actor(replay_client, learner, counter, node_index, actor_ids, program,
           agent, run_dir):
  launching.pin_process_to_cpus(program.other_cpus)
  launching.limit_tf_threads()
  from agents.apex_dqn import actor  # pylint: disable=g-import-not-at-top
  environments = [
      make_environment(program, agent, evaluation=False,
                       seed=program.seed * 10_000 + 1 + actor_id)
      for actor_id in actor_ids]
  record = run_records.RunRecord(run_dir)
  return actor.ApeXDQNActor(
      environments, make_network(_spec(environments[0]), agent),
      replay_client, agent, list(actor_ids),
      variable_source=learner, counter=counter,
      logger=record.metrics_logger(f'actor/{node_index}', tensorboard=False),
      frames_per_step=frames_per_step(program, agent),
      seed=program.seed * 10_000 + actor_ids[0])


def _evaluator(learner, counter, program, agent, run_dir):
  launching.pin_process_to_cpus(program.other_cpus)
  launching.limit_tf_threads()
  from agents.apex_dqn import evaluation  # pylint: disable=g-import-not-at-top
  environment = make_environment(program, agent, evaluation=True,
                                 seed=program.seed * 10_000 + 9_999)
  return evaluation.ApeXDQNEvaluator(
      environment, make_network(_spec(environment), agent), learner, agent,
      run_dir, game_name(program),
      counter=counter, frames_per_step=frames_per_step(program, agent),
      seed=program.seed)



def topology(program: ProgramConfig,
             agent: config_lib.ApeXDQNConfig) -> Dict[str, Any]:
  groups = actor_groups(program, agent)
  nodes = {'replay': 1, 'counter': 1, 'learner': 1, 'actor': len(groups),
           'evaluator': int(program.evaluator), 'supervisor': 1}
  return {'launch_type': program.launch_type, 'nodes': nodes,
          'actors': agent.num_actors,
          'actors_per_node': program.actors_per_node,
          'learner_cpus': program.learner_cpus,
          'other_cpus': program.other_cpus,
          'placement': 'one process per node (local_mp)'
                       if program.launch_type == 'local_mp'
                       else 'threads of one process (local_mt)'}


def make_program(program: ProgramConfig, agent: config_lib.ApeXDQNConfig,
                 run_dir: str) -> lp.Program:
  validate(program)
  lp_program = lp.Program('apex_dqn')
  with lp_program.group('replay'):
    replay = lp_program.add_node(
        replay_node.ReplayNode(
            functools.partial(_pinned_replay_tables, program, agent)))
  with lp_program.group('counter'):
    counter = lp_program.add_node(
        lp.CourierNode(program_config.counter_node, program))
  with lp_program.group('learner'):
    learner = lp_program.add_node(lp.CourierNode(
        _learner, replay, counter, program, agent, run_dir))
  reports = {'learner': learner}
  with lp_program.group('actor'):
    for i, actor_ids in enumerate(actor_groups(program, agent)):
      reports[f'actor/{i}'] = lp_program.add_node(lp.CourierNode(
          _actor, replay, learner, counter, i, actor_ids, program, agent,
          run_dir))
  if program.evaluator:
    with lp_program.group('evaluator'):
      reports['evaluator/0'] = lp_program.add_node(lp.CourierNode(
          _evaluator, learner, counter, program, agent, run_dir))
  program_config.add_supervisor(lp_program, program, counter, run_dir,
                                frames_per_step(program, agent), reports)
  return lp_program


def run(program: ProgramConfig, agent: config_lib.ApeXDQNConfig,
        runs_root: Optional[str] = None,
        run_id: Optional[str] = None, resume: bool = False,
        experiment_keys: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
  """Creates (or resumes) the run record, runs to the first bound.

  `experiment_keys` (from reproductions.experiments) are written into
  config.json so that reproductions.figures can select the run.
  """
  validate(program)
  config = {'agent': 'apex_dqn', 'game': game_name(program),
            'games': [game_name(program)], 'profile': program.profile,
            'seed': program.seed, 'num_actors': agent.num_actors,
            'replay_capacity': agent.replay_soft_capacity,
            'transition_copies': agent.transition_copies,
            'epsilon_variant': agent.epsilon_variant,
            'prioritized': agent.priority_exponent > 0,
            'learning_rate': agent.learning_rate,
            **(experiment_keys or {}),
            'program': dataclasses.asdict(program),
            'apex_dqn': dataclasses.asdict(agent)}
  return program_config.launch_recorded(
      'apex_dqn', program, config, topology(program, agent),
      functools.partial(make_program, program, agent),
      runs_root, run_id, resume)


def configs_for_experiment_run(run_spec) -> Tuple[ProgramConfig,
                                                   config_lib.ApeXDQNConfig]:
  """The program and agent configs of one reproductions.experiments.RunSpec."""
  keys = run_spec.config
  max_seconds = program_config.experiment_max_seconds(run_spec)
  program = ProgramConfig(
      environment=f'atari/{keys["games"][0]}', profile=keys['profile'],
      max_seconds=max_seconds, max_actor_frames=run_spec.total_frames,
      seed=keys.get('seed', 0),
      actors_per_node=default_actors_per_node(keys['profile']))
  overrides = dict(
      num_actors=keys['num_actors'],
      replay_soft_capacity=keys['replay_capacity'],
      transition_copies=keys.get('transition_copies', 1),
      epsilon_variant=keys.get('epsilon_variant', 'per_actor'),
      learning_rate=keys['learning_rate'])
  if not keys.get('prioritized', True):
    # Fig. 12's uniform replay: Prioritized(0) draws uniformly, and with
    # uniform probabilities every importance weight is 1.
    overrides['priority_exponent'] = 0.0
  agent = make_agent_config(program, **overrides)
  if agent.min_replay_size > agent.replay_soft_capacity:
    agent = dataclasses.replace(agent,
                                min_replay_size=agent.replay_soft_capacity // 2)
  return program, agent


def run_experiment(runs) -> int:
  """Runs an experiment's RunSpecs one after another (launch_programs.paper)."""
  return program_config.run_experiment('apex_dqn', runs,
                                       configs_for_experiment_run, run)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  program_config.add_arguments(parser, 'ApeXDQNConfig')
  args = parser.parse_args(argv)
  if args.resume and not args.run_id:
    parser.error('--resume needs --run_id (the run to continue)')
  program = program_config.from_arguments(
      args, default_actors_per_node(args.profile))
  overrides = parse_overrides(args.set)
  if args.num_actors is not None:
    overrides['num_actors'] = args.num_actors
  try:
    validate(program)
    agent = make_agent_config(program, **overrides)
  except (ValueError, TypeError) as error:
    parser.error(str(error))
  summary = run(program, agent, args.runs_root, args.run_id, args.resume)
  print(json.dumps({k: summary.get(k) for k in ('stop_reason', 'counts')},
                   default=str), flush=True)
  evaluator = summary.get('nodes', {}).get('evaluator/0', {})
  if isinstance(evaluator, dict) and evaluator.get('episodes'):
    print(f'[apex_dqn] evaluation: {evaluator["episodes"]} episodes, recent '
          f'mean score {evaluator["recent_mean_score"]}', flush=True)
  return 0


def validate(program: ProgramConfig) -> None:
  """Ape-X DQN: one discrete-action environment (control tasks are DPG's)."""
  program.validate(_FAMILIES, 'Ape-X DQN')
  if len(program.environments) != 1:
    raise ValueError('Ape-X DQN trains on one environment per run, got '
                     f'{program.environment!r}')


def default_actors_per_node(profile: str) -> int:
  """Paper: one actor per machine. Local: all actors of a node share a pass."""
  return 1 if profile == 'paper' else LOCAL_ACTORS_PER_NODE


def parse_overrides(items: Sequence[str]) -> Dict[str, Any]:
  """FIELD=VALUE strings into typed ApeXDQNConfig overrides."""
  return program_config.parse_overrides(config_lib.ApeXDQNConfig, items)


if __name__ == '__main__':
  sys.exit(main())
