"""The Ape-X DQN actor: acts, computes initial priorities, feeds replay.

What the paper asks of an actor (Horgan et al. 2018):
  * a fixed exploration rate eps_i = 0.4^(1 + 7 i / (N-1)) (Sec. 4.1);
  * n-step transitions (S_t, A_t, R_{t:t+n}, gamma_{t:t+n}, S_{t+n}), truncated
    at episode end (Sec. 3.1, App. F "Adding Data");
  * initial priorities computed by the actor itself, from "the Q-values it
    already computed while acting" (App. F), instead of the learner's
    max-priority trick: delta = G - q(S_t, A_t) with the double-Q bootstrap.
    The actor has no target network, so its own (possibly stale) online
    Q-values serve as both selector and evaluator;
  * a local buffer of up to 100 transitions, sent asynchronously in batches of
    B = 50 (Sec. 4.1);
  * PNG-compressed observations in transit and in storage (App. F);
  * parameters copied from the learner every 400 frames (Sec. 4.1).

How it is built: one Q forward pass per environment step, on the state the
actor is about to act in; that pass serves both the action choice at S_t and,
stored with S_t, the bootstrap when S_t is the S_{t+n} of an earlier
transition. Each frame stack is PNG-encoded once, when first seen, although it
is stored twice (as S_t and as S_{t+n}). Priorities come from
`targets.double_q_td_error`, the very function the learner uses, so for the
same parameters and data they are equal by construction (a test checks it
against an independent computation from replay contents).

The send is a single background thread: while batch k is in flight the actor
fills batch k+1; if batch k is still in flight when k+1 is full (100
transitions buffered), the actor waits. That is the paper's bound on actor
memory and its back-pressure.
"""

import collections
import concurrent.futures
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

import dm_env
import numpy as np
import reverb
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from agents.apex_dqn import replay
from agents.apex_dqn import targets
from agents.replay import png


