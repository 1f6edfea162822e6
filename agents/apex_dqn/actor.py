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

Placement: one `ApeXDQNActor` may host several of the paper's actors
("lanes"), each with its own environment, epsilon, n-step accumulator,
100-transition buffer, episode statistics and provenance. The paper gives
each actor a machine and a batch-1 forward pass; here the lanes of one process
share a single forward pass over their current states, because a TF runtime
per actor costs ~550 MB and a batch-1 pass is mostly overhead on a CPU. With
one lane (the default) this is exactly the paper's actor. Lanes step in
lockstep, so they share the parameter refresh (every 400 frames of each lane).

Sending is asynchronous: while a lane's batch k is in flight, the lane fills
batch k+1; if batch k is still in flight when k+1 is full (100 transitions
buffered), the process waits. That is the paper's bound on actor memory and
its back-pressure.
"""

import collections
import concurrent.futures
import dataclasses
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Union

import dm_env
import numpy as np
import reverb
import tensorflow as tf

from agents.apex_dqn import config as config_lib
from agents.apex_dqn import replay
from agents.apex_dqn import targets
from agents.replay import png
from agents.replay import prioritized


@dataclasses.dataclass
class Lane:
  """One of the paper's actors: its environment and everything it owns."""
  actor_id: int
  environment: dm_env.Environment
  epsilon: float
  rng: np.random.Generator
  accumulator: targets.NStepAccumulator
  pending: List[targets.NStepTransition] = dataclasses.field(
      default_factory=list)
  in_flight: Optional[concurrent.futures.Future] = None
  timestep: Optional[dm_env.TimeStep] = None
  episode_return: float = 0.0
  episode_steps: int = 0
  episode_start: float = 0.0
  steps: int = 0
  episodes: int = 0
  items_sent: int = 0
  send_failures: int = 0
  recent_returns: Deque[float] = dataclasses.field(
      default_factory=lambda: collections.deque(maxlen=100))


