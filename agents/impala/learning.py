"""The IMPALA learner (Sec. 3, 4.2, App. D/G of arXiv:1802.01561).

One learner step, on a batch of B trajectories of n + 1 steps
(agents/impala/queue.py describes the layout):
  1. unroll the network over all n + 1 observations (time folded into the
     batch for the torso, Sec. 3.1): logits and V(x_t) for t = 0..n, the
     last value V(x_n) being the bootstrap;
  2. rewards clipped as configured (Table G.1: [-1, 1]); discounts
     gamma * discount[t+1] (0 across an episode end);
  3. log rho_t = log pi(a_t|x_t) - log mu(a_t|x_t) from the learner's and the
     behaviour logits; value targets v_s and policy-gradient advantages from
     `vtrace.compute_targets` with the configured correction (Table 2);
  4. loss, summed over time and batch ("the loss is summed, not averaged",
     App. D; [CODE] `build_learner`):
        pg      = - sum_{s,b} log pi(a_s|x_s) * A_s
                  (log(pi + 1e-6) for the epsilon-correction,
                  `vtrace.policy_gradient_log_probs`)
        baseline = 0.5 * sum_{s,b} (v_s - V(x_s))^2       ([CODE])
        entropy  = sum_{s,b} sum_a pi log pi             (= - entropy)
        total    = pg + baseline_cost * baseline + entropy_cost * entropy
     with baseline_cost 0.5 and entropy_cost 0.01 (Table G.1). The squared
     error thus carries 0.25 in total, exactly as in the released code;
  5. clip the global gradient norm at 40 (Table G.1), RMSProp step with the
     learning rate lr0 * (1 - frames / total_frames), frames counted before
     this step ([CODE]: polynomial_decay on the frame counter that the train
     op then advances by batch * unroll * action repeats; with replay mixing
     only the queue's share of the batch counts, as only it is new).
Steps 1-5 are one `tf.function(jit_compile=config.jit_compile)`.

RMSProp, TF1-style as in [CODE] (uncentered, eps inside the root, the
mean-square slot started at 1): agents/optimizers.py. With eps = 0.01 inside
the root the denominator never drops below 0.1.

Input, failures, checkpoints (network, optimizer slots, step and frame
counters, the shared counter's state), the run loop and the parameter
service are every learner's: agents/replay_feed.py (a stop is seen while the
queue is empty or the server is down; IMPALA states nothing about failures),
agents/learner_runtime.py.
"""

import time
from typing import Any, Callable, Dict, List, Optional

import reverb
import sonnet as snt
import tensorflow as tf
import tree

from agents import learner_runtime
from agents import optimizers
from agents import replay_feed
from agents.impala import config as config_lib
from agents.impala import queue as queue_lib
from agents.impala import vtrace
from networks import impala as impala_networks

# Per-update metrics that the run record averages over each report period
# (a single update's 0/1 "gradient clipped" says little; the fraction does).
PERIOD_MEAN_METRICS = ('total_loss', 'pg_loss', 'baseline_loss',
                       'entropy_loss', 'mean_entropy', 'mean_value_target',
                       'mean_rho', 'rho_clipped_fraction', 'gradient_norm',
                       'gradient_clipped', 'policy_lag')


def clip_rewards(rewards: tf.Tensor, clipping: str) -> tf.Tensor:
  """Table G.1's [-1, 1] clipping, or [CODE]'s DMLab-30 'soft_asymmetric'.

  'soft_asymmetric' is the released code's version (tanh(r/5) scaled by 5,
  negative rewards by a further 0.3), not Figure D.1's printed formula; see
  IMPALA App. D, Table D.3.
  """
  if clipping == 'abs_one':
    return tf.clip_by_value(rewards, -1.0, 1.0)
  if clipping == 'soft_asymmetric':
    squeezed = tf.tanh(rewards / 5.0)
    return tf.where(rewards < 0.0, 0.3 * squeezed, squeezed) * 5.0
  if clipping == 'none':
    return rewards
  raise ValueError(f'Unknown reward clipping {clipping!r}; valid choices: '
                   f'{", ".join(config_lib.REWARD_CLIPPINGS)}.')


def time_major(trajectory: queue_lib.Trajectory) -> queue_lib.Trajectory:
  """[B, T, ...] -> [T, B, ...] for every per-step field (core state as is)."""

  def swap(x):
    x = tf.convert_to_tensor(x)
    return tf.transpose(x, [1, 0] + list(range(2, x.shape.rank)))

  return trajectory._replace(
      **{field: swap(getattr(trajectory, field))
         for field in queue_lib.STEP_FIELDS})


