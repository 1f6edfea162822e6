"""The IMPALA actor: unrolls the current policy, sends trajectories to the queue.

What the paper asks of an actor (Sec. 3, [CODE] `build_actor`):
  * "At the beginning of each trajectory, an actor updates its own local
    policy mu to the latest learner policy pi and runs it for n steps": a
    blocking parameter fetch before every unroll of n = 20 steps;
  * actions are sampled from softmax(policy logits);
  * it sends "the trajectory of states, actions and rewards ... together with
    the corresponding policy distributions mu(a_t|x_t) and initial LSTM
    state to the learner through a queue"; consecutive unrolls overlap by one
    step, so the learner has the bootstrap observation;
  * the environment is reset as soon as an episode ends, inside an unroll;
    the network's LSTM state is reset there too (networks/impala.py).

Timing within an unroll, as in [CODE]: after the fetch, the actor computes
the policy at x_0 .. x_{n-1} with the fetched parameters and takes a_0 ..
a_{n-1}; x_n is appended (the bootstrap observation, with placeholder
behaviour logits, see agents/impala/queue.py) and the unroll is sent. The
next unroll starts from x_n again: the policy there is computed after the
next fetch. So every action of an unroll comes from the parameters fetched
at its start, and its behaviour logits are exactly the ones it was sampled
from.

Several of the paper's actors per node ("lanes", as in the Ape-X actor): the
actor steps a list of environments in lockstep and batches their forward
passes (one network call serves them all; on CPU that is several times
cheaper per step than batch-1 calls). Each lane keeps its own state
(`Lane`: current observation, last action and reward, episode bookkeeping,
Reverb writer), and sends its own unrolls; the paper's one-environment actor
is the case of a list of one.

Central inference (Table 1's "dyn. batch", agents/impala/inference.py): with
an inference node the actor sends its environments' inputs there at every
step instead of running the network, and fetches no parameters; it records
the logits it was served, with the parameter version that computed them.

Back-pressure: after each unroll the actor waits until the server has
taken its unrolls (a full queue blocks it, as [CODE]'s enqueue does).

Reporting (the shape of ApeXDQNActor's): the counter gets actor_steps (agent
steps of all environments) and actor_episodes after every unroll, from a
background thread so that a stopped counter node never blocks the actor; the
logger gets one row per finished episode (return, raw game score, steps,
frames, steps/s, parameter version).
"""

import collections
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Union

import dm_env
import numpy as np
import reverb
import tree

from agents import node_runtime
from agents.impala import config as config_lib
from agents.impala import queue as queue_lib
from networks import impala as impala_networks


def make_environment(name: str,
                     config: config_lib.ImpalaConfig,
                     seed: Optional[int] = None,
                     evaluation: bool = False) -> dm_env.Environment:
  """An environment for IMPALA actors (or evaluators) by name.

  'atari/<game>': App. G / Table G.1 preprocessing
  (`AtariConfig.impala_training`: clipped rewards, life loss ends the
  episode; `impala_evaluation` for evaluation), the full 18-action set when
  `config.action_set == 'full'` (multi-task), `config.action_repeat` frames
  per action. Anything else ('catch', 'control/...') is built as named.
  """
  from reproductions import environments  # pylint: disable=g-import-not-at-top
  if str(name).startswith('atari/'):
    multi_task = config.full_action_space
    atari = (environments.AtariConfig.impala_evaluation(multi_task)
             if evaluation else
             environments.AtariConfig.impala_training(multi_task))
    return environments.make_environment(
        name, config=atari, seed=seed, action_repeat=config.action_repeat)
  return environments.make_environment(name, seed=seed)


