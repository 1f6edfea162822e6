"""The IMPALA program: queue, learner, N actors, evaluators, counter, supervisor.

Espeholt et al. 2018, Sec. 3 and Fig. 1: actors unroll the latest policy for
n = 20 steps and send each trajectory, with its behaviour logits and initial
core state, through a queue (a Reverb queue table: each trajectory consumed
once, a full queue blocks its actor); one learner trains on batches of 32 with
V-trace and serves parameters. Evaluators run the no-op starts protocol, one
per game. Scale is a profile (`ImpalaConfig.paper()` / `.local()`), never a
code path.

    python -m launch_programs.impala --environment atari/pong --minutes 60
    python -m launch_programs.impala --environment catch --set network=mlp
    # Table 4's multi-task agent: a fixed number of actors per game, the full
    # 18-action set, per-game evaluation in the run record.
    python -m launch_programs.impala \
        --environment atari/pong,atari/breakout --num_actors 4 \
        --set action_set=full

Placement: each actor node steps `environments_per_actor` environments with
one batched forward pass (1 = the paper's one environment per actor;
agents/impala/actor.py). Under `local_mp` every node is a process;
`--learner_cpus` / `--other_cpus` pin the learner and the rest to disjoint
cores, the CPU budget the benchmark states.
"""

import argparse
import dataclasses
import functools
import json
import sys
from typing import Any, Dict, Optional, Sequence

import launchpad as lp

from agents.impala import config as config_lib
from launch_programs import launching
from launch_programs import replay_node
from launch_programs import program_config
from reproductions import run_records

ProgramConfig = program_config.ProgramConfig
_FAMILIES = ('atari', 'catch')


def validate(program: ProgramConfig, agent: Optional[
    config_lib.ImpalaConfig] = None) -> None:
  """IMPALA: Atari games (several = multi-task) or Catch."""
  program.validate(_FAMILIES, 'IMPALA')
  if program.actors_per_node != 1:
    raise ValueError('IMPALA places environments per actor with '
                     '--set environments_per_actor=K, not --actors_per_node')
  environments = program.environments
  if len(environments) > 1:
    if any(not e.startswith('atari/') for e in environments):
      raise ValueError('a multi-task run takes Atari games only, got '
                       f'{program.environment!r}')
    if agent is not None:
      if agent.num_actors % len(environments):
        raise ValueError(
            f'multi-task: num_actors ({agent.num_actors}) must be a multiple '
            f'of the number of games ({len(environments)}), so that each game '
            'gets the same fixed number of actors (Sec. 5.3)')
      if agent.action_set != 'full':
        raise ValueError('multi-task runs use the full 18-action set on every '
                         'game (Sec. 5.3.2): --set action_set=full')


def make_agent_config(program: ProgramConfig,
                      **overrides: Any) -> config_lib.ImpalaConfig:
  """The profile's agent config; Catch gets the MLP torso and no repeat."""
  if program.profile == 'paper':
    make = config_lib.ImpalaConfig.paper
  else:
    make = config_lib.ImpalaConfig.local
  if not program.environment.startswith('atari/'):
    overrides = {'network': 'mlp', 'action_repeat': 1, **overrides}
  return make(**overrides)


def game_name(environment: str) -> str:
  return environment.split('/', 1)[-1]


def frames_per_step(program: ProgramConfig,
                    agent: config_lib.ImpalaConfig) -> int:
  return agent.action_repeat if program.environment.startswith('atari/') else 1


def actor_environment(program: ProgramConfig, actor_id: int) -> str:
  """A fixed number of actors per game: actor i plays game i mod #games."""
  environments = program.environments
  return environments[actor_id % len(environments)]


def _build(environment_name: str, agent: config_lib.ImpalaConfig,
           seed: int, evaluation: bool = False):
  from agents.impala import actor as actor_lib  # pylint: disable=g-import-not-at-top
  from networks import impala as impala_networks  # pylint: disable=g-import-not-at-top
  environment = actor_lib.make_environment(environment_name, agent, seed=seed,
                                           evaluation=evaluation)
  num_actions = int(environment.action_spec().num_values)
  network = impala_networks.make_network_from_config(agent, num_actions)
  return environment, network


def _signature(environment, network, agent):
  from agents.impala import queue  # pylint: disable=g-import-not-at-top
  from networks import impala as impala_networks  # pylint: disable=g-import-not-at-top
  return queue.trajectory_signature(
      environment.observation_spec(),
      int(environment.action_spec().num_values), agent.unroll_length,
      impala_networks.core_state_spec(network))


def _replay_tables(program, agent):
  launching.pin_process_to_cpus(program.other_cpus)
  launching.limit_tf_threads()
  from agents.impala import queue  # pylint: disable=g-import-not-at-top
  environment, network = _build(program.environments[0], agent, seed=0)
  return queue.make_tables(agent, _signature(environment, network, agent))


