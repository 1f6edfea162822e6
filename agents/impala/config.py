"""IMPALA hyperparameters, each cited to the paper (arXiv:1802.01561).

Sections and tables refer to the paper's main text and its appendices (App. D,
App. G / Table G.1, Figure 3), and "[CODE]" to the released code,
github.com/deepmind/scalable_agent. Values the
paper does not state are marked NOT STATED, with the reason for the choice.

The defaults are the Atari experts of Sec. 5.3.2 / Table G.1 (deep network,
no LSTM, minimal action sets, 200M frames per game). Scale is a profile,
never a code path: `ImpalaConfig.paper()` is the single-machine setting of
Table 1 (48 actors), `ImpalaConfig.paper_distributed(n)` the distributed rows
(150 / 375 / 500 actors), `ImpalaConfig.local()` the same agent shrunk to a
2-core / 24 GiB machine with each departure documented.

This module imports only numpy, so launch scripts can read configs cheaply.
The names of the off-policy corrections are repeated here for that reason;
tests/test_impala_learner.py checks that they equal vtrace.CORRECTIONS.
"""

import dataclasses
from typing import Any, Sequence, Tuple

import numpy as np

# agents/impala/vtrace.py CORRECTIONS (Table 2's four methods), without
# importing TensorFlow.
CORRECTIONS = ('vtrace', 'one_step_is', 'epsilon_correction', 'none')
# networks/impala.py NETWORKS: Figure 3's two models and the tests' MLP.
NETWORKS = ('shallow', 'deep', 'mlp')
SHALLOW_VARIANTS = ('a3c', 'nature')
# Table G.1 clips to [-1, 1]; [CODE] also has DMLab-30's asymmetric clipping.
REWARD_CLIPPINGS = ('abs_one', 'soft_asymmetric', 'none')
# App. G: experts use each game's minimal set, the multi-task agent all 18.
ACTION_SETS = ('minimal', 'full')
# agents/optimizers.RMSPROPS (not imported here: it pulls in TensorFlow).
RMSPROP_STYLES = ('tf1', 'pytorch')
# Table 1, "Distributed": IMPALA 150 actors; optimised 375; optimised with
# batch 128, 500.
DISTRIBUTED_NUM_ACTORS = (150, 375, 500)