class ApeXDQNActor:
  """One actor process of Ape-X DQN (one environment, one epsilon)."""

  def __init__(self,
               environment: dm_env.Environment,
               network: Any,
               replay_client: reverb.Client,
               config: config_lib.ApeXDQNConfig,
               actor_id: int,
               variable_source: Optional[Any] = None,
               counter: Optional[Any] = None,
               logger: Optional[Any] = None,
               frames_per_step: Optional[int] = None,
               seed: Optional[int] = None):
    """Builds the actor.

    Args:
      environment: a dm_env environment (rewards already clipped for training
        if the protocol says so: the environment owns preprocessing).
      network: Sonnet Q-network mapping a batch of observations to [B, A].
      replay_client: client of the Reverb server holding
        `config.replay_table_name`.
      config: the run's ApeXDQNConfig (epsilon schedule, n, gamma, buffering,
        compression, parameter refresh period).
      actor_id: i in 0..N-1; fixes epsilon and the provenance of items.
      variable_source: the learner (anything with `get_variables(names)`);
        None keeps the initial parameters (tests).
      counter: shared counter (`increment(**counts)`), optional.
      logger: per-episode metrics (`write(dict)`), optional.
      frames_per_step: emulator frames per agent step for frame counts
        (action repeat); defaults to config.action_repeat.
      seed: exploration RNG seed; defaults to actor_id.
    """
    if not 0 <= actor_id < config.num_actors:
      raise ValueError(f'actor_id {actor_id} outside 0..{config.num_actors - 1}')
    self._environment = environment
    self._network = network
    self._client = replay_client
    self._config = config
    self._actor_id = actor_id
    self._epsilon = float(config.actor_epsilon(actor_id))
    self._counter = counter
    self._logger = logger
    self._frames_per_step = (config.action_repeat if frames_per_step is None
                             else frames_per_step)
    self._rng = np.random.default_rng(actor_id if seed is None else seed)
    self._accumulator = targets.NStepAccumulator(config.n_step, config.discount)

    spec = environment.observation_spec()
    self._num_actions = int(environment.action_spec().num_values)
    self._observation_shape = tuple(spec.shape)
    self._compress = bool(config.compress_observations)
    dummy = tf.zeros((1,) + self._observation_shape, spec.dtype)
    network(dummy)  # creates the variables before any parameter copy

    @tf.function(jit_compile=config.jit_compile)
    def q_values(observation):
      return self._network(tf.expand_dims(observation, 0))[0]
    self._q_values = q_values

    self._variable_client = None
    if variable_source is not None:
      from acme.tf import variable_utils  # pylint: disable=g-import-not-at-top
      self._variable_client = variable_utils.VariableClient(
          variable_source, {'policy': network.variables},
          update_period=config.actor_update_period_steps)

    self._pending: List[targets.NStepTransition] = []
    self._sender = concurrent.futures.ThreadPoolExecutor(
        1, thread_name_prefix=f'actor{actor_id}_sender')
    self._in_flight: Optional[concurrent.futures.Future] = None
    self._steps = 0
    self._episodes = 0
    self._items_sent = 0
    self._unreported_steps = 0
    self._recent_returns: Deque[float] = collections.deque(maxlen=100)
    self._last_priorities: np.ndarray = np.zeros([0])

  # --- Properties -----------------------------------------------------------

  @property
  def epsilon(self) -> float:
    return self._epsilon

  @property
  def last_sent_priorities(self) -> np.ndarray:
    return self._last_priorities

  # --- Acting ---------------------------------------------------------------

  def _encode(self, observation: np.ndarray) -> Any:
    return png.encode_observation(observation) if self._compress else observation

  def _select_action(self, q_values: np.ndarray) -> int:
    if self._rng.random() < self._epsilon:
      return int(self._rng.integers(self._num_actions))
    return int(np.argmax(q_values))

  def run_episode(self, max_steps: Optional[int] = None,
                  should_stop: Callable[[], bool] = lambda: False
                  ) -> Dict[str, float]:
    """Plays one episode (or `max_steps` of it) and feeds replay as it goes."""
    start = time.time()
    timestep = self._environment.reset()
    q = self._q_values(timestep.observation).numpy()
    self._accumulator.start(self._encode(timestep.observation), extras=q)
    episode_return, episode_steps = 0.0, 0
    while not timestep.last():
      action = self._select_action(q)
      timestep = self._environment.step(action)
      q = self._q_values(timestep.observation).numpy()
      emitted = self._accumulator.step(
          action, float(timestep.reward), float(timestep.discount),
          self._encode(timestep.observation), next_extras=q,
          last=timestep.last())
      self._add(emitted)
      episode_return += float(timestep.reward)
      episode_steps += 1
      self._after_step()
      if (max_steps is not None and episode_steps >= max_steps) or (
          episode_steps % 100 == 0 and should_stop()):
        if not timestep.last():
          self._add(self._accumulator.flush())  # truncated, bootstraps
        break
    self._episodes += 1
    self._recent_returns.append(episode_return)
    raw_return = getattr(self._environment, 'episode_raw_return', episode_return)
    frames = getattr(self._environment, 'episode_frames',
                     episode_steps * self._frames_per_step)
    result = {'episode_return': episode_return,
              'episode_raw_return': float(raw_return),
              'episode_steps': episode_steps, 'episode_frames': int(frames),
              'epsilon': self._epsilon,
              'steps_per_s': episode_steps / max(time.time() - start, 1e-9)}
    if self._counter is not None:
      self._counter.increment(actor_steps=self._unreported_steps,
                              actor_episodes=1)
      self._unreported_steps = 0
    if self._logger is not None:
      self._logger.write({'actor_steps': self._steps, **result})
    return result

  def _after_step(self) -> None:
    self._steps += 1
    self._unreported_steps += 1
    if self._variable_client is not None:
      self._variable_client.update()
    period = self._config.actor_update_period_steps
    if self._counter is not None and self._unreported_steps >= period:
      self._counter.increment(actor_steps=self._unreported_steps)
      self._unreported_steps = 0

  def run(self) -> None:
    """Acts until the program stops (Launchpad node entry point)."""
    import launchpad as lp  # pylint: disable=g-import-not-at-top
    if self._variable_client is not None:
      self._variable_client.update_and_wait()
    stop = lambda: lp.wait_for_stop(0)
    while not stop():
      self.run_episode(should_stop=stop)
    self.flush()

  # --- Sending --------------------------------------------------------------

  def _add(self, transitions: Sequence[targets.NStepTransition]) -> None:
    self._pending.extend(transitions)
    batch = self._config.actor_send_batch_size
    while len(self._pending) >= batch:
      self._send(self._pending[:batch])
      del self._pending[:batch]

  def flush(self) -> None:
    """Sends what is buffered and waits for it (end of run, tests)."""
    if self._pending:
      self._send(self._pending)
      self._pending = []
    if self._in_flight is not None:
      self._in_flight.result()
      self._in_flight = None

  def _send(self, transitions: Sequence[targets.NStepTransition]) -> None:
    priorities = self.initial_priorities(transitions)
    self._last_priorities = priorities
    items = [replay.from_nstep_transition(t, self._actor_id)
             for t in transitions]
    if self._in_flight is not None:
      # Buffer full (one batch in flight, one ready): wait, as the paper's
      # actor does when its 100-transition buffer is full.
      self._in_flight.result()
    self._in_flight = self._sender.submit(self._write, items, priorities)

  def _write(self, items, priorities) -> None:
    with self._client.trajectory_writer(num_keep_alive_refs=1) as writer:
      replay.write_transitions(writer, self._config.replay_table_name, items,
                               priorities)
    self._items_sent += len(items)

  def initial_priorities(
      self, transitions: Sequence[targets.NStepTransition]) -> np.ndarray:
    """|delta| with the double-Q bootstrap, from the buffered Q-values (App. F)."""
    q_t = np.stack([t.extras for t in transitions])
    q_next = np.stack([t.next_extras for t in transitions])
    td_error = targets.double_q_td_error(
        q_t, np.array([t.action for t in transitions], np.int32),
        np.array([t.reward for t in transitions], np.float32),
        np.array([t.discount for t in transitions], np.float32),
        q_next, q_next)
    return targets.priorities_from_td_errors(td_error).numpy()

  # --- Reporting ------------------------------------------------------------

  def report(self) -> Dict[str, Any]:
    recent = list(self._recent_returns)
    return {'actor_id': self._actor_id, 'epsilon': self._epsilon,
            'steps': self._steps, 'episodes': self._episodes,
            'items_sent': self._items_sent,
            'recent_mean_return': float(np.mean(recent)) if recent else None}