def _learner(replay_client, counter, program, agent, run_dir):
  launching.pin_process_to_cpus(program.learner_cpus)
  launching.limit_tf_threads(
      intra_op=len(program.learner_cpus) if program.learner_cpus else 2)
  from agents.impala import learning  # pylint: disable=g-import-not-at-top
  from agents.impala import queue  # pylint: disable=g-import-not-at-top
  environment, network = _build(program.environments[0], agent, seed=0)
  signature = _signature(environment, network, agent)
  record = run_records.RunRecord(run_dir)
  return learning.ImpalaLearner(
      network, config=agent, counter=counter,
      logger=record.metrics_logger('learner', time_delta_s=5.0),
      checkpoint_dir=str(record.checkpoint_dir / 'learner'),
      make_dataset=functools.partial(
          queue.make_dataset, replay_client.server_address, agent, signature,
          rate_limiter_timeout_ms=1000),
      signature=signature, replay_client=replay_client)


def _inference(learner, program, agent):
  launching.pin_process_to_cpus(program.other_cpus)
  launching.limit_tf_threads()
  from agents.impala import inference  # pylint: disable=g-import-not-at-top
  environment, network = _build(program.environments[0], agent, seed=0)
  return inference.InferenceServer(network, agent,
                                   environment.observation_spec(),
                                   variable_source=learner)


def _actor(replay_client, learner, counter, actor_id, program, agent,
           run_dir, inference=None):
  # Pinned to the other cores only after its first unroll: until the first
  # batch arrives the learner's cores run only its warm-up, while the
  # actors' start-up (environments, tracing, first unroll) is the launch's
  # critical path (launch to first learner step, 4 actors: 21.4 s pinned from
  # the start, 19.0 s so).
  launching.limit_tf_threads()
  from agents.impala import actor as actor_lib  # pylint: disable=g-import-not-at-top
  name = actor_environment(program, actor_id)
  base_seed = program.seed * 10_000 + 1 + actor_id * agent.environments_per_actor
  environments, network = [], None
  for k in range(agent.environments_per_actor):
    environment, built = _build(name, agent, seed=base_seed + k)
    environments.append(environment)
    network = network or built
  record = run_records.RunRecord(run_dir)
  return actor_lib.ImpalaActor(
      environments, network, replay_client, agent, actor_id=actor_id,
      variable_source=learner, counter=counter,
      logger=record.metrics_logger(f'actor/{actor_id}', tensorboard=False),
      frames_per_step=frames_per_step(program, agent),
      seed=program.seed * 10_000 + actor_id,
      after_first_unroll=functools.partial(launching.pin_process_to_cpus,
                                           program.other_cpus),
      inference=inference)


def _evaluator(learner, counter, index, program, agent, run_dir):
  launching.pin_process_to_cpus(program.other_cpus)
  launching.limit_tf_threads()
  from agents.impala import evaluation  # pylint: disable=g-import-not-at-top
  name = program.environments[index]
  environment, network = _build(name, agent,
                                seed=program.seed * 10_000 + 9_000 + index,
                                evaluation=True)
  return evaluation.ImpalaEvaluator(
      environment, network, learner, agent, run_dir, game_name(name),
      counter=counter, frames_per_step=frames_per_step(program, agent),
      seed=program.seed + index, node=f'evaluator/{index}')


def topology(program: ProgramConfig,
             agent: config_lib.ImpalaConfig) -> Dict[str, Any]:
  nodes = {'replay': 1, 'counter': 1, 'learner': 1,
           'inference': 1 if agent.central_inference else 0,
           'actor': agent.num_actors,
           'evaluator': len(program.environments) if program.evaluator else 0,
           'supervisor': 1}
  return {'launch_type': program.launch_type, 'nodes': nodes,
          'environments_per_actor': agent.environments_per_actor,
          'games': [game_name(e) for e in program.environments],
          'learner_cpus': program.learner_cpus,
          'other_cpus': program.other_cpus,
          'placement': 'one process per node (local_mp)'
                       if program.launch_type == 'local_mp'
                       else 'threads of one process (local_mt)'}