class ApeXDQNActor:
  """Ape-X DQN actors of one process: one lane by default, as in the paper."""

  def __init__(self,
               environment: Union[dm_env.Environment,
                                  Sequence[dm_env.Environment]],
               network: Any,
               replay_client: reverb.Client,
               config: config_lib.ApeXDQNConfig,
               actor_id: Union[int, Sequence[int]],
               variable_source: Optional[Any] = None,
               counter: Optional[Any] = None,
               logger: Optional[Any] = None,
               frames_per_step: Optional[int] = None,
               seed: Optional[int] = None,
               send_timeout_s: float = 10.0):
    """Builds the actor.

    Args:
      environment: a dm_env environment, or one per lane (rewards already
        clipped for training if the protocol says so: the environment owns
        preprocessing). All lanes must share specs.
      network: Sonnet Q-network mapping a batch of observations to [B, A].
      replay_client: client of the Reverb server holding
        `config.replay_table_name`.
      config: the run's ApeXDQNConfig (epsilon schedule, n, gamma, buffering,
        compression, parameter refresh period).
      actor_id: i in 0..N-1, or one per environment; fixes each lane's epsilon
        and the provenance of its items.
      variable_source: the learner (anything with `get_variables(names)`);
        None keeps the initial parameters (tests).
      counter: shared counter (`increment(**counts)`), optional.
      logger: per-episode metrics (`write(dict)`), optional; each row names
        its actor and epsilon, so the greediest actor's curve can be drawn.
      frames_per_step: emulator frames per agent step for frame counts
        (action repeat); defaults to config.action_repeat.
      seed: exploration RNG seed of the first lane (lane k: seed + k);
        defaults to the lane's actor_id.
      send_timeout_s: how long a batch may take to reach the replay before
        it is dropped (replay down or restarting; App. F).
    """
    environments = (list(environment) if isinstance(environment, (list, tuple))
                    else [environment])
    actor_ids = ([int(actor_id)] if np.ndim(actor_id) == 0
                 else [int(i) for i in actor_id])
    if len(environments) != len(actor_ids):
      raise ValueError(f'{len(environments)} environments for '
                       f'{len(actor_ids)} actor ids: give one id per '
                       'environment')
    for i in actor_ids:
      if not 0 <= i < config.num_actors:
        raise ValueError(
            f'actor_id {i} outside 0..{config.num_actors - 1}')
    if len(set(actor_ids)) != len(actor_ids):
      raise ValueError(f'actor ids must be distinct, got {actor_ids}')
    self._network = network
    self._batch_sender = prioritized.BatchSender(
        replay_client, config.replay_table_name, timeout_s=send_timeout_s)
    self._config = config
    self._counter = counter
    self._logger = logger
    self._frames_per_step = (config.action_repeat if frames_per_step is None
                             else frames_per_step)
    self._lanes = [
        Lane(actor_id=i, environment=env,
              epsilon=float(config.actor_epsilon(i)),
              rng=np.random.default_rng(i if seed is None else seed + k),
              accumulator=targets.NStepAccumulator(config.n_step,
                                                   config.discount))
        for k, (i, env) in enumerate(zip(actor_ids, environments))]

    spec = environments[0].observation_spec()
    self._num_actions = int(environments[0].action_spec().num_values)
    self._observation_shape = tuple(spec.shape)
    self._compress = bool(config.compress_observations)
    network(tf.zeros((1,) + self._observation_shape, spec.dtype))

    @tf.function(jit_compile=config.jit_compile)
    def q_values(observations):
      return self._network(observations)
    self._q_values = q_values

    self._variable_client = None
    # The learner step of the parameters in use (-1 until the first fetch).
    self._parameter_version = tf.Variable(-1, dtype=tf.int64,
                                          trainable=False)
    if variable_source is not None:
      from acme.tf import variable_utils  # pylint: disable=g-import-not-at-top
      self._variable_client = variable_utils.VariableClient(
          variable_source, {'policy': network.variables,
                            'version': [self._parameter_version]},
          update_period=config.actor_update_period_steps)

    self._sender = concurrent.futures.ThreadPoolExecutor(
        min(len(self._lanes), 4),
        thread_name_prefix=f'actor{actor_ids[0]}_sender')
    self._q = None  # [lanes, A]: Q-values at each lane's current state
    self._unreported_steps = 0

  # --- Properties -----------------------------------------------------------

  @property
  def epsilon(self) -> float:
    """The first lane's epsilon (the only one for a one-lane actor)."""
    return self._lanes[0].epsilon

  @property
  def actor_ids(self) -> List[int]:
    return [lane.actor_id for lane in self._lanes]

  # --- Acting ---------------------------------------------------------------

  def _encode(self, observation: np.ndarray) -> Any:
    return png.encode_observation(observation) if self._compress else observation

  def _select_action(self, lane: Lane, q_values: np.ndarray) -> int:
    if lane.rng.random() < lane.epsilon:
      return int(lane.rng.integers(self._num_actions))
    return int(np.argmax(q_values))

  def _forward(self) -> np.ndarray:
    observations = np.stack([lane.timestep.observation for lane in self._lanes])
    return self._q_values(observations).numpy()

  def _begin_episodes(self, lanes: Sequence[Lane]) -> None:
    for lane in lanes:
      lane.timestep = lane.environment.reset()
      lane.episode_return, lane.episode_steps = 0.0, 0
      lane.episode_start = time.time()

  def _start_accumulators(self, indices: Sequence[int]) -> None:
    for k in indices:
      lane = self._lanes[k]
      lane.accumulator.start(self._encode(lane.timestep.observation),
                             extras=self._q[k])

  def step(self, max_episode_steps: Optional[int] = None
           ) -> List[Dict[str, Any]]:
    """Every lane acts once; returns the results of episodes that ended.

    A lane whose episode ended (or reached `max_episode_steps`, which
    truncates it with a bootstrap) starts its next episode in the same call,
    so the shared forward pass always covers every lane.
    """
    if self._q is None:
      self._begin_episodes(self._lanes)
      self._q = self._forward()
      self._start_accumulators(range(len(self._lanes)))
    actions = []
    for k, lane in enumerate(self._lanes):
      actions.append(self._select_action(lane, self._q[k]))
      lane.timestep = lane.environment.step(actions[k])
      lane.episode_return += float(lane.timestep.reward)
      lane.episode_steps += 1
    self._unreported_steps += len(self._lanes)
    q = self._forward()
    finished, results = [], []
    for k, lane in enumerate(self._lanes):
      timestep = lane.timestep
      truncated = (max_episode_steps is not None and not timestep.last()
                   and lane.episode_steps >= max_episode_steps)
      emitted = lane.accumulator.step(
          actions[k], float(timestep.reward),
          float(timestep.discount), self._encode(timestep.observation),
          next_extras=q[k], last=timestep.last())
      if truncated:
        emitted = list(emitted) + list(lane.accumulator.flush())
      self._add(lane, emitted)
      lane.steps += 1
      if timestep.last() or truncated:
        results.append(self._end_episode(lane))
        finished.append(k)
    self._q = q
    self._after_step()
    if finished:
      self._begin_episodes([self._lanes[k] for k in finished])
      fresh = self._forward()
      # A new array: buffered transitions hold views of the old one's rows
      # (their bootstrap Q-values, for the initial priorities at send time).
      self._q = self._q.copy()
      self._q[finished] = fresh[finished]
      self._start_accumulators(finished)
    return results

  def _end_episode(self, lane: Lane) -> Dict[str, Any]:
    lane.episodes += 1
    lane.recent_returns.append(lane.episode_return)
    env = lane.environment
    raw_return = getattr(env, 'episode_raw_return', lane.episode_return)
    frames = getattr(env, 'episode_frames',
                     lane.episode_steps * self._frames_per_step)
    result = {'actor_id': lane.actor_id, 'epsilon': lane.epsilon,
              'episode_return': lane.episode_return,
              'episode_raw_return': float(raw_return),
              'episode_steps': lane.episode_steps,
              'episode_frames': int(frames),
              'steps_per_s': lane.episode_steps / max(
                  time.time() - lane.episode_start, 1e-9)}
    if self._counter is not None:
      self._counter.increment(actor_steps=self._unreported_steps,
                              actor_episodes=1)
      self._unreported_steps = 0
    if self._logger is not None:
      self._logger.write({'actor_steps': lane.steps, **result})
    return result

  def run_episode(self, max_steps: Optional[int] = None,
                  should_stop: Callable[[], bool] = lambda: False
                  ) -> Dict[str, Any]:
    """Plays one episode of a one-lane actor (or `max_steps` of it)."""
    if len(self._lanes) != 1:
      raise ValueError('run_episode is for a one-lane actor; an actor with '
                       f'{len(self._lanes)} lanes steps them with step()')
    while True:
      results = self.step(max_episode_steps=max_steps)
      if results:
        return results[0]
      if self._lanes[0].episode_steps % 100 == 0 and should_stop():
        return self._truncate(self._lanes[0])

  def _truncate(self, lane: Lane) -> Dict[str, Any]:
    """Ends the running episode early; its tail bootstraps."""
    self._add(lane, lane.accumulator.flush())
    result = self._end_episode(lane)
    self._q = None
    return result

  def _after_step(self) -> None:
    if self._variable_client is not None:
      self._variable_client.update()
    period = self._config.actor_update_period_steps
    if self._counter is not None and self._unreported_steps >= period:
      self._counter.increment(actor_steps=self._unreported_steps)
      self._unreported_steps = 0

  def update_parameters(self) -> None:
    """Fetches the learner's parameters and their version now (blocking)."""
    if self._variable_client is not None:
      self._variable_client.update_and_wait()

  def run(self) -> None:
    """Acts until the program stops (Launchpad node entry point)."""
    import launchpad as lp  # pylint: disable=g-import-not-at-top
    self.update_parameters()
    steps = 0
    while True:
      self.step(max_episode_steps=self._config.max_episode_steps)
      steps += 1
      if steps % 100 == 0 and lp.wait_for_stop(0):
        break
    self.flush()

  # --- Sending --------------------------------------------------------------

  def _add(self, lane: Lane,
           transitions: Sequence[targets.NStepTransition]) -> None:
    lane.pending.extend(transitions)
    batch = self._config.actor_send_batch_size
    while len(lane.pending) >= batch:
      self._send(lane, lane.pending[:batch])
      del lane.pending[:batch]

  def wait_for_sends(self) -> None:
    """Blocks until every batch in flight has reached the replay."""
    for lane in self._lanes:
      if lane.in_flight is not None:
        lane.in_flight.result()
        lane.in_flight = None

  def flush(self) -> None:
    """Sends what is buffered and waits for it (end of run, tests)."""
    for lane in self._lanes:
      if lane.pending:
        self._send(lane, lane.pending)
        lane.pending = []
    self.wait_for_sends()

  def _send(self, lane: Lane,
            transitions: Sequence[targets.NStepTransition]) -> None:
    priorities = self.initial_priorities(transitions)
    version = int(self._parameter_version.numpy())
    items = [replay.from_nstep_transition(t, lane.actor_id, version)
             for t in transitions]
    copies = self._config.transition_copies
    if copies > 1:  # App. A: each transition added k times (Fig. 6)
      items = [item for item in items for _ in range(copies)]
      priorities = np.repeat(priorities, copies)
    if lane.in_flight is not None:
      # Buffer full (one batch in flight, one ready): wait, as the paper's
      # actor does when its 100-transition buffer is full.
      lane.in_flight.result()
    lane.in_flight = self._sender.submit(self._write, lane, items, priorities)

  def _write(self, lane: Lane, items, priorities) -> None:
    """Sends one batch; one that the replay cannot take in time is dropped."""
    if self._batch_sender.send(items, priorities,
                               what=f'actor {lane.actor_id}'):
      lane.items_sent += len(items)
    else:
      lane.send_failures += 1

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
    """Per-lane figures; one lane reports flat, as a single actor."""
    lanes = []
    for lane in self._lanes:
      recent = list(lane.recent_returns)
      lanes.append({'actor_id': lane.actor_id, 'epsilon': lane.epsilon,
                    'steps': lane.steps, 'episodes': lane.episodes,
                    'items_sent': lane.items_sent,
                    'send_failures': lane.send_failures,
                    'recent_mean_return': (float(np.mean(recent)) if recent
                                           else None)})
    if len(lanes) == 1:
      return lanes[0]
    return {'actors': lanes, 'steps': sum(l['steps'] for l in lanes),
            'items_sent': sum(l['items_sent'] for l in lanes)}
