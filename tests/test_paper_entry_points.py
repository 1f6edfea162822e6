"""Paper entry points: the experiment matrix and the CLI that prints it.

Why: before any agent exists, these pin down that every table/figure has runs
a figure can select (figures.py's key contract), that the local profile fits
this machine, that the paper profile carries the papers' numbers, and that the
CLI never pretends to launch an agent that is not built.
"""

import contextlib
import io
import os
import subprocess
import sys
import unittest

from launch_programs import paper
from reproductions import experiments
from reproductions import figures

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _value(config, key):
  if key in config:
    return config[key]
  for alias in figures.KEY_ALIASES.get(key, ()):
    if alias in config:
      return config[alias]
  return figures.DEFAULTS.get(key, figures.MISSING)


class ExperimentMatrixTest(unittest.TestCase):

  def test_every_experiment_builds_runs_matching_its_figure(self):
    for name, e in experiments.EXPERIMENTS.items():
      self.assertIn(e.agent, experiments.AGENTS)
      for profile in experiments.PROFILES:
        with self.subTest(experiment=name, profile=profile):
          runs = e.runs(profile)
          self.assertTrue(runs)
          for run in runs:
            c = run.config
            for key in ('agent', 'games', 'profile', 'seed'):
              self.assertIn(key, c)
            self.assertEqual(c['agent'], e.agent)
            self.assertEqual(c['profile'], profile)
            self.assertEqual(c['num_actors'], run.num_actors)
            self.assertTrue(run.total_frames or run.wall_hours)
            if e.figure is None:
              continue
            spec = figures.FIGURES[e.figure]
            self.assertIn(e.agent, spec.agents)
            for key in spec.required:
              self.assertIsNot(_value(c, key), figures.MISSING, key)
            for key, allowed in spec.controls.items():
              self.assertIn(_value(c, key), allowed, key)

  def test_varied_keys_vary(self):
    for name, e in experiments.EXPERIMENTS.items():
      runs = e.runs('paper', e.paper_games[:1])
      for key in e.varied:
        with self.subTest(experiment=name, key=key):
          self.assertGreater(len({str(r.config.get(key)) for r in runs}), 1)

  def test_local_table_1_runs_the_local_profiles_actor_count(self):
    from agents.apex_dqn import config as apex_config  # pylint: disable=g-import-not-at-top
    local = apex_config.ApeXDQNConfig.local().num_actors
    for run in experiments.get('apex_table1').runs('local'):
      self.assertEqual(run.num_actors, local)
      self.assertEqual(run.config['num_actors'], local)

  def test_local_profile_fits_this_machine(self):
    for name, e in experiments.EXPERIMENTS.items():
      runs = e.runs('local')
      self.assertLessEqual(len({g for r in runs for g in r.config['games']}),
                           2, name)
      for run in runs:
        with self.subTest(experiment=name, run=run.name):
          # At most 4 actor nodes' worth: IMPALA's local node hosts 8 of
          # the paper's actors (agents/impala/builder.py).
          self.assertLessEqual(run.num_actors, 4 * (
              experiments.LOCAL_IMPALA_ACTORS_PER_NODE
              if e.agent == 'impala' else 1))
          self.assertLess(experiments.estimate_memory_gb(run), 20.0)
          self.assertLessEqual(run.total_frames, 10_000_000)

  def test_paper_profile_numbers(self):
    t1 = experiments.get('apex_table1').runs('paper')
    self.assertEqual(len(t1), 57)
    for run in t1:
      self.assertEqual(run.num_actors, 360)
      self.assertEqual(run.config['replay_capacity'], 2_000_000)
      self.assertEqual(run.total_frames, 22_800_000_000)
    fig4 = experiments.get('apex_fig4').runs('paper')
    self.assertEqual(sorted({r.num_actors for r in fig4}),
                     [8, 16, 32, 64, 128, 256])
    self.assertEqual({r.config['replay_capacity'] for r in fig4}, {1_000_000})
    self.assertEqual({r.wall_hours for r in fig4}, {35})
    self.assertEqual(len({r.config['games'][0] for r in fig4}), 6)
    fig6 = experiments.get('apex_fig6').runs('paper', ['pong'])
    self.assertEqual({(r.num_actors, r.config['transition_copies'])
                      for r in fig6}, {(256, 1), (32, 8)})
    fig7 = experiments.get('apex_fig7').runs('paper', ['pong'])
    self.assertEqual({r.config['epsilon_variant'] for r in fig7},
                     {'per_actor', 'fixed_set'})
    fig12 = experiments.get('apex_fig12').runs('paper', ['pong'])
    # "For both prioritized and uniform, we tried both of these learning
    # rates and selected the best" (Fig. 12 caption).
    self.assertEqual(
        sorted({(r.num_actors, r.config['prioritized'],
                 r.config['learning_rate']) for r in fig12}),
        sorted((n, p, lr) for n in (8, 16, 32, 64, 128, 256)
               for p in (False, True) for lr in (0.00025 / 4, 0.00025)))
    self.assertEqual(len(fig12), 24)
    t2 = experiments.get('impala_table2').runs('paper', ['pong'])
    self.assertEqual(
        {(r.config['correction'], r.config['replay_mixing']) for r in t2},
        {(c, m) for c in ('vtrace', 'one_step_is', 'epsilon_correction', 'none')
         for m in (False, True)})
    # Table D.3: 10,000 trajectories, in both profiles; 21 frame stacks of
    # 84x84x4 bytes each, 5.9 GB.
    for profile in ('paper', 'local'):
      mixing = [r for r in experiments.get('impala_table2').runs(
          profile, ['pong']) if r.config['replay_mixing']]
      self.assertEqual({r.config['replay_capacity'] for r in mixing},
                       {10_000}, profile)
      for run in mixing:
        self.assertAlmostEqual(
            run.replay_capacity * run.transition_bytes / 1e9,
            10_000 * 21 * 84 * 84 * 4 / 1e9)
    t4 = experiments.get('impala_table4').runs('paper')
    variants = {r.config['variant'] for r in t4}
    self.assertEqual(variants, {'shallow_expert', 'deep_expert',
                                'deep_multitask'})
    multi = [r for r in t4 if r.config['variant'] == 'deep_multitask']
    self.assertEqual(len(multi), 1)
    self.assertEqual(len(multi[0].config['games']), 57)
    self.assertEqual(multi[0].total_frames, 11_400_000_000)
    self.assertEqual(len(experiments.get('gorila').runs('paper')), 49)
    self.assertEqual(len(experiments.get('apex_fig3_dpg').paper_games), 4)

  def test_bad_names_list_valid_choices(self):
    e = experiments.get('apex_fig4')
    with self.assertRaisesRegex(ValueError, 'paper, local'):
      e.runs('huge')
    with self.assertRaisesRegex(ValueError, "Did you mean 'pong'.*breakout"):
      e.runs('local', ['pongg'])
    with self.assertRaisesRegex(ValueError, 'humanoid_run'):
      experiments.get('apex_fig3_dpg').runs('local', ['pong'])
    with self.assertRaisesRegex(ValueError, 'apex_fig4.*impala_table2'):
      experiments.get('apex_fig44')


