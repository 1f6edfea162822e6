"""The experiment matrix behind each paper table and figure, as data.

Why data: one registry (`EXPERIMENTS`) is what `launch_programs.paper` prints,
launches and lists, what the tests check against `reproductions.figures`'
config-key contract, and what a reader audits against the papers. A figure can
only be drawn from runs whose config.json carries the keys it selects on, so
each `RunSpec.config` is exactly the dict a run would write (agent, games,
profile, seed and the keys the experiment varies).

Two profiles, never two code paths:
  'paper'  the papers' numbers (actors, replay sizes, frame budgets), each
           cited; values a paper does not state are marked NOT STATED or
           UNVERIFIED with the reason for our choice.
  'local'  the same experiment shrunk to a 2-core machine: 1-4 actors, 1-2
           games, a few million frames. It is NOT paper scale; it shows the
           direction of an effect at best.

Papers: Ape-X = Horgan et al. 2018, "Distributed Prioritized Experience
Replay" (arXiv:1803.00933); IMPALA = Espeholt et al. 2018, "IMPALA: Scalable
Distributed Deep-RL with Importance Weighted Actor-Learner Architectures"
(arXiv:1802.01561); Gorila = Nair et al. 2015, "Massively Parallel Methods
for Deep Reinforcement Learning" (arXiv:1507.04296).

This module imports no TensorFlow, so listing and planning are instant.
"""

import dataclasses
import difflib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from reproductions import references
from reproductions.environments.atari import ATARI57_GAMES
from reproductions.environments.control import CONTROL_TASKS

PROFILES: Tuple[str, ...] = ('paper', 'local')
AGENTS: Tuple[str, ...] = ('apex_dqn', 'apex_dpg', 'impala', 'gorila')

# --- Paper values, cited ------------------------------------------------------

# Ape-X Sec. 4.1: "We use 360 actor machines"; Table 1: ~5 days, 22.8B frames.
APEX_ACTORS = 360
APEX_FRAMES = 22_800_000_000
APEX_DAYS = 5
# Ape-X Sec. 4.1: replay soft-limited to 2M transitions.
APEX_REPLAY = 2_000_000
# Ape-X Sec. 4.1: "approximately 139 frames per second (FPS) each" actor.
APEX_FPS_PER_ACTOR = 139
# Ape-X Sec. 5 / Fig. 4: "(8, 16, 32, 64, 128 and 256) for 35 hours on a subset
# of 6 Atari games ... replay memory fixed at 1 million transitions".
APEX_SCALING_ACTORS = (8, 16, 32, 64, 128, 256)
APEX_SCALING_HOURS = 35
APEX_SCALING_REPLAY = 1_000_000
# Ape-X Sec. 5 / Fig. 5: "a setup with 256 actors"; the caption names a 250K
# replay. The other capacities are drawn in the figure only (UNVERIFIED); we
# span 250K..2M, ending at Table 1's 2M.
APEX_FIG5_ACTORS = 256
APEX_FIG5_CAPACITIES = (250_000, 500_000, 1_000_000, 2_000_000)
# Ape-X App. A / Fig. 6: "(n = 32, k = 8)" as recent as "(n = 256, k = 1)".
APEX_FIG6_VARIANTS = ((256, 1), (32, 8))
# Ape-X App. B / Fig. 7: "a small fixed set of 6 values for epsilon, instead of
# the full range". Actor count NOT STATED; we use Fig. 5/6's 256.
APEX_FIG7_ACTORS = 256
APEX_FIG7_VARIANTS = ('per_actor', 'fixed_set')
# Ape-X Fig. 12 caption: prioritized lr 0.00025 / 4, uniform lr 0.00025; "For
# both prioritized and uniform, we tried both of these learning rates and
# selected the best" (reproductions/figures.py apex_fig12 selects).
APEX_LR_PRIORITIZED = 0.00025 / 4
APEX_LR_UNIFORM = 0.00025
APEX_FIG12_LEARNING_RATES = (APEX_LR_PRIORITIZED, APEX_LR_UNIFORM)
# The six games of Fig. 2 (right) and Figs. 4-7 are named only in the figure
# panels, not the text: this set is UNVERIFIED (from memory of the panels).
# Fig. 12's nine games are likewise not in the text; we use the same six.
APEX_FIGURE_GAMES = ('beam_rider', 'breakout', 'pong', 'qbert', 'seaquest',
                     'space_invaders')