def impala_loss(network: impala_networks.ImpalaNetwork,
                trajectory: queue_lib.Trajectory,
                config: config_lib.ImpalaConfig) -> Dict[str, tf.Tensor]:
  """The IMPALA loss of one batch (see the module docstring, steps 1-4).

  Args:
    network: the learner's network.
    trajectory: time-major batch, per-step fields [n + 1, B, ...].
    config: discount, clipping, correction, thresholds and loss weights.

  Returns:
    total_loss, pg_loss, baseline_loss, entropy_loss (all summed over time
    and batch), plus diagnostics: the mean entropy, the mean value target,
    the mean rho and the share of rhos above rho_bar.
  """
  inputs = impala_networks.ImpalaInputs(
      observation=trajectory.observation,
      first=trajectory.first,
      last_action=trajectory.last_action,
      last_reward=trajectory.last_reward)
  outputs, _ = network.unroll(inputs, trajectory.core_state)

  # Transition t = 0..n-1: (x_t, a_t, r_t, discount, mu(.|x_t)); V(x_n) is the
  # bootstrap value.
  logits = outputs.policy_logits[:-1]
  values = outputs.baseline[:-1]
  bootstrap_value = outputs.baseline[-1]
  actions = trajectory.last_action[1:]
  rewards = clip_rewards(tf.cast(trajectory.last_reward[1:], tf.float32),
                         config.reward_clipping)
  discounts = config.discount * tf.cast(trajectory.discount[1:], tf.float32)
  behaviour_logits = trajectory.behaviour_logits[:-1]

  target_log_probs = vtrace.log_probs_from_logits_and_actions(logits, actions)
  behaviour_log_probs = vtrace.log_probs_from_logits_and_actions(
      behaviour_logits, actions)
  log_rhos = target_log_probs - behaviour_log_probs
  targets = vtrace.compute_targets(
      config.correction,
      log_rhos=log_rhos,
      discounts=discounts,
      rewards=rewards,
      values=values,
      bootstrap_value=bootstrap_value,
      clip_rho_threshold=config.clip_rho_threshold,
      clip_pg_rho_threshold=config.clip_pg_rho_threshold,
      clip_c_threshold=config.clip_c_threshold,
      lambda_=config.vtrace_lambda)

  pg_log_probs = vtrace.policy_gradient_log_probs(config.correction, logits,
                                                  actions)
  pg_loss = -tf.reduce_sum(pg_log_probs * targets.pg_advantages)
  baseline_loss = 0.5 * tf.reduce_sum(tf.square(targets.vs - values))
  policy = tf.nn.softmax(logits)
  log_policy = tf.nn.log_softmax(logits)
  entropy_per_step = -tf.reduce_sum(policy * log_policy, axis=-1)
  entropy_loss = -tf.reduce_sum(entropy_per_step)
  total_loss = (pg_loss + config.baseline_cost * baseline_loss +
                config.entropy_cost * entropy_loss)
  rhos = tf.exp(log_rhos)
  rho_bar = config.clip_rho_threshold
  return {
      'total_loss': total_loss,
      'pg_loss': pg_loss,
      'baseline_loss': baseline_loss,
      'entropy_loss': entropy_loss,
      'mean_entropy': tf.reduce_mean(entropy_per_step),
      'mean_value_target': tf.reduce_mean(targets.vs),
      'mean_rho': tf.reduce_mean(rhos),
      # The share of transitions whose rho the correction truncates (V-trace's
      # rho_bar; 0 when there is no threshold).
      'rho_clipped_fraction': (
          tf.reduce_mean(tf.cast(rhos > rho_bar, tf.float32))
          if rho_bar is not None else tf.constant(0.0)),
  }


def policy_lag(learner_step: tf.Tensor,
               behaviour_version: tf.Tensor) -> tf.Tensor:
  """Mean updates between the behaviour parameters and this update.

  The lag that V-trace corrects (Sec. 4): the learner's step minus the step
  of the parameters that computed each transition's behaviour logits.
  Versions the actors did not know (-1) are left out; -1 if none is known.
  """
  version = tf.cast(behaviour_version, tf.float32)
  known = tf.cast(behaviour_version >= 0, tf.float32)
  count = tf.reduce_sum(known)
  lag = tf.reduce_sum(known * (tf.cast(learner_step, tf.float32) - version))
  return tf.where(count > 0, lag / tf.maximum(count, 1.0), -1.0)