def make_program(program: ProgramConfig, agent: config_lib.ImpalaConfig,
                 run_dir: str) -> lp.Program:
  validate(program, agent)
  lp_program = lp.Program('impala')
  with lp_program.group('replay'):
    replay = lp_program.add_node(
        replay_node.ReplayNode(
            functools.partial(_replay_tables, program, agent)))
  with lp_program.group('counter'):
    counter = lp_program.add_node(
        lp.CourierNode(program_config.counter_node, program))
  with lp_program.group('learner'):
    learner = lp_program.add_node(lp.CourierNode(
        _learner, replay, counter, program, agent, run_dir))
  reports = {'learner': learner}
  inference = None
  if agent.central_inference:
    with lp_program.group('inference'):
      # Every actor's call waits in a server thread while its batch forms.
      inference = lp_program.add_node(lp.CourierNode(
          _inference, learner, program, agent,
          courier_kwargs={'thread_pool_size': agent.num_actors + 8}))
    reports['inference'] = inference
  with lp_program.group('actor'):
    for i in range(agent.num_actors):
      reports[f'actor/{i}'] = lp_program.add_node(lp.CourierNode(
          _actor, replay, learner, counter, i, program, agent, run_dir,
          inference))
  if program.evaluator:
    with lp_program.group('evaluator'):
      for i in range(len(program.environments)):
        reports[f'evaluator/{i}'] = lp_program.add_node(lp.CourierNode(
            _evaluator, learner, counter, i, program, agent, run_dir))
  program_config.add_supervisor(lp_program, program, counter, run_dir,
                                frames_per_step(program, agent), reports)
  return lp_program


def run(program: ProgramConfig, agent: config_lib.ImpalaConfig,
        runs_root: Optional[str] = None, run_id: Optional[str] = None,
        resume: bool = False,
        experiment_keys: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
  """Creates (or resumes) the run record, runs to the first bound.

  `experiment_keys` (from reproductions.experiments) go into config.json so
  that reproductions.figures can select the run.
  """
  validate(program, agent)
  games = [game_name(e) for e in program.environments]
  config = {'agent': 'impala', 'game': games[0], 'games': games,
            'profile': program.profile, 'seed': program.seed,
            'num_actors': agent.num_actors,
            'architecture': agent.network, 'correction': agent.correction,
            'replay_mixing': agent.replay_proportion > 0,
            **({'replay_capacity': agent.replay_capacity,
                'replay_fraction': agent.replay_proportion}
               if agent.replay_proportion > 0 else {}),
            **(experiment_keys or {}),
            'program': dataclasses.asdict(program),
            'impala': dataclasses.asdict(agent)}
  return program_config.launch_recorded(
      'impala', program, config, topology(program, agent),
      functools.partial(make_program, program, agent),
      runs_root, run_id, resume)


def configs_for_experiment_run(run_spec):
  """The program and agent configs of one reproductions.experiments.RunSpec."""
  keys = run_spec.config
  games = keys['games']
  max_seconds = program_config.experiment_max_seconds(run_spec)
  program = ProgramConfig(
      environment=','.join(f'atari/{g}' for g in games),
      profile=keys['profile'], max_seconds=max_seconds,
      max_actor_frames=run_spec.total_frames, seed=keys.get('seed', 0))
  overrides = dict(num_actors=keys['num_actors'],
                   network=keys.get('architecture', 'deep'),
                   correction=keys.get('correction', 'vtrace'),
                   total_frames=run_spec.total_frames)
  if keys.get('batch_size'):
    overrides['batch_size'] = keys['batch_size']
  if keys.get('central_inference'):
    overrides['central_inference'] = True
  if keys.get('replay_mixing'):
    overrides.update(replay_proportion=keys.get('replay_fraction', 0.5),
                     replay_capacity=keys['replay_capacity'])
  if len(games) > 1:
    overrides['action_set'] = 'full'
  return program, make_agent_config(program, **overrides)


def run_experiment(runs) -> int:
  """Runs an experiment's RunSpecs one after another (launch_programs.paper)."""
  return program_config.run_experiment('impala', runs,
                                       configs_for_experiment_run, run)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  program_config.add_arguments(parser, 'ImpalaConfig')
  args = parser.parse_args(argv)
  if args.resume and not args.run_id:
    parser.error('--resume needs --run_id (the run to continue)')
  program = program_config.from_arguments(args, default_actors_per_node=1)
  overrides = program_config.parse_overrides(config_lib.ImpalaConfig,
                                             args.set)
  if args.num_actors is not None:
    overrides['num_actors'] = args.num_actors
  try:
    validate(program)
    agent = make_agent_config(program, **overrides)
    validate(program, agent)
  except (ValueError, TypeError) as error:
    parser.error(str(error))
  summary = run(program, agent, args.runs_root, args.run_id, args.resume)
  print(json.dumps({k: summary.get(k) for k in ('stop_reason', 'counts')},
                   default=str), flush=True)
  for name, report in sorted(summary.get('nodes', {}).items()):
    if name.startswith('evaluator/') and isinstance(report, dict) and (
        report.get('episodes')):
      print(f'[impala] evaluation {report["game"]}: {report["episodes"]} '
            f'episodes, recent mean score {report["recent_mean_score"]}',
            flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
