"""The one distributed program: places any agent's builder on Launchpad nodes.

Acme's split (`acme/jax/layouts/distributed_layout.py`): the agent's builder
(agents/builders.py) says how to construct each part; this program decides
where each part runs. From a builder and a ProgramConfig it places

  replay     one Reverb server with the builder's tables (replay or queue);
  counter    Acme's Counter, the run's frame and episode counts;
  learner    one learner, or `builder.num_learners` of them;
  <extra>    the builder's own node kinds (IMPALA's inference node);
  actor      the paper's actors, `actors_per_node` of them per node;
  evaluator  one per evaluation environment (per game, multi-task);
  supervisor progress lines, the bounds, the run's summary;

pins the learner to `learner_cpus` and every other node to `other_cpus`
(with one TF thread each; the learner gets as many as its cores), stops the
run early if a node of the builder's critical groups exits, and keeps the
run record (config, topology, metrics, summary; `--resume` continues one).
Scale is a profile: the same program places 1 or 360 actors.
"""

import argparse
import dataclasses
import functools
import pathlib
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Type)

import launchpad as lp

from agents import builders
from launch_programs import launching
from launch_programs import program_config
from launch_programs import replay_node
from launch_programs import supervisor
from reproductions import run_records

ProgramConfig = program_config.ProgramConfig


def actor_groups(num_actors: int,
                 actors_per_node: int) -> Tuple[Tuple[int, ...], ...]:
  """The paper's actor ids each actor node hosts: consecutive blocks of K."""
  k = actors_per_node
  return tuple(tuple(range(start, min(start + k, num_actors)))
               for start in range(0, num_actors, k))


def validate(builder_class: Type[builders.ActorLearnerBuilder],
             program: ProgramConfig) -> None:
  """Program-level checks; the builder checks the rest when it is built."""
  program.validate()
  if len(program.environments) > 1 and not builder_class.multi_task:
    raise ValueError(f'{builder_class.name} trains on one environment per '
                     f'run, got {program.environment!r}')


def make_builder(builder_class: Type[builders.ActorLearnerBuilder],
                 program: ProgramConfig, **overrides: Any
                 ) -> builders.ActorLearnerBuilder:
  """The builder of `program`'s profile and environment, validated."""
  validate(builder_class, program)
  overrides = {**builder_class.schedule_overrides(program.max_actor_frames),
               **overrides}
  config = builder_class.make_config(program.profile, program.environment,
                                     **overrides)
  return builder_class(config, program.environment, seed=program.seed)


# --- Nodes ----------------------------------------------------------------------


def _pin(program: ProgramConfig, role: str) -> None:
  """Pins this node's process and caps its TF threads, by role."""
  if role == 'learner':
    launching.pin_process_to_cpus(program.learner_cpus)
    launching.limit_tf_threads(
        intra_op=len(program.learner_cpus) if program.learner_cpus else 2)
  else:
    launching.pin_process_to_cpus(program.other_cpus)
    launching.limit_tf_threads()


def _replay_tables(builder, program):
  _pin(program, 'replay')
  return builder.make_replay_tables()


def _counter(program):
  launching.pin_process_to_cpus(program.other_cpus)
  return launching.make_counter()


def _learner(builder, program, index, replay, counter, run_dir):
  _pin(program, 'learner')
  return builder.make_learner(
      index, replay, counter, run_dir,
      input_pipeline_cpus=program.other_cpus if program.learner_cpus else None)


def _extra(extra, program, index, handles):
  _pin(program, extra.group)
  return extra.make(index, handles)


def _actor(builder, program, node_index, actor_ids, replay, variable_source,
           counter, run_dir, extras):
  after_start = None
  if builder.actors_pin_late:
    launching.limit_tf_threads()
    after_start = functools.partial(launching.pin_process_to_cpus,
                                    program.other_cpus)
  else:
    _pin(program, 'actor')
  return builder.make_actor(node_index, actor_ids, replay, variable_source,
                            counter, run_dir, extras, after_start)