class Lane:
  """One of the paper's actors in this node: its environment and state."""

  def __init__(self, environment: dm_env.Environment,
               writer: queue_lib.UnrollWriter, index: int):
    self.environment = environment
    self.writer = writer
    self.index = index
    # The step the network reads next (x_t and what came with it).
    self.observation = None
    self.first = True
    self.last_action = 0
    self.last_reward = 0.0
    self.discount = 0.0
    # Episode bookkeeping.
    self.episode_return = 0.0
    self.episode_steps = 0
    self.episode_start = time.time()

  def start_episode(self) -> None:
    """Resets the environment; the next step is an episode's first."""
    timestep = self.environment.reset()
    self.observation = timestep.observation
    self.first = True
    self.episode_return = 0.0
    self.episode_steps = 0
    self.episode_start = time.time()

  def step_fields(self, behaviour_logits: np.ndarray,
                  behaviour_version: Optional[int]) -> Dict[str, Any]:
    return queue_lib.make_step(self.observation, self.first, self.last_action,
                               self.last_reward, self.discount,
                               behaviour_logits, behaviour_version)


class ImpalaActor:
  """One IMPALA actor: one or several environments, one network, one queue."""

  def __init__(self,
               environments: Union[dm_env.Environment,
                                   Sequence[dm_env.Environment]],
               network: impala_networks.ImpalaNetwork,
               client: reverb.Client,
               config: config_lib.ImpalaConfig,
               actor_id: int = 0,
               variable_source: Optional[Any] = None,
               counter: Optional[Any] = None,
               logger: Optional[Any] = None,
               frames_per_step: Optional[int] = None,
               seed: Optional[int] = None,
               variable_names: Sequence[str] = ('policy', 'version'),
               wait_slice_ms: int = 1000,
               after_first_unroll: Optional[Callable[[], None]] = None,
               inference: Optional[Any] = None):
    """Builds the actor (and resets its environments).

    Args:
      environments: one dm_env environment or a list of them (stepped in
        lockstep, inference batched).
      network: an ImpalaNetwork of the same architecture as the learner's.
      client: reverb.Client of the server holding the queue (and replay).
      config: the run's ImpalaConfig (unroll length, tables, XLA).
      actor_id: this actor's index (logging, default seed).
      variable_source: where parameters come from before every unroll:
        anything with `get_variables(names)` (the learner, or a Courier
        handle to it) or a callable returning the list of the network's
        variable values. None keeps the current parameters (tests).
      counter: shared counter (`increment(**counts)`), optional.
      logger: per-episode metrics (`write(dict)`), optional.
      frames_per_step: emulator frames per agent step for frame counts;
        defaults to config.action_repeat.
      seed: action-sampling seed; defaults to actor_id.
      variable_names: what to fetch from a `get_variables` source: 'policy'
        first, then optionally 'version' (the learner step, for logging).
      wait_slice_ms: how long each wait on a full queue lasts before the
        actor checks for a stop.
      after_first_unroll: called once, when the first unroll has been sent.
        The program pins the process to its cores there, so that the
        start-up work before it (tracing the policy, the first unroll) may
        use the learner's cores, idle until the first batch arrives.
      inference: central inference (agents/impala/inference.py, or a Courier
        handle to it): when given, every forward pass is its `policy_step`
        and the actor fetches no parameters (`variable_source` is unused).
    """
    config.validate()
    if isinstance(environments, dm_env.Environment):
      environments = [environments]
    environments = list(environments)
    if not environments:
      raise ValueError('ImpalaActor needs at least one environment.')
    self._network = network
    self._client = client
    self._config = config
    self._actor_id = int(actor_id)
    self._variable_source = variable_source
    self._variable_names = list(variable_names)
    if self._variable_names[:1] != ['policy']:
      raise ValueError(f'variable_names must start with "policy", got '
                       f'{variable_names!r}.')
    self._counter = counter
    self._counter_increments = node_runtime.BackgroundIncrements(counter)
    self._logger = logger
    self._frames_per_step = (config.action_repeat if frames_per_step is None
                             else int(frames_per_step))
    self._rng = np.random.default_rng(self._actor_id if seed is None else seed)
    self._stop_event = threading.Event()
    self._after_first_unroll = after_first_unroll
    self._inference = inference

    spec = environments[0].observation_spec()
    num_actions = int(environments[0].action_spec().num_values)
    if num_actions != network.num_actions:
      raise ValueError(f'The environment has {num_actions} actions, the '
                       f'network {network.num_actions}.')
    self._num_actions = num_actions
    impala_networks.create_variables(network, spec)

    tables = queue_lib.table_names(config)
    self._envs = [
        Lane(
            environment,
            queue_lib.UnrollWriter(client, config.unroll_length, tables,
                                   should_stop=self._stop_requested,
                                   wait_slice_ms=wait_slice_ms),
            index)
        for index, environment in enumerate(environments)]
    for env in self._envs:
      env.start_episode()
    self._state = tree.map_structure(lambda x: x.numpy(),
                                     network.initial_state(len(self._envs)))

    self._policy_step = impala_networks.make_policy_step(network,
                                                         config.jit_compile)
    self._assign = impala_networks.make_assign(network)

    self._steps = 0
    self._episodes = 0
    self._unrolls = 0
    self._episodes_this_unroll = 0
    self._parameter_version: Optional[int] = None
    self._recent_returns: Deque[float] = collections.deque(maxlen=100)

  # --- Properties -----------------------------------------------------------

  @property
  def environments(self) -> List[Lane]:
    return self._envs

  @property
  def parameter_version(self) -> Optional[int]:
    """The learner step of the parameters in use (if the source gives it)."""
    return self._parameter_version

  @property
  def num_steps(self) -> int:
    """Agent steps taken, all environments together."""
    return self._steps

  # --- Parameters -----------------------------------------------------------

  def update_parameters(self) -> None:
    """Fetches the learner's parameters (blocking; start of every unroll)."""
    source = self._variable_source
    if source is None or self._inference is not None:
      return
    if hasattr(source, 'get_variables'):
      fetched = source.get_variables(self._variable_names)
      values = fetched[0]
      if 'version' in self._variable_names:
        version = fetched[self._variable_names.index('version')]
        self._parameter_version = int(np.asarray(version[0]))
    else:
      values = source()
    if len(values) != len(self._network.variables):
      raise ValueError(f'The variable source gave {len(values)} arrays for '
                       f'{len(self._network.variables)} network variables.')
    self._assign([np.asarray(v) for v in values])

  # --- Acting ---------------------------------------------------------------

  def _sample(self, logits: np.ndarray) -> np.ndarray:
    """One action per row of logits, from softmax(logits)."""
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    cumulative = np.cumsum(probs, axis=-1)
    u = self._rng.random(len(logits)) * cumulative[:, -1]
    actions = (cumulative <= u[:, None]).sum(axis=-1)
    return np.minimum(actions, self._num_actions - 1).astype(np.int32)

  def _inputs(self):
    envs = self._envs
    return (np.stack([e.observation for e in envs]),
            np.array([e.first for e in envs], np.bool_),
            np.array([e.last_action for e in envs], np.int32),
            np.array([e.last_reward for e in envs], np.float32))

  def _core_state(self, index: int) -> Any:
    return tree.map_structure(lambda x: x[index], self._state)

  def _finish_episode(self, env: Lane, timestep) -> None:
    self._episodes += 1
    self._episodes_this_unroll += 1
    self._recent_returns.append(env.episode_return)
    environment = env.environment
    frames = getattr(environment, 'episode_frames',
                     env.episode_steps * self._frames_per_step)
    result = {
        'actor_id': self._actor_id,
        'environment_index': env.index,
        'actor_steps': self._steps,
        'episode_return': env.episode_return,
        'episode_raw_return': float(getattr(environment, 'episode_raw_return',
                                            env.episode_return)),
        'episode_steps': env.episode_steps,
        'episode_frames': int(frames),
        'game_over': bool(getattr(environment, 'game_over', True)),
        'truncated': bool(timestep.discount > 0.0),
        'steps_per_s': env.episode_steps / max(
            time.time() - env.episode_start, 1e-9),
        'parameter_version': self._parameter_version,
    }
    if self._logger is not None:
      self._logger.write(result)

  def _act(self) -> None:
    """Policy at every environment's x_t, append step t, take a_t."""
    observation, first, last_action, last_reward = self._inputs()
    if self._inference is not None:
      logits, next_state, version = self._inference.policy_step(
          observation, first, last_action, last_reward, self._state)
      self._parameter_version = int(version)
      # Over Courier a namedtuple state comes back as a plain tuple.
      next_state = tree.unflatten_as(self._state, tree.flatten(next_state))
    else:
      logits, next_state = self._policy_step(observation, first, last_action,
                                             last_reward, self._state)
      logits = logits.numpy()
    actions = self._sample(logits)
    for i, env in enumerate(self._envs):
      env.writer.append(env.step_fields(logits[i], self._parameter_version),
                        self._core_state(i))
    for env, action in zip(self._envs, actions):
      timestep = env.environment.step(int(action))
      reward = float(timestep.reward)
      env.episode_return += reward
      env.episode_steps += 1
      env.last_action = int(action)
      env.last_reward = reward
      if timestep.last():
        # Termination and truncation alike: the next observation is the
        # reset one, so there is nothing to bootstrap from.
        self._finish_episode(env, timestep)
        env.discount = 0.0
        env.start_episode()
      else:
        env.discount = float(timestep.discount)
        env.observation = timestep.observation
        env.first = False
    self._state = tree.map_structure(np.asarray, next_state)
    self._steps += len(self._envs)

  def run_unroll(self) -> bool:
    """Fetch parameters, n steps in every environment, send the unrolls.

    Returns False if a stop came while waiting on a full queue (the unrolls
    are then still pending and go out with the next call, if any).
    """
    if any(env.writer.steps_in_unroll for env in self._envs):
      # A previous call was stopped while its unrolls were pending.
      if not all(env.writer.wait() for env in self._envs):
        return False
    self.update_parameters()
    self._episodes_this_unroll = 0
    steps_before = self._steps
    for _ in range(self._config.unroll_length):
      self._act()
    # x_n: the bootstrap observation, closes the unroll; its behaviour logits
    # are computed next unroll, after the next fetch.
    placeholder = np.zeros([self._num_actions], np.float32)
    for i, env in enumerate(self._envs):
      env.writer.append(env.step_fields(placeholder, None),
                        self._core_state(i))
    sent = all([env.writer.wait() for env in self._envs])
    self._unrolls += 1
    if self._unrolls == 1 and self._after_first_unroll is not None:
      self._after_first_unroll()
    if self._counter is not None:
      self._counter_increments.increment(
          actor_steps=self._steps - steps_before,
          actor_episodes=self._episodes_this_unroll)
    return sent

  def _stop_requested(self) -> bool:
    return self._stop_event.is_set() or node_runtime.launchpad_stop_requested()

  def stop(self) -> None:
    """Asks run() to return (from another thread, e.g. tests)."""
    self._stop_event.set()

  def run(self, num_steps: Optional[int] = None) -> None:
    """Unrolls until a stop (Launchpad or stop()) or >= `num_steps` steps.

    `num_steps` counts agent steps of all environments together, rounded up
    to whole unrolls. The Launchpad node entry point calls run().
    """
    start = self._steps
    while not self._stop_requested():
      if num_steps is not None and self._steps - start >= num_steps:
        break
      if not self.run_unroll():
        break

  def flush_counter(self, timeout_s: float = 5.0) -> bool:
    """Waits until the counts reported so far reached the counter."""
    return self._counter_increments.flush(timeout_s)

  def close(self) -> None:
    """Closes the Reverb writers (pending unrolls are dropped)."""
    for env in self._envs:
      env.writer.close()

  # --- Reporting ------------------------------------------------------------

  def report(self) -> Dict[str, Any]:
    recent = list(self._recent_returns)
    return {'actor_id': self._actor_id,
            'environments': len(self._envs),
            'steps': self._steps,
            'frames': self._steps * self._frames_per_step,
            'episodes': self._episodes,
            'unrolls': self._unrolls,
            'items_sent': sum(env.writer.items_written for env in self._envs),
            'parameter_version': self._parameter_version,
            'recent_mean_return': float(np.mean(recent)) if recent else None}