@dataclasses.dataclass(frozen=True)
class ImpalaConfig:
  """Every IMPALA (Atari) hyperparameter. Defaults are the paper's.

  Construction validates (see `validate`), so an invalid config cannot exist;
  derive variants with `dataclasses.replace` or the profile constructors.
  """

  # --- Actors -------------------------------------------------------------
  # Table 1, "Single-Machine": "IMPALA 48 actors" (48 CPUs). The number of
  # actors of the Atari runs is NOT STATED (App. G); Table 1's single-machine
  # setting is the paper's own default scale.
  # Each actor steps one environment (Sec. 3). How many actors one process
  # hosts is placement, not a paper value: the program's actors_per_node.
  num_actors: int = 48
  # Table G.1: "Unroll length (n) 20". Actors send n + 1 observations: the
  # last of one unroll is the first of the next (Sec. 3, [CODE]).
  unroll_length: int = 20
  # Table G.1: "Action repetitions 4". Counts emulator frames per agent step
  # (frames drive the learning-rate anneal); 1 for non-Atari environments.
  action_repeat: int = 4
  # App. G: "Experts use game-specific action sets"; the multi-task agent
  # "full action set of 18 actions for all games".
  action_set: str = 'minimal'

  # --- Learning rule ------------------------------------------------------
  # Table G.1: "Batch size 32".
  batch_size: int = 32
  # Table G.1: "Discount (gamma) 0.99".
  discount: float = 0.99
  # Table G.1: "Baseline loss scaling 0.5". As in [CODE], the baseline loss
  # itself is 0.5 * sum (v_s - V(x_s))^2, so the squared error is weighted by
  # 0.25 in total (see learning.py).
  baseline_cost: float = 0.5
  # Table G.1: "Entropy regulariser 0.01".
  entropy_cost: float = 0.01
  # Table G.1: "Reward clipping [-1, 1]".
  reward_clipping: str = 'abs_one'
  # Sec. 5.2.2 / Table 2: 'vtrace' (Sec. 4), 'one_step_is', 'epsilon_correction'
  # or 'none' (no correction).
  correction: str = 'vtrace'
  # Sec. 5.2.2: "we clip each importance weight rho_t and c_t at 1 (i.e.
  # c_bar = rho_bar = 1)"; [CODE] also clips the policy-gradient rho at 1.
  clip_rho_threshold: float = 1.0
  clip_pg_rho_threshold: float = 1.0
  clip_c_threshold: float = 1.0
  # Sec. 4.1 Remark 2's lambda; the paper's runs use 1 (eq. 1).
  vtrace_lambda: float = 1.0

  # --- Optimiser (App. G, Table G.1) --------------------------------------
  # Table G.1: "Learning rate 0.0006", "LR schedule: linear anneal to 0 from
  # start to end of training" ([CODE]: polynomial_decay(lr, env_frames,
  # total_frames, 0)).
  learning_rate: float = 0.0006
  # Table G.1: "RMSProp momentum 0.0", "RMSProp epsilon 0.01".
  rmsprop_momentum: float = 0.0
  rmsprop_epsilon: float = 0.01
  # NOT STATED for Atari (App. G lists no decay); [CODE] --decay default 0.99.
  rmsprop_decay: float = 0.99
  # [CODE]: tf.train.RMSPropOptimizer ('tf1': eps inside the root, mean square
  # started at 1). 'pytorch' (eps outside, started at 0) is a diagnostic
  # only, not the paper's (agents/optimizers.py).
  rmsprop_style: str = 'tf1'
  # Table G.1: "Global gradient-norm clip 40.0".
  max_gradient_norm: float = 40.0
  # Sec. 5.3.2: experts are "trained for 200 million frames"; the anneal
  # reaches 0 here (emulator frames, action repeats included, as [CODE]
  # counts them: batch * unroll * repeats per learner step).
  total_frames: int = 200_000_000

  # --- Queue and replay ---------------------------------------------------
  # NOT STATED in the paper. [CODE] puts a FIFOQueue of capacity 1 between
  # actors and learner, with every further actor blocked on its own enqueue
  # (one unroll each). A Reverb queue pays a round trip per item, so it holds
  # one batch: the learner can always take a whole batch while actors refill,
  # and the policy lag stays near [CODE]'s (one batch plus one unroll per
  # blocked actor).
  queue_capacity: int = 32
  # [CODE]: one StagingArea step of prefetch ("adds up to 1 step policy lag").
  prefetch_batches: int = 1
  # Sec. 5.2.2: "In the experience replay experiments we draw 50% of the items
  # in each batch uniformly at random from the replay buffer" (0: no replay,
  # Table 2's "Without Replay" rows; 0.5: "With Replay").
  replay_proportion: float = 0.0
  # Table D.3: "Experience Replay (Section 5.2.2): capacity 10,000
  # trajectories, sampling uniform, removal first-in-first-out".
  replay_capacity: int = 10_000
  queue_table_name: str = 'impala_queue'
  replay_table_name: str = 'impala_replay'

  # --- Network (Figure 3, Sec. 5.3.2, App. G) ------------------------------
  # Sec. 5.3.2: the deep residual network gives the headline Atari experts
  # (Table 4 "IMPALA, deep, experts"); 'shallow' for the shallow rows, 'mlp'
  # for feature observations in tests.
  network: str = 'deep'
  # Figure 3 left has 2 conv layers (see networks/impala.py for 'nature').
  shallow_variant: str = 'a3c'
  # App. G: "All agents trained on Atari are equipped only with a feed
  # forward network and pre-process frames into four stacked frames"; Figure
  # 3 (DMLab) has the LSTM.
  use_lstm: bool = False
  # Figure 3: LSTM of 256 units.
  lstm_size: int = 256
  # Not in the paper: hidden sizes of the 'mlp' torso (tests, Catch).
  mlp_sizes: Tuple[int, ...] = (64, 64)

  # --- Implementation -----------------------------------------------------
  # Sec. 3.1: "compiling parts of the computational graph with XLA". Off in
  # the local profile, where it runs slower on CPU (see `local`).
  jit_compile: bool = True

  # --- Central inference (Table 1, "IMPALA (dyn. batch)") -------------------
  # Sec. 5.1: "For single-machine experiments using GPUs, we use dynamic
  # batching in the forward pass to avoid several batch size 1 forward
  # passes." Off: each actor runs its own forward pass (Table 1's "IMPALA 48
  # actors" row). On: an inference node batches all actors' forward passes
  # (agents/impala/inference.py) and the actors stop fetching parameters.
  central_inference: bool = False
  # NOT STATED (the paper's dynamic batching op is not described): a batch
  # is served once it holds this many environments' observations (0: every
  # environment of every actor) or when its first request has waited
  # `inference_timeout_ms`.
  inference_max_batch: int = 0
  inference_timeout_ms: float = 10.0
  # NOT STATED: how often the inference node asks the learner for a newer
  # parameter version (it fetches the parameters only when there is one).
  inference_refresh_period_s: float = 0.05

  def __post_init__(self):
    # Tuples keep the frozen config hashable when given lists.
    object.__setattr__(self, 'mlp_sizes', tuple(self.mlp_sizes))
    self.validate()

  # --- Derived quantities ---------------------------------------------------
  @property
  def frames_per_learner_step(self) -> int:
    """New emulator frames per update: queue items * unroll * repeats.

    [CODE] counts batch * unroll * action repeats; with replay mixing only
    the queue's share of the batch is new (agents/impala/learning.py).
    """
    return self.queue_batch_size * self.unroll_length * self.action_repeat

  @property
  def replay_batch_size(self) -> int:
    """Trajectories of each batch drawn from the replay table."""
    return int(round(self.batch_size * self.replay_proportion))

  @property
  def queue_batch_size(self) -> int:
    """Trajectories of each batch taken fresh from the queue."""
    return self.batch_size - self.replay_batch_size

  @property
  def use_replay(self) -> bool:
    return self.replay_proportion > 0.0

  @property
  def inference_batch_limit(self) -> int:
    """Environments per central-inference batch (see inference_max_batch)."""
    return self.inference_max_batch or self.num_actors

  @property
  def full_action_space(self) -> bool:
    """For AtariConfig(full_action_space=...)."""
    return self.action_set == 'full'

  # --- Validation -----------------------------------------------------------
  def validate(self) -> None:
    """Raises ValueError naming the first invalid field and what is allowed."""

    def check(condition: bool, field: str, requirement: str):
      if not condition:
        raise ValueError(f'ImpalaConfig.{field} must be {requirement}, got '
                         f'{getattr(self, field)!r}.')

    def is_int(value: Any) -> bool:
      return isinstance(value, (int, np.integer)) and not isinstance(
          value, bool)

    def choice(field: str, choices: Sequence[str], why: str = ''):
      check(getattr(self, field) in choices, field,
            f'one of {", ".join(repr(c) for c in choices)}{why}')

    for field in ('num_actors', 'unroll_length',
                  'action_repeat', 'batch_size', 'total_frames',
                  'queue_capacity', 'replay_capacity', 'lstm_size'):
      check(is_int(getattr(self, field)) and getattr(self, field) >= 1, field,
            'an integer >= 1')
    check(is_int(self.prefetch_batches) and self.prefetch_batches >= 0,
          'prefetch_batches', 'an integer >= 0')
    check(is_int(self.inference_max_batch) and self.inference_max_batch >= 0,
          'inference_max_batch', 'an integer >= 0 (0: all environments)')
    check(self.inference_timeout_ms >= 0.0, 'inference_timeout_ms', '>= 0')
    check(self.inference_refresh_period_s > 0.0, 'inference_refresh_period_s',
          '> 0')
    choice('correction', CORRECTIONS, ' (IMPALA Table 2)')
    choice('network', NETWORKS)
    choice('shallow_variant', SHALLOW_VARIANTS)
    choice('reward_clipping', REWARD_CLIPPINGS)
    choice('action_set', ACTION_SETS)
    choice('rmsprop_style', RMSPROP_STYLES)
    check(0.0 <= self.discount <= 1.0, 'discount', 'in [0, 1]')
    check(self.baseline_cost >= 0.0, 'baseline_cost', '>= 0')
    check(self.entropy_cost >= 0.0, 'entropy_cost', '>= 0')
    for field in ('clip_rho_threshold', 'clip_pg_rho_threshold',
                  'clip_c_threshold'):
      check(getattr(self, field) > 0.0, field, '> 0')
    check(0.0 <= self.vtrace_lambda <= 1.0, 'vtrace_lambda', 'in [0, 1]')
    check(self.learning_rate > 0.0, 'learning_rate', '> 0')
    check(0.0 <= self.rmsprop_decay < 1.0, 'rmsprop_decay', 'in [0, 1)')
    check(self.rmsprop_epsilon > 0.0, 'rmsprop_epsilon', '> 0')
    check(self.rmsprop_momentum >= 0.0, 'rmsprop_momentum', '>= 0')
    check(self.max_gradient_norm > 0.0, 'max_gradient_norm', '> 0')
    check(0.0 <= self.replay_proportion < 1.0, 'replay_proportion',
          'in [0, 1) (0: no replay; 0.5: Table 2 "With Replay")')
    replay_items = self.batch_size * self.replay_proportion
    check(abs(replay_items - round(replay_items)) < 1e-9, 'replay_proportion',
          f'such that batch_size * replay_proportion is a whole number of '
          f'trajectories (batch_size={self.batch_size})')
    check(self.replay_proportion == 0.0 or 1 <= round(replay_items) <
          self.batch_size, 'replay_proportion',
          'such that both the queue and the replay give at least one '
          f'trajectory per batch (batch_size={self.batch_size})')
    check(all(is_int(s) and s >= 1 for s in self.mlp_sizes) and
          len(self.mlp_sizes) >= 1, 'mlp_sizes',
          'a non-empty sequence of integers >= 1')
    check(bool(self.queue_table_name), 'queue_table_name', 'non-empty')
    check(bool(self.replay_table_name) and
          self.replay_table_name != self.queue_table_name,
          'replay_table_name', 'non-empty and unlike queue_table_name')

  # --- Profiles ---------------------------------------------------------
  @classmethod
  def paper(cls, **overrides) -> 'ImpalaConfig':
    """The paper's Atari expert setting on one machine (Table 1: 48 actors)."""
    return cls(**overrides)

  @classmethod
  def paper_distributed(cls, num_actors: int = 150,
                        **overrides) -> 'ImpalaConfig':
    """Table 1's distributed rows: 150, 375 (optimised) or 500 actors.

    Table 1: "IMPALA (optimised) batch 128 | 500 actors"; every other row
    uses batch 32 ("Batched A2C and IMPALA use batch size 32 if not otherwise
    mentioned"), so 500 actors come with batch 128.
    """
    if num_actors not in DISTRIBUTED_NUM_ACTORS:
      raise ValueError(
          f'num_actors must be one of Table 1\'s distributed settings '
          f'{", ".join(map(str, DISTRIBUTED_NUM_ACTORS))}, got {num_actors!r}'
          '; use paper(num_actors=...) for any other count.')
    settings = dict(num_actors=num_actors)
    if num_actors == 500:
      settings['batch_size'] = 128
      settings['queue_capacity'] = 128
    settings.update(overrides)
    return cls(**settings)

  @classmethod
  def local(cls, **overrides) -> 'ImpalaConfig':
    """The same agent shrunk to fit one 2-core, 24 GiB machine.

    Departures from the paper, each because of the machine, not the method:
      num_actors 16: 48 actors cannot run on 2 cores. The local placement
        (agents/impala/builder.py) hosts 8 of them per actor process: 48
        single-environment processes (a TF runtime of ~600 MB each) would
        not fit, and one batched forward pass serving 8 steps is several
        times cheaper per step on a CPU than 8 batch-1 passes. Each actor
        still sends its own unrolls.
      jit_compile False: on a 2-core CPU XLA makes the learner step (batch 32 x
        unroll 20, Atari frames) slower than a plain tf.function, for the
        shallow and the deep network alike, as it does Ape-X's learner.
    Everything else (unroll 20, batch 32, RMSProp, entropy, clipping,
    V-trace, anneal over 200M frames) is the paper's; a program that runs
    fewer frames should set total_frames to its own budget, since the
    learning-rate anneal is defined relative to it.
    """
    settings = dict(
        num_actors=16,
        jit_compile=False,
    )
    settings.update(overrides)
    return cls(**settings)