def _evaluator(builder, program, index, variable_source, counter, run_dir):
  _pin(program, 'evaluator')
  return builder.make_evaluator(index, variable_source, counter, run_dir)


def make_program(builder: builders.ActorLearnerBuilder,
                 program: ProgramConfig, run_dir: str) -> lp.Program:
  """Every node of the run, placed; see the module docstring."""
  lp_program = lp.Program(builder.name)
  handles: Dict[str, Any] = {}
  with lp_program.group('replay'):
    handles['replay'] = lp_program.add_node(replay_node.ReplayNode(
        functools.partial(_replay_tables, builder, program)))
  with lp_program.group('counter'):
    handles['counter'] = lp_program.add_node(
        lp.CourierNode(_counter, program))
  reports: Dict[str, Any] = {}
  learners = []
  with lp_program.group('learner'):
    for i in range(builder.num_learners):
      learners.append(lp_program.add_node(lp.CourierNode(
          _learner, builder, program, i, handles['replay'],
          handles['counter'], run_dir)))
  handles['learner'] = learners[0]
  if len(learners) == 1:
    reports['learner'] = learners[0]
  else:
    reports.update({f'learner/{i}': h for i, h in enumerate(learners)})
  extras: Dict[str, List[Any]] = {}
  for extra in builder.extra_nodes():
    with lp_program.group(extra.group):
      extras[extra.group] = [
          lp_program.add_node(lp.CourierNode(
              _extra, extra, program, i,
              {name: handles[name] for name in extra.needs},
              courier_kwargs=dict(extra.courier_kwargs or {})))
          for i in range(extra.count)]
    if extra.count == 1:
      reports[extra.group] = extras[extra.group][0]
    else:
      reports.update({f'{extra.group}/{i}': h
                      for i, h in enumerate(extras[extra.group])})
  if builder.variable_source in extras:  # e.g. parameter-server shards
    shards = extras[builder.variable_source]
    variable_source = shards[0] if len(shards) == 1 else shards
  else:
    variable_source = handles[builder.variable_source]
  with lp_program.group('actor'):
    for i, actor_ids in enumerate(actor_groups(builder.num_actors,
                                               program.actors_per_node)):
      reports[f'actor/{i}'] = lp_program.add_node(lp.CourierNode(
          _actor, builder, program, i, actor_ids, handles['replay'],
          variable_source, handles['counter'], run_dir, extras))
  if program.evaluator:
    with lp_program.group('evaluator'):
      for i in range(len(builder.evaluator_environments())):
        reports[f'evaluator/{i}'] = lp_program.add_node(lp.CourierNode(
            _evaluator, builder, program, i, variable_source,
            handles['counter'], run_dir))
  with lp_program.group('supervisor'):
    lp_program.add_node(lp.CourierNode(
        supervisor.Supervisor, handles['counter'], run_dir=run_dir,
        max_learner_steps=program.max_learner_steps,
        max_actor_frames=program.max_actor_frames,
        max_seconds=program.max_seconds,
        frames_per_actor_step=builder.frames_per_step,
        report_period_s=program.report_period_s, final_reports=reports,
        cpus=program.other_cpus))
  return lp_program


# --- The run --------------------------------------------------------------------


def topology(builder: builders.ActorLearnerBuilder,
             program: ProgramConfig) -> Dict[str, Any]:
  """The run record's account of what was placed where."""
  groups = actor_groups(builder.num_actors, program.actors_per_node)
  nodes = {'replay': 1, 'counter': 1, 'learner': builder.num_learners}
  nodes.update({extra.group: extra.count for extra in builder.extra_nodes()})
  nodes.update({'actor': len(groups),
                'evaluator': (len(builder.evaluator_environments())
                              if program.evaluator else 0),
                'supervisor': 1})
  return {'launch_type': program.launch_type, 'nodes': nodes,
          'actors': builder.num_actors,
          'actors_per_node': program.actors_per_node,
          'learner_cpus': program.learner_cpus,
          'other_cpus': program.other_cpus,
          'placement': 'one process per node (local_mp)'
                       if program.launch_type == 'local_mp'
                       else 'threads of one process (local_mt)',
          **builder.topology()}