def annealed_learning_rate(config: config_lib.ImpalaConfig,
                           frames: Any) -> tf.Tensor:
  """lr0 * max(0, 1 - frames / total_frames) (Table G.1, [CODE])."""
  fraction = tf.cast(frames, tf.float64) / tf.constant(
      float(config.total_frames), tf.float64)
  remaining = tf.maximum(tf.constant(0.0, tf.float64), 1.0 - fraction)
  return tf.cast(config.learning_rate * remaining, tf.float32)


class ImpalaLearner(learner_runtime.DistributedLearner):
  """The IMPALA learner: Acme-style step()/run()/get_variables()."""

  def __init__(self,
               network: impala_networks.ImpalaNetwork,
               dataset: Optional[replay_feed.DatasetLike] = None,
               config: Optional[config_lib.ImpalaConfig] = None,
               *,
               make_dataset: Optional[Callable[[], tf.data.Dataset]] = None,
               signature: Optional[queue_lib.Trajectory] = None,
               replay_client: Optional[reverb.Client] = None,
               retry_period_s: float = 1.0,
               rms_initial_mean_square: float = 1.0,
               **runtime: Any):
    """Builds the learner, its optimizer and (if any) restores a checkpoint.

    Args:
      network: an ImpalaNetwork (the actors must build the same one).
      dataset: batches of batch-major `Trajectory` (queue.make_dataset): a
        dataset factory (preferred: rebuilt after errors), a tf.data.Dataset
        (re-iterated after errors) or a bare iterator (errors propagate).
      config: ImpalaConfig (defaults to the paper's).
      make_dataset: alternative keyword for a dataset factory.
      signature: the unbatched `Trajectory` specs (queue.trajectory_signature)
        used to create the variables; if None, read from the dataset's
        element_spec.
      replay_client: reverb.Client, for probing the server while waiting and
        for queue/replay sizes in report().
      retry_period_s: pause between sampling attempts while waiting.
      rms_initial_mean_square: initial RMSProp mean-square slot (1: TF1's
        RMSPropOptimizer, as [CODE]; 0: Sonnet's).
      **runtime: counter, logger and checkpoint options
        (learner_runtime.DistributedLearner).
    """
    super().__init__(config or config_lib.ImpalaConfig(), replay_client,
                     **runtime)
    self._network = network
    self._feed = self._make_feed(
        dataset, make_dataset, retry_period_s,
        waiting_for='the queue (empty, or server down or restarting)')

    # --- Variables. ---------------------------------------------------------
    if signature is None:
      observation = self._feed.element_spec.observation
      observation_spec = tf.TensorSpec(observation.shape[2:],
                                       observation.dtype)
    else:
      observation_spec = tf.TensorSpec(signature.observation.shape[1:],
                                       signature.observation.dtype)
    impala_networks.create_variables(network, observation_spec)

    c = self._config
    self._learning_rate = tf.Variable(c.learning_rate, dtype=tf.float32,
                                      trainable=False, name='learning_rate')
    self._optimizer = optimizers.rmsprop(
        c.rmsprop_style, network.trainable_variables, self._learning_rate,
        decay=c.rmsprop_decay, momentum=c.rmsprop_momentum,
        epsilon=c.rmsprop_epsilon, centered=False,
        initial_mean_square=rms_initial_mean_square)
    self._num_frames = tf.Variable(0, dtype=tf.int64, trainable=False,
                                   name='learner_frames')
    self._set_up_services(
        collections={'policy': lambda: self._network.variables},
        network=network, optimizer=self._optimizer,
        num_frames=self._num_frames)

    # autograph=False: the step has no Python control flow over tensors
    # (V-trace's scan and the LSTM's unroll are explicit loops), and
    # converting it would dominate tracing.
    self._step_fn = tf.function(self._train_step, jit_compile=c.jit_compile,
                                autograph=False)

    self._start_time = time.time()
    self._start_frames = int(self._num_frames.numpy())
    self._steps_this_run = 0
    self._last_metrics: Dict[str, Any] = {}

  # ---------------------------------------------------------------------------
  # Learning.
  # ---------------------------------------------------------------------------

  def _train_step(self, trajectory: queue_lib.Trajectory):
    c = self._config
    learning_rate = annealed_learning_rate(c, self._num_frames)
    self._learning_rate.assign(learning_rate)
    data = time_major(trajectory)
    params = self._network.trainable_variables
    with tf.GradientTape() as tape:
      losses = impala_loss(self._network, data, c)
    grads = tape.gradient(losses['total_loss'], params)
    clipped, grad_norm = tf.clip_by_global_norm(grads, c.max_gradient_norm)
    self._optimizer.apply(clipped, params)
    batch = tf.cast(tf.shape(data.last_reward)[1], tf.int64)
    unroll = tf.cast(tf.shape(data.last_reward)[0] - 1, tf.int64)
    # Only the queue's trajectories are new frames: the replayed share of a
    # mixed batch (Sec. 5.2.2) was counted when it was fresh, and counting
    # it again would end the anneal halfway through the run's frames.
    fresh = batch - c.replay_batch_size
    self._num_frames.assign_add(fresh * unroll * c.action_repeat)
    lag = policy_lag(self._num_steps, data.behaviour_version[:-1])
    self._num_steps.assign_add(1)
    return dict(losses, gradient_norm=grad_norm, learning_rate=learning_rate,
                gradient_clipped=tf.cast(grad_norm > c.max_gradient_norm,
                                         tf.float32),
                policy_lag=lag)

  def warm_up(self) -> bool:
    """Compiles the step before the first batch has arrived.

    Why: a starting learner is idle until the actors' first unrolls fill a
    batch, and its first step costs several later ones (tracing and
    instantiating the graph). So the step is run once on a batch of zeros of
    the real shape, and every variable it writes (network, optimizer slots,
    learning rate, step and frame counts) is then restored; the first real
    call finds the compiled step. The parameter service serves no fetch
    while this runs (agents/parameters.py), so no actor ever sees the
    throw-away update.

    Returns False, doing nothing, when the batch's shape is not known in
    advance (a bare iterator, or a dataset with unknown dimensions).
    """
    spec = self._feed.element_spec
    if spec is None or not all(s.shape.is_fully_defined()
                               for s in tree.flatten(spec)):
      return False
    written = self._state_variables()
    zeros = tree.map_structure(lambda s: tf.zeros(s.shape, s.dtype), spec)
    with self._updating():
      saved = [tf.identity(v.read_value()) for v in written]
      self._step_fn(zeros)
      for variable, value in zip(written, saved):
        variable.assign(value)
    return True

  def _state_variables(self) -> List[tf.Variable]:
    """Every variable a step may write, each once."""
    unique = {}
    for v in (list(self._network.variables) +
              list(self._optimizer.variables) +
              [self._learning_rate, self._num_steps, self._num_frames]):
      unique.setdefault(v.ref(), v)
    return list(unique.values())

  def step(self) -> Optional[Dict[str, Any]]:
    """One learner update; returns its metrics, or None if stopped first."""
    batch = self._feed.next()
    if batch is None:
      return None
    with self._updating():
      out = self._step_fn(batch)
    self._steps_this_run += 1
    elapsed = max(time.time() - self._start_time, 1e-9)
    frames = int(self._num_frames.numpy())
    metrics = {key: float(value.numpy()) for key, value in out.items()}
    metrics.update({
        'learner_steps': int(self._num_steps.numpy()),
        'learner_frames': frames,
        'learner_steps_per_s': self._steps_this_run / elapsed,
        'learner_frames_per_s': (frames - self._start_frames) / elapsed,
    })
    self._last_metrics = metrics
    self._after_update(metrics)
    return metrics

  @property
  def num_frames(self) -> int:
    return int(self._num_frames.numpy())

  @property
  def optimizer(self) -> snt.Module:
    return self._optimizer

  @property
  def network(self) -> impala_networks.ImpalaNetwork:
    return self._network

  def report(self) -> Dict[str, Any]:
    """Progress, throughput and queue/replay sizes for the supervisor."""
    elapsed = max(time.time() - self._start_time, 1e-9)
    result = {
        'learner_steps': self.num_steps,
        'learner_frames': self.num_frames,
        'learner_steps_this_run': self._steps_this_run,
        'learner_steps_per_s': self._steps_this_run / elapsed,
        'learner_frames_per_s': (self.num_frames - self._start_frames) /
                                elapsed,
        'waiting_for_data': self._feed.waiting,
        'data_waits': self._feed.num_waits,
        'last_total_loss': self._last_metrics.get('total_loss'),
        'learning_rate': self._last_metrics.get('learning_rate'),
    }
    if self._client is not None:
      try:
        result.update(queue_lib.server_sizes(self._client, self._config))
      except Exception as e:  # pylint: disable=broad-except
        result['replay_error'] = type(e).__name__
    return result