# Ape-X DPG Sec. 4.2: "With 64 actors on this domain, we obtain ~14K total FPS"
# (no action repeat); Fig. 3 varies the actor count (values UNVERIFIED: we
# use powers of two up to 64). Run length NOT STATED: Fig. 3 beats "a
# standard DDPG baseline trained for over 10 times longer" (5 days), so Ape-X
# DPG ran at most 5 days / 10 = 12 h.
DPG_ACTORS = (8, 16, 32, 64)
DPG_FPS_PER_ACTOR = 14_000 / 64
DPG_HOURS = 12
# Ape-X App. D: "fixed replay capacity of 10^6".
DPG_REPLAY = 1_000_000

# IMPALA Table 1 (DMLab, shallow model): IMPALA rows. Single machine "IMPALA
# 48 actors"; distributed 150 actors (80K FPS), "optimised" 375 (200K), and
# "optimised batch 128" 500 actors (250K). Batch 32 unless stated (caption).
# (row, actors, batch, central inference): Table 1's IMPALA rows. "dyn.
# batch" is the single machine's forward passes batched across actors.
IMPALA_TABLE1_ROWS = (('single_machine', 48, 32, False),
                      ('single_machine_dyn_batch', 48, 32, True),
                      ('distributed', 150, 32, False),
                      ('optimised', 375, 32, False),
                      ('optimised_batch128', 500, 128, False))
# Run length for a throughput row NOT STATED; 50M frames is our choice: a few
# minutes at 80-250K FPS, enough for the steady state figures.py takes.
IMPALA_TABLE1_FRAMES = 50_000_000
# IMPALA Sec. 5.3.2: "per-game experts, trained for 200 million frames"; the
# multi-task agent "200 million frames per game or a total of 11.4 billion".
IMPALA_FRAMES_PER_GAME = 200_000_000
# IMPALA: Atari actor count NOT STATED (App. G does not give it). We
# use 48 (Table 1's single-learner row) for experts and 5 per game for the
# multi-task agent (DMLab-30's "IMPALA, deep with 150 actors" = 5 per task).
IMPALA_EXPERT_ACTORS = 48
IMPALA_MULTITASK_ACTORS_PER_GAME = 5
# IMPALA Sec. 5.2.2: the four corrections; "we draw 50% of the items in each
# batch uniformly at random from the replay buffer". Same names as
# agents/impala/vtrace.CORRECTIONS (not imported: it pulls in TensorFlow).
IMPALA_CORRECTIONS = ('vtrace', 'one_step_is', 'epsilon_correction', 'none')
IMPALA_REPLAY_FRACTION = 0.5
# Table 2 uses 5 DMLab tasks (not installable here); our Atari stand-ins are
# our choice: five games with dense rewards where a correction shows early.
IMPALA_TABLE2_GAMES = ('pong', 'breakout', 'seaquest', 'space_invaders',
                       'beam_rider')
# Table D.3 (fixed hyperparameters): "Experience Replay (Section 5.2.2):
# capacity 10,000 trajectories, sampling uniform, removal first-in-first-out".
# The same in both profiles: a trajectory stores 21 uint8 84x84x4 frame
# stacks (593 KB before Reverb's compression), so 10,000 hold 5.9 GB, within
# the local machine's 24 GiB.
IMPALA_REPLAY_TRAJECTORIES = 10_000
IMPALA_TRAJECTORY_STEPS = 21
IMPALA_STEP_BYTES = 84 * 84 * 4

# Gorila (Nair et al. 2015, Sec. 5): "the 49 games of Nature DQN", bundled
# mode with "100 separate actor-learner processes" (A3C's description), 31
# parameter server shards (UNVERIFIED: A3C says 30), local replay "1 million
# frames" per actor-learner. Training "~4 days" (Ape-X Table 1); frames NOT
# STATED.
GORILA_GAMES = tuple(g for g in ATARI57_GAMES
                     if g in references.load_paper_scores('dqn_nature'))