class CliTest(unittest.TestCase):

  def _main(self, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      code = paper.main(argv)
    return code, out.getvalue(), err.getvalue()

  def test_agent_programs_cover_every_agent(self):
    self.assertEqual(set(paper.AGENT_PROGRAMS), set(experiments.AGENTS))

  def test_not_built_exits_2_without_launching(self):
    for name, e in experiments.EXPERIMENTS.items():
      if paper.agent_built(e.agent):
        continue
      with self.subTest(experiment=name):
        code, out, err = self._main([name, '--profile', 'local'])
        self.assertEqual(code, 2)
        self.assertIn('nodes:', out)
        self.assertIn('memory ~', out)
        self.assertIn('totals:', out)
        self.assertIn(f'the {e.agent} agent has not been built yet', err)
        self.assertIn('nothing was launched', err)

  def test_dry_run_exits_0(self):
    code, out, _ = self._main(['apex_fig4', '--profile', 'paper',
                               '--dry_run', '--games', 'pong,breakout'])
    self.assertEqual(code, 0)
    self.assertIn('actors=256', out)
    self.assertIn('12 runs', out)

  def test_list(self):
    code, out, _ = self._main(['--list'])
    self.assertEqual(code, 0)
    for name, e in experiments.EXPERIMENTS.items():
      self.assertIn(name, out)
      self.assertIn(e.paper, out)
    self.assertIn('agent not built yet', out)
    self.assertIn('apex_fig4       apex_dqn  [built]', out)

  def test_bad_arguments_name_choices(self):
    code, _, err = self._main(['nope', '--profile', 'local'])
    self.assertEqual(code, 1)
    self.assertIn('apex_table1', err)
    code, _, err = self._main(['apex_fig4', '--profile', 'big'])
    self.assertEqual(code, 1)
    self.assertIn('paper, local', err)
    code, _, err = self._main(['apex_fig4', '--games', 'pong,nogame'])
    self.assertEqual(code, 1)
    self.assertIn('zaxxon', err)

  def test_subprocess_entry_point(self):
    proc = subprocess.run(
        [sys.executable, '-m', 'launch_programs.paper', 'gorila',
         '--profile', 'local'],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    self.assertEqual(proc.returncode, 2, proc.stderr)
    self.assertIn('gorila', proc.stdout)
    self.assertIn('the gorila agent has not been built yet', proc.stderr)

  def test_a_built_agent_is_handed_the_planned_runs(self):
    from unittest import mock  # pylint: disable=g-import-not-at-top
    from launch_programs import apex_dqn  # pylint: disable=g-import-not-at-top
    with mock.patch.object(apex_dqn, 'run_experiment',
                           return_value=0) as launched:
      code, out, _ = self._main(['apex_fig4', '--profile', 'local'])
    self.assertEqual(code, 0)
    self.assertIn('actors=4', out)
    runs = launched.call_args[0][0]
    self.assertEqual(runs, experiments.get('apex_fig4').runs('local'))

  def test_every_apex_run_becomes_a_valid_program_config(self):
    """Each Ape-X RunSpec maps onto the agent's own config fields."""
    from agents.apex_dqn import builder as apex_builder  # pylint: disable=g-import-not-at-top
    from launch_programs import apex_dqn  # pylint: disable=g-import-not-at-top
    for name, e in experiments.EXPERIMENTS.items():
      if e.agent != 'apex_dqn':
        continue
      for profile in experiments.PROFILES:
        for run in e.runs(profile, ['pong']):
          with self.subTest(experiment=name, profile=profile, run=run.name):
            program, builder = apex_dqn.configs_for_experiment_run(run)
            agent = builder.config
            keys = run.config
            self.assertEqual(agent.num_actors, keys['num_actors'])
            self.assertEqual(agent.replay_soft_capacity,
                             keys['replay_capacity'])
            self.assertEqual(agent.transition_copies,
                             keys['transition_copies'])
            self.assertEqual(agent.epsilon_variant, keys['epsilon_variant'])
            self.assertEqual(agent.learning_rate, keys['learning_rate'])
            self.assertEqual(agent.priority_exponent > 0, keys['prioritized'])
            self.assertEqual(program.max_actor_frames, run.total_frames)
            self.assertEqual(program.actors_per_node,
                             1 if profile == 'paper' else
                             apex_builder.LOCAL_ACTORS_PER_NODE)
            if profile == 'paper':
              self.assertEqual(agent.batch_size, 512)

  def test_no_child_processes(self):
    """Launches nothing: no process is started, none is left as a child."""
    import multiprocessing  # pylint: disable=g-import-not-at-top
    from unittest import mock  # pylint: disable=g-import-not-at-top
    boom = mock.Mock(side_effect=AssertionError('a process was started'))
    children = f'/proc/{os.getpid()}/task/{os.getpid()}/children'

    def current_children():
      if not os.path.exists(children):
        return None
      with open(children) as f:
        return set(f.read().split())
    # Children this test process already has (multiprocessing's resource
    # tracker, once an earlier test used a process pool) are not the call's.
    before = current_children()
    with mock.patch.object(subprocess, 'Popen', boom), \
         mock.patch.object(os, 'fork', boom), \
         mock.patch.object(multiprocessing.Process, 'start', boom):
      code, _, _ = self._main(['gorila', '--profile', 'local'])
    self.assertEqual(code, 2)
    boom.assert_not_called()
    if before is not None:
      self.assertEqual(current_children() - before, set())


if __name__ == '__main__':
  unittest.main()


class ImpalaExperimentsTest(unittest.TestCase):

  def test_every_impala_run_becomes_a_valid_program_config(self):
    """Each IMPALA RunSpec maps onto the agent's own config fields."""
    from launch_programs import impala  # pylint: disable=g-import-not-at-top
    for name, e in experiments.EXPERIMENTS.items():
      if e.agent != 'impala':
        continue
      for profile in experiments.PROFILES:
        for run in e.runs(profile, ['pong', 'breakout']):
          with self.subTest(experiment=name, profile=profile, run=run.name):
            program, builder = impala.configs_for_experiment_run(run)
            builder.validate()
            agent = builder.config
            keys = run.config
            self.assertEqual(agent.num_actors, keys['num_actors'])
            self.assertEqual(agent.network, keys['architecture'])
            self.assertEqual(agent.correction, keys.get('correction', 'vtrace'))
            self.assertEqual(agent.replay_proportion > 0,
                             bool(keys.get('replay_mixing')))
            self.assertEqual(agent.total_frames, run.total_frames)
            self.assertEqual([e.split('/')[1] for e in program.environments],
                             keys['games'])
            if len(keys['games']) > 1:
              self.assertEqual(agent.action_set, 'full')
            self.assertEqual(agent.central_inference,
                             bool(keys.get('central_inference')))
            self.assertEqual(run.nodes.get('inference', 0),
                             int(agent.central_inference))

  def test_table1_has_the_dyn_batch_row(self):
    rows = {run.config['variant']: run
            for run in experiments.get('impala_table1').runs('paper')}
    self.assertTrue(rows['single_machine_dyn_batch'].config[
        'central_inference'])
    self.assertEqual(rows['single_machine_dyn_batch'].num_actors, 48)
    self.assertFalse(rows['single_machine'].config['central_inference'])