def record_config(builder: builders.ActorLearnerBuilder,
                  program: ProgramConfig,
                  experiment_keys: Optional[Mapping[str, Any]] = None
                  ) -> Dict[str, Any]:
  """config.json: the keys runs are selected by, then both configs whole."""
  return {'agent': builder.name, 'profile': program.profile,
          'seed': program.seed, **builder.run_record_config(),
          **(experiment_keys or {}),
          'program': dataclasses.asdict(program),
          builder.name: dataclasses.asdict(builder.config)}


def run(builder: builders.ActorLearnerBuilder, program: ProgramConfig,
        runs_root: Optional[str] = None, run_id: Optional[str] = None,
        resume: bool = False,
        experiment_keys: Optional[Mapping[str, Any]] = None,
        **launch_options: Any) -> Dict[str, Any]:
  """Creates (or resumes) the run record, runs to the first bound.

  `experiment_keys` (from reproductions.experiments) go into config.json so
  that reproductions.figures can select the run. Returns the summary.
  """
  validate(type(builder), program)
  summary = launching.run_recorded(
      builder.name, record_config(builder, program, experiment_keys),
      topology(builder, program),
      functools.partial(make_program, builder, program),
      launch_type=program.launch_type, max_seconds=program.max_seconds,
      description=program.description(), runs_root=runs_root, run_id=run_id,
      resume=resume, critical_groups=builder.critical_groups,
      **launch_options)
  episodes, seconds = program_config.final_evaluation_budget(
      program, builder.final_evaluation_episodes)
  code, _ = launching.exit_status(summary)
  if code == 130:
    print(f'[{builder.name}] interrupted: the learner saved its checkpoint; '
          f'continue with the same arguments plus --run_id '
          f'{pathlib.Path(summary["run_dir"]).name} --resume', flush=True)
  elif episodes and builder.final_evaluation_episodes:
    summary['final_evaluation'] = _final_evaluation(
        builder, program, summary['run_dir'], episodes, seconds)
  return summary


def _final_evaluation(builder: builders.ActorLearnerBuilder,
                      program: ProgramConfig, run_dir: str, episodes: int,
                      seconds: Optional[float]) -> Dict[str, Any]:
  """Plays the final evaluation and adds it to the run's summary.json."""
  from agents import final_evaluation  # pylint: disable=g-import-not-at-top
  # One worker per core the program ran on (the nodes have stopped).
  processes = len(set(program.other_cpus or ()) |
                  set(program.learner_cpus or ())
                  ) or len(launching.available_cpus())
  print(f'[{builder.name}] final evaluation: {episodes} episodes per game of '
        f'the last checkpoint, {processes} processes'
        + (f', at most {seconds:.0f} s' if seconds else ''), flush=True)
  try:
    result = final_evaluation.evaluate(run_dir, episodes, processes, seconds)
  except FileNotFoundError as error:
    result = {'error': str(error)}
    print(f'[{builder.name}] final evaluation skipped: {error}', flush=True)
  else:
    for game, score in sorted(result['games'].items()):
      print(f'[{builder.name}] final evaluation {game}: mean score '
            f'{score["mean_score"]:.2f} over {score["episodes"]} episodes '
            f'(learner step {result["learner_steps"]})', flush=True)
  record = run_records.RunRecord(run_dir)
  summary = record.read_summary() or {}
  summary['final_evaluation'] = result
  record.write_summary(summary)
  return result


# --- Paper experiments ------------------------------------------------------------

# Frame-bounded experiment runs also get a wall-time bound: their frames at
# this rate.
SLOWEST_EXPECTED_FRAMES_PER_S = 200.0