GORILA_ACTOR_LEARNERS = 100
GORILA_PARAMETER_SHARDS = 31
GORILA_REPLAY = 1_000_000
GORILA_HOURS = 4 * 24

# --- Local profile (ours: a 2-core, ~24 GiB machine) -------------------------

LOCAL_GAMES = ('pong',)
LOCAL_TASKS = ('humanoid_stand',)
LOCAL_FRAMES = 2_000_000
LOCAL_REPLAY = 100_000
LOCAL_MAX_ACTORS = 4
# IMPALA's local placement hosts 8 of the paper's actors (one environment
# each) per actor process (agents/impala/builder.py LOCAL_ACTORS_PER_NODE):
# a local IMPALA run of n actor processes has 8 n actors.
LOCAL_IMPALA_ACTORS_PER_NODE = 8

# --- Memory estimate ----------------------------------------------------------

# Resident memory of one TF process (an Acme actor measured on this machine).
PROCESS_BASELINE_GB = 0.7
# One Atari transition stores two 84x84x4 observations (start and end state,
# Ape-X App. F), each ~1 KB after PNG compression (Ape-X Sec. 4.1).
ATARI_TRANSITION_BYTES = 2 * 1024
# A control transition: two ~67-float feature vectors (Ape-X App. D) plus
# action/reward: well under 1 KB; 1 KB leaves room for Reverb's overhead.
CONTROL_TRANSITION_BYTES = 1024


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run of an experiment: what it would write and what it would start.

  Attributes:
    config: the dict the run writes into config.json (figures.py contract).
    num_actors: actor processes (Gorila: bundled actor-learners).
    total_frames: environment frames per game (summed over games for one
      multi-task run); None where the paper states only wall-clock time.
    wall_hours: the paper's wall-clock budget where it gives one, else None.
    nodes: node kind -> process count.
    replay_capacity: transitions held in replay summed over replay stores (0
      for none), the main memory cost; for IMPALA, stored steps (21 frame
      stacks per trajectory).
    transition_bytes: bytes per stored transition (or IMPALA step), for the
      memory estimate.
  """
  config: Mapping[str, Any]
  num_actors: int
  total_frames: Optional[int]
  wall_hours: Optional[float]
  nodes: Mapping[str, int]
  replay_capacity: int
  transition_bytes: int = ATARI_TRANSITION_BYTES

  @property
  def name(self) -> str:
    c = self.config
    games = c['games']
    parts = [c['agent'], '+'.join(games) if len(games) <= 3
             else f'{len(games)}games']
    for key in ('num_actors', 'replay_capacity', 'transition_copies',
                'epsilon_variant', 'prioritized', 'learning_rate',
                'architecture', 'correction', 'replay_mixing', 'variant'):
      if key in c and key in _VARIED.get(c.get('experiment'), ()):
        parts.append(f'{key}={c[key]}')
    return ' '.join(parts)


def estimate_memory_gb(run_spec: RunSpec) -> float:
  """A rough resident-memory estimate of one run, in GB (an ESTIMATE).

  Why: the local profile must fit a 24 GiB machine, and a paper-profile plan
  should say up front that it needs a cluster. The model is deliberately
  simple: every node is a TF process of ~0.7 GB (measured for Acme actors
  here), plus replay = capacity x bytes per transition (Atari: two ~1 KB
  PNG-compressed 84x84x4 observations). It ignores the learner's batches and
  accelerator memory, Reverb's per-item overhead and the OS page cache, so
  treat it as a lower bound with the right order of magnitude.

  Args:
    run_spec: the run.

  Returns:
    Estimated GB (1e9 bytes) across all the run's processes.
  """
  processes = sum(run_spec.nodes.values())
  replay_gb = run_spec.replay_capacity * run_spec.transition_bytes / 1e9
  return processes * PROCESS_BASELINE_GB + replay_gb


@dataclasses.dataclass(frozen=True)
class Experiment:
  """One paper table or figure, as the runs that reproduce it."""
  name: str
  paper: str            # paper and section/figure/table cited
  description: str
  agent: str            # one of AGENTS
  figure: Optional[str]  # the reproductions.figures name that draws it
  paper_games: Tuple[str, ...]
  build: Callable[[str, Tuple[str, ...]], List[RunSpec]] = dataclasses.field(
      repr=False)
  varied: Tuple[str, ...] = ()

  def valid_games(self) -> Tuple[str, ...]:
    return CONTROL_TASKS if self.agent == 'apex_dpg' else ATARI57_GAMES

  def default_games(self, profile: str) -> Tuple[str, ...]:
    if profile == 'paper':
      return self.paper_games
    return LOCAL_TASKS if self.agent == 'apex_dpg' else LOCAL_GAMES

  def runs(self, profile: str,
           games: Optional[Sequence[str]] = None) -> List[RunSpec]:
    """The runs of this experiment under `profile` ('paper' or 'local').

    Args:
      profile: 'paper' (the paper's scale) or 'local' (2-core machine).
      games: game (or, for Ape-X DPG, control task) names; default: the
        paper's set for 'paper', one game for 'local'.

    Returns:
      The run specs, in launch order.

    Raises:
      ValueError: unknown profile or game, naming the valid choices.
    """
    validate_profile(profile)
    games = (self.default_games(profile) if games is None
             else self.validate_games(games))
    return self.build(profile, tuple(games))

  def validate_games(self, games: Sequence[str]) -> Tuple[str, ...]:
    valid = self.valid_games()
    kind = 'control task' if self.agent == 'apex_dpg' else 'Atari game'
    if isinstance(games, str) or not games:
      raise ValueError(f'games must be a non-empty list of {kind} names; '
                       f'valid: {", ".join(valid)}.')
    for game in games:
      if game not in valid:
        close = difflib.get_close_matches(str(game), valid, n=2)
        hint = (f' Did you mean {" or ".join(repr(c) for c in close)}?'
                if close else '')
        raise ValueError(f'Unknown {kind} {game!r} for {self.name}.{hint} '
                         f'Valid choices: {", ".join(valid)}.')
    return tuple(games)


def validate_profile(profile: str) -> str:
  if profile not in PROFILES:
    raise ValueError(f'Unknown profile {profile!r}; valid choices: '
                     f'{", ".join(PROFILES)}.')
  return profile


# --- Builders -----------------------------------------------------------------

_VARIED: Dict[str, Tuple[str, ...]] = {}


def _config(experiment: str, agent: str, games: Sequence[str], profile: str,
            seed: int = 0, **keys: Any) -> Dict[str, Any]:
  return dict(agent=agent, experiment=experiment, games=list(games),
              profile=profile, seed=seed, **keys)


def _apex_run(experiment: str, profile: str, game: str, num_actors: int,
              replay_capacity: int, frames: Optional[int],
              hours: Optional[float], transition_copies: int = 1,
              epsilon_variant: str = 'per_actor', prioritized: bool = True,
              learning_rate: Optional[float] = None) -> RunSpec:
  """One Ape-X DQN run: 1 replay, 1 learner, N actors (Ape-X Fig. 1).

  The learning rate defaults to Fig. 12's for the replay kind.
  """
  if learning_rate is None:
    learning_rate = APEX_LR_PRIORITIZED if prioritized else APEX_LR_UNIFORM
  config = _config(
      experiment, 'apex_dqn', [game], profile, num_actors=num_actors,
      replay_capacity=replay_capacity, transition_copies=transition_copies,
      epsilon_variant=epsilon_variant, prioritized=prioritized,
      learning_rate=learning_rate)
  return RunSpec(config=config, num_actors=num_actors, total_frames=frames,
                 wall_hours=hours, replay_capacity=replay_capacity,
                 nodes=dict(replay=1, learner=1, actors=num_actors,
                            evaluator=1, counter=1, supervisor=1))


def _apex_hours_frames(num_actors: int, hours: float) -> int:
  """Frames N actors make in `hours` at Ape-X's ~139 FPS/actor (Sec. 4.1)."""
  return int(APEX_FPS_PER_ACTOR * num_actors * hours * 3600)


def _apex_table1(profile, games):
  if profile == 'paper':
    return [_apex_run('apex_table1', profile, g, APEX_ACTORS, APEX_REPLAY,
                      APEX_FRAMES, APEX_DAYS * 24) for g in games]
  # The local profile's actor count (ApeXDQNConfig.local), so that Table 1
  # and a plain local run are the same program.
  return [_apex_run('apex_table1', profile, g, LOCAL_MAX_ACTORS, LOCAL_REPLAY,
                    LOCAL_FRAMES, None) for g in games]


def _apex_fig2(profile, games):
  return [dataclasses.replace(r, config={**r.config, 'experiment': 'apex_fig2'})
          for r in _apex_table1(profile, games)]


def _apex_actor_sweep(name, counts_paper, counts_local, prioritized=(True,),
                      learning_rates=(None,)):
  """Runs per game x actor count x replay kind x learning rate (None: the
  replay kind's own, `_apex_run`)."""
  def build(profile, games):
    runs = []
    for g in games:
      for n in (counts_paper if profile == 'paper' else counts_local):
        for p in prioritized:
          for lr in learning_rates:
            if profile == 'paper':
              runs.append(_apex_run(
                  name, profile, g, n, APEX_SCALING_REPLAY,
                  _apex_hours_frames(n, APEX_SCALING_HOURS),
                  APEX_SCALING_HOURS, prioritized=p, learning_rate=lr))
            else:
              runs.append(_apex_run(name, profile, g, n, LOCAL_REPLAY,
                                    LOCAL_FRAMES, None, prioritized=p,
                                    learning_rate=lr))
    return runs
  return build


def _apex_fig5(profile, games):
  if profile == 'paper':
    return [_apex_run('apex_fig5', profile, g, APEX_FIG5_ACTORS, c,
                      _apex_hours_frames(APEX_FIG5_ACTORS, APEX_SCALING_HOURS),
                      APEX_SCALING_HOURS)
            for g in games for c in APEX_FIG5_CAPACITIES]
  # Local: the paper's capacities / 10 at 4 actors (ratios kept, not scale).
  return [_apex_run('apex_fig5', profile, g, LOCAL_MAX_ACTORS, c // 10,
                    LOCAL_FRAMES, None)
          for g in games for c in APEX_FIG5_CAPACITIES]


def _apex_fig6(profile, games):
  if profile == 'paper':
    return [_apex_run('apex_fig6', profile, g, n, APEX_SCALING_REPLAY,
                      _apex_hours_frames(n, APEX_SCALING_HOURS),
                      APEX_SCALING_HOURS, transition_copies=k)
            for g in games for n, k in APEX_FIG6_VARIANTS]
  # Local: 4 actors x 1 copy vs 1 actor x 4 copies: same replacement rate of
  # the replay, less diverse data, as in App. A (ratio 4 instead of 8).
  return [_apex_run('apex_fig6', profile, g, n, LOCAL_REPLAY, LOCAL_FRAMES,
                    None, transition_copies=k)
          for g in games for n, k in ((4, 1), (1, 4))]


def _apex_fig7(profile, games):
  if profile == 'paper':
    return [_apex_run('apex_fig7', profile, g, APEX_FIG7_ACTORS,
                      APEX_SCALING_REPLAY,
                      _apex_hours_frames(APEX_FIG7_ACTORS, APEX_SCALING_HOURS),
                      APEX_SCALING_HOURS, epsilon_variant=v)
            for g in games for v in APEX_FIG7_VARIANTS]
  return [_apex_run('apex_fig7', profile, g, LOCAL_MAX_ACTORS, LOCAL_REPLAY,
                    LOCAL_FRAMES, None, epsilon_variant=v)
          for g in games for v in APEX_FIG7_VARIANTS]


def _apex_fig11(profile, games):
  """Throughput only: one (short) run per actor count on the first game."""
  game = games[0]
  if profile == 'paper':
    # Fig. 11 sweeps the Fig. 4 counts and Table 1's 360 (Sec. 4.1: ~50K FPS).
    # Run length NOT STATED; one hour at ~139 FPS/actor is our choice.
    return [_apex_run('apex_fig11', profile, game, n, APEX_SCALING_REPLAY,
                      _apex_hours_frames(n, 1), 1)
            for n in APEX_SCALING_ACTORS + (APEX_ACTORS,)]
  return [_apex_run('apex_fig11', profile, game, n, LOCAL_REPLAY, 1_000_000,
                    None) for n in range(1, LOCAL_MAX_ACTORS + 1)]


def _apex_dpg(profile, games):
  runs = []
  counts = DPG_ACTORS if profile == 'paper' else (1, 4)
  for task in games:
    for n in counts:
      config = _config('apex_fig3_dpg', 'apex_dpg', [task], profile,
                       num_actors=n,
                       replay_capacity=(DPG_REPLAY if profile == 'paper'
                                        else LOCAL_REPLAY))
      runs.append(RunSpec(
          config=config, num_actors=n,
          total_frames=(int(DPG_FPS_PER_ACTOR * n * DPG_HOURS * 3600)
                        if profile == 'paper' else LOCAL_FRAMES),
          wall_hours=DPG_HOURS if profile == 'paper' else None,
          replay_capacity=config['replay_capacity'],
          transition_bytes=CONTROL_TRANSITION_BYTES,
          nodes=dict(replay=1, learner=1, actors=n, evaluator=1, counter=1,
                     supervisor=1)))
  return runs


def _impala_run(experiment, profile, games, processes, frames,
                architecture='deep', correction='vtrace', replay_mixing=False,
                **extra) -> RunSpec:
  """One IMPALA run: a Reverb queue (+ replay table when mixing), 1 learner.

  `processes` actor nodes; each hosts one of the paper's actors in the paper
  profile, LOCAL_IMPALA_ACTORS_PER_NODE in the local one.
  """
  num_actors = processes * (1 if profile == 'paper' else
                            LOCAL_IMPALA_ACTORS_PER_NODE)
  replay = IMPALA_REPLAY_TRAJECTORIES if replay_mixing else 0
  config = _config(experiment, 'impala', games, profile, num_actors=num_actors,
                   architecture=architecture, correction=correction,
                   replay_mixing=replay_mixing, **extra)
  if replay_mixing:
    config.update(replay_capacity=replay,
                  replay_fraction=IMPALA_REPLAY_FRACTION)
  nodes = dict(replay=1, learner=1, actors=processes, evaluator=1,
               counter=1, supervisor=1)
  if extra.get('central_inference'):
    nodes['inference'] = 1
  return RunSpec(config=config, num_actors=num_actors, total_frames=frames,
                 wall_hours=None,
                 replay_capacity=replay * IMPALA_TRAJECTORY_STEPS,
                 transition_bytes=IMPALA_STEP_BYTES, nodes=nodes)


def _impala_table1(profile, games):
  game = games[0]
  if profile == 'paper':
    return [_impala_run('impala_table1', profile, [game], n,
                        IMPALA_TABLE1_FRAMES, architecture='shallow',
                        variant=row, batch_size=b, central_inference=dyn)
            for row, n, b, dyn in IMPALA_TABLE1_ROWS]
  return [_impala_run('impala_table1', profile, [game], n, 1_000_000,
                      architecture='shallow',
                      variant=f'{n}_actors' + ('_dyn_batch' if dyn else ''),
                      batch_size=32, central_inference=dyn)
          for n, dyn in ((1, False), (2, False), (LOCAL_MAX_ACTORS, False),
                         (LOCAL_MAX_ACTORS, True))]


def _impala_table2(profile, games):
  paper = profile == 'paper'
  return [_impala_run('impala_table2', profile, [g],
                      IMPALA_EXPERT_ACTORS if paper else 2,
                      IMPALA_FRAMES_PER_GAME if paper else LOCAL_FRAMES,
                      architecture='shallow', correction=c, replay_mixing=m)
          for g in games for m in (False, True) for c in IMPALA_CORRECTIONS]


def _impala_table4(profile, games):
  paper = profile == 'paper'
  actors = IMPALA_EXPERT_ACTORS if paper else 2
  frames = IMPALA_FRAMES_PER_GAME if paper else LOCAL_FRAMES
  runs = [_impala_run('impala_table4', profile, [g], actors, frames,
                      architecture=a, variant=f'{a}_expert')
          for a in ('shallow', 'deep') for g in games]
  # Multi-task: ONE deep agent on all games, 200M frames per game (Sec. 5.3.2).
  mt_games = list(games) if paper or len(games) > 1 else ['pong', 'breakout']
  mt_actors = (IMPALA_MULTITASK_ACTORS_PER_GAME * len(mt_games) if paper
               else min(LOCAL_MAX_ACTORS, 2 * len(mt_games)))
  runs.append(_impala_run('impala_table4', profile, mt_games, mt_actors,
                          frames * len(mt_games), architecture='deep',
                          variant='deep_multitask'))
  return runs


def _gorila(profile, games):
  paper = profile == 'paper'
  n = GORILA_ACTOR_LEARNERS if paper else 2
  shards = GORILA_PARAMETER_SHARDS if paper else 1
  per_replay = GORILA_REPLAY if paper else LOCAL_REPLAY // 2
  return [RunSpec(
      config=_config('gorila', 'gorila', [g], profile, num_actors=n,
                     replay_capacity=per_replay, parameter_shards=shards),
      num_actors=n, total_frames=None if paper else LOCAL_FRAMES,
      wall_hours=GORILA_HOURS if paper else None,
      # Bundled mode: each actor-learner holds its own local replay.
      replay_capacity=n * per_replay,
      nodes=dict(parameter_server=shards, actor_learners=n, evaluator=1,
                 counter=1, supervisor=1)) for g in games]


# --- Registry -----------------------------------------------------------------

EXPERIMENTS: Dict[str, Experiment] = {}


def _add(**kwargs) -> None:
  experiment = Experiment(**kwargs)
  EXPERIMENTS[experiment.name] = experiment
  _VARIED[experiment.name] = experiment.varied


_add(name='apex_table1',
     paper='Ape-X Sec. 4.1, Table 1 (median HNS) and Table 2 (57 games)',
     description=('Ape-X DQN, 360 actors, 2M replay, ~5 days / 22.8B frames '
                  'per game, one run per game on all 57 games'),
     agent='apex_dqn', figure='apex_fig2', paper_games=ATARI57_GAMES,
     build=_apex_table1)
_add(name='apex_fig2', paper='Ape-X Sec. 4.1, Fig. 2 (right) and Fig. 9',
     description=('the Table 1 setting on the 6 games of Fig. 2 (right); '
                  'game set from the figure panels, UNVERIFIED'),
     agent='apex_dqn', figure='apex_fig2', paper_games=APEX_FIGURE_GAMES,
     build=_apex_fig2)
_add(name='apex_fig3_dpg', paper='Ape-X Sec. 4.2, Fig. 3, App. D',
     description=('Ape-X DPG on 4 Control Suite tasks, actor counts 8..64 '
                  '(64 actors ~14K FPS), 1M replay, 12 h (DDPG baseline 5 days '
                  '"over 10 times longer")'),
     agent='apex_dpg', figure='apex_fig3', paper_games=CONTROL_TASKS,
     build=_apex_dpg, varied=('num_actors',))
_add(name='apex_fig4', paper='Ape-X Sec. 5, Fig. 4',
     description=('scaling actors 8, 16, 32, 64, 128, 256 for 35 h on 6 games, '
                  'replay fixed at 1M'),
     agent='apex_dqn', figure='apex_fig4', paper_games=APEX_FIGURE_GAMES,
     build=_apex_actor_sweep('apex_fig4', APEX_SCALING_ACTORS, (1, 2, 4)),
     varied=('num_actors',))
_add(name='apex_fig5', paper='Ape-X Sec. 5, Fig. 5',
     description=('replay capacity 250K..2M with 256 actors (~37K FPS); only '
                  '250K is named in the text'),
     agent='apex_dqn', figure='apex_fig5', paper_games=APEX_FIGURE_GAMES,
     build=_apex_fig5, varied=('replay_capacity',))
_add(name='apex_fig6', paper='Ape-X App. A, Fig. 6',
     description=('recency: 256 actors x 1 copy vs 32 actors x 8 copies of '
                  'each transition'),
     agent='apex_dqn', figure='apex_fig6', paper_games=APEX_FIGURE_GAMES,
     build=_apex_fig6, varied=('num_actors', 'transition_copies'))
_add(name='apex_fig7', paper='Ape-X App. B, Fig. 7',
     description=('data-generating policies: per-actor epsilons vs a fixed set '
                  'of 6 epsilons, prioritized replay'),
     agent='apex_dqn', figure='apex_fig7', paper_games=APEX_FIGURE_GAMES,
     build=_apex_fig7, varied=('epsilon_variant',))
_add(name='apex_fig11', paper='Ape-X App. (Fig. 11), Sec. 4.1',
     description=('data-generation speed (frames/s) vs number of actors '
                  '(~139 FPS per actor); short throughput runs on one game'),
     agent='apex_dqn', figure='apex_fig11', paper_games=('pong',),
     build=_apex_fig11, varied=('num_actors',))
_add(name='apex_fig12', paper='Ape-X App. (Fig. 12), App. E',
     description=('prioritized vs uniform replay for 8..256 actors, each '
                  'with both learning rates (0.00025/4 and 0.00025), the '
                  'figure showing the better; Fig. 12 has 9 games not named '
                  'in the text, we use the 6 of Fig. 4'),
     agent='apex_dqn', figure='apex_fig12', paper_games=APEX_FIGURE_GAMES,
     build=_apex_actor_sweep('apex_fig12', APEX_SCALING_ACTORS, (1, 4),
                             prioritized=(True, False),
                             learning_rates=APEX_FIG12_LEARNING_RATES),
     varied=('num_actors', 'prioritized', 'learning_rate'))
_add(name='impala_table1', paper='IMPALA Sec. 5.1, Table 1',
     description=('throughput of the IMPALA rows (48 actors single machine; '
                  '150, 375, 500 actors distributed; shallow model). Run on '
                  'Atari instead of DMLab, which is not installable here, so '
                  'FPS are not comparable to the paper\'s; the A3C / batched '
                  'A2C rows are not agents of this project'),
     agent='impala', figure=None, paper_games=('pong',),
     build=_impala_table1, varied=('num_actors', 'variant'))
_add(name='impala_table2', paper='IMPALA Sec. 5.2.2, Table 2',
     description=('V-trace, 1-step IS, epsilon-correction, no correction, each '
                  'without and with replay (50% of each batch replayed); on 5 '
                  'Atari games instead of 5 DMLab tasks (not installable)'),
     agent='impala', figure='impala_table2', paper_games=IMPALA_TABLE2_GAMES,
     build=_impala_table2, varied=('correction', 'replay_mixing'))
_add(name='impala_table4', paper='IMPALA Sec. 5.3.2, Table 4, App. C.1, G',
     description=('Atari-57: shallow experts, deep experts (200M frames per '
                  'game) and one deep multi-task agent (200M per game, 11.4B '
                  'total)'),
     agent='impala', figure='impala_atari_curves', paper_games=ATARI57_GAMES,
     build=_impala_table4, varied=('architecture', 'variant'))
_add(name='gorila', paper='Gorila (Nair et al. 2015), Sec. 5; Ape-X Table 1',
     description=('bundled mode: 100 actor-learners with local 1M replays, 31 '
                  'parameter-server shards, ~4 days per game, 49 games'),
     agent='gorila', figure='gorila_curves', paper_games=GORILA_GAMES,
     build=_gorila)


def get(name: str) -> Experiment:
  """The experiment called `name`; ValueError naming the valid ones."""
  if name not in EXPERIMENTS:
    close = difflib.get_close_matches(str(name), list(EXPERIMENTS), n=2)
    hint = (f' Did you mean {" or ".join(repr(c) for c in close)}?'
            if close else '')
    raise ValueError(f'Unknown experiment {name!r}.{hint} Valid experiments: '
                     f'{", ".join(EXPERIMENTS)}.')
  return EXPERIMENTS[name]