def configs_for_experiment_run(
    builder_class: Type[builders.ActorLearnerBuilder], run_spec: Any
) -> Tuple[ProgramConfig, builders.ActorLearnerBuilder]:
  """The program and builder of one reproductions.experiments.RunSpec."""
  keys = run_spec.config
  max_seconds = (3600.0 * run_spec.wall_hours if run_spec.wall_hours else
                 run_spec.total_frames / SLOWEST_EXPECTED_FRAMES_PER_S)
  environment, config = builder_class.from_experiment(keys,
                                                      run_spec.total_frames)
  program = ProgramConfig(
      environment=environment, profile=keys['profile'],
      max_seconds=max_seconds, max_actor_frames=run_spec.total_frames,
      seed=keys.get('seed', 0),
      actors_per_node=builder_class.default_actors_per_node(keys['profile']))
  validate(builder_class, program)
  return program, builder_class(config, environment, seed=program.seed)


def run_experiment(builder_class: Type[builders.ActorLearnerBuilder],
                   runs: Sequence[Any]) -> int:
  """Runs an experiment's RunSpecs one after another (launch_programs.paper).

  Each run's experiment keys go into its config.json, so that
  reproductions.figures can select it. Returns 1 if any run failed.
  """
  failures = 0
  for i, run_spec in enumerate(runs):
    program, builder = configs_for_experiment_run(builder_class, run_spec)
    print(f'[{builder.name}] run {i + 1}/{len(runs)}: {run_spec.name}',
          flush=True)
    summary = run(builder, program, experiment_keys=dict(run_spec.config))
    failures += launching.exit_status(summary)[0] != 0
  return 1 if failures else 0


# --- Command line ------------------------------------------------------------------


def main(builder_class: Type[builders.ActorLearnerBuilder],
         argv: Optional[Sequence[str]] = None,
         description: Optional[str] = None) -> int:
  """An agent's command line: program flags, `--set` overrides, the run."""
  parser = argparse.ArgumentParser(description=description)
  program_config.add_arguments(parser, builder_class.config_class.__name__)
  args = parser.parse_args(argv)
  if args.resume and not args.run_id:
    parser.error('--resume needs --run_id (the run to continue)')
  try:
    program = program_config.from_arguments(
        args, builder_class.default_actors_per_node(args.profile))
    overrides = program_config.parse_overrides(builder_class.config_class,
                                               args.set)
    if args.num_actors is not None:
      overrides['num_actors'] = args.num_actors
    builder = make_builder(builder_class, program, **overrides)
  except (ValueError, TypeError) as error:
    parser.error(str(error))
  summary = run(builder, program, args.runs_root, args.run_id, args.resume,
                verbose=args.verbose)
  for name, report in sorted(summary.get('nodes', {}).items()):
    if name.startswith('evaluator/') and isinstance(report, dict) and (
        report.get('episodes')):
      print(f'[{builder.name}] evaluation {report.get("game")}: '
            f'{report["episodes"]} episodes, recent mean score '
            f'{report["recent_mean_score"]}', flush=True)
  return print_closing_summary(builder.name, summary)


def print_closing_summary(name: str, summary: Mapping[str, Any]) -> int:
  """Says how the run ended and where everything went; its exit code."""
  code, why = launching.exit_status(summary)
  run_dir = pathlib.Path(summary['run_dir'])
  lines = [('done: ' if code == 0 else f'exit {code}: ') + why,
           f'run record: {run_dir}',
           f'  node logs: {run_dir / run_records.LOGS_DIR}/',
           f'  scores against the papers: python -m reproductions.compare '
           f'{run_dir}',
           f'  figures: python -m reproductions.figures --list, then '
           f'python -m reproductions.figures FIGURE {run_dir.parent}',
           f'  to continue: the same command plus --run_id {run_dir.name} '
           '--resume']
  for line in lines:
    print(f'[{name}] {line}', flush=True)
  return code


def entry_points(builder_class: Type[builders.ActorLearnerBuilder],
                 doc: str) -> Tuple[Callable[..., Any], ...]:
  """An agent program module's functions, bound to its builder.

  Returns (configs_for_experiment_run(run_spec), run_experiment(runs),
  main(argv=None)): what launch_programs.paper and the command line call.
  """
  return (functools.partial(configs_for_experiment_run, builder_class),
          functools.partial(run_experiment, builder_class),
          functools.partial(main, builder_class,
                            description=doc.split('\n')[0]))
