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
     op then advances by batch * unroll * action repeats).
Steps 1-5 are one `tf.function(jit_compile=config.use_xla)`.

RMSProp: Sonnet's `snt.optimizers.RMSProp` (uncentered) computes
    ms <- decay ms + (1 - decay) g^2;  theta <- theta - lr g / sqrt(ms + eps)
with eps inside the square root, as TF1's `tf.train.RMSPropOptimizer` that
[CODE] uses. TF1 starts the mean-square slot at 1, Sonnet at 0; the slot is
set to `rms_initial_mean_square` (default 1, TF1's) once, at construction.
With eps = 0.01 inside the root the denominator never drops below 0.1.

Input pipeline and failures: as agents/apex_dqn/learning.py. The learner
owns a dataset factory; a batch is fetched on a daemon thread and waited for
in slices, so a stop request is seen while the queue is empty or the server
is down; sampling errors make the learner wait, probe the server and rebuild
the iterator (App. F of the Ape-X paper; IMPALA states nothing about it).

Checkpoints: network, optimizer slots, learner step and frame counters and,
for counters with save()/restore(), the counter's state. The constructor
restores the latest checkpoint in `checkpoint_dir` (resume); `run()` saves
every `checkpoint_period_s` and when it returns.
"""

import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from absl import logging
import numpy as np
import reverb
import sonnet as snt
import tensorflow as tf
import tree

from agents import node_runtime
from agents.impala import config as config_lib
from agents.impala import queue as queue_lib
from agents.impala import vtrace
from networks import impala as impala_networks

DatasetLike = Union[tf.data.Dataset, Iterator[queue_lib.Trajectory],
                    Callable[[], tf.data.Dataset]]


def clip_rewards(rewards: tf.Tensor, clipping: str) -> tf.Tensor:
  """Table G.1's [-1, 1] clipping, or [CODE]'s DMLab-30 'soft_asymmetric'.

  'soft_asymmetric' is the released code's version (tanh(r/5) scaled by 5,
  negative rewards by a further 0.3), not Figure D.1's printed formula; see
  shared/papers/impala_appendix.md, Table D.3.
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
    and batch), plus the mean entropy and mean value target for logging.
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
  targets = vtrace.compute_targets(
      config.correction,
      log_rhos=target_log_probs - behaviour_log_probs,
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
  return {
      'total_loss': total_loss,
      'pg_loss': pg_loss,
      'baseline_loss': baseline_loss,
      'entropy_loss': entropy_loss,
      'mean_entropy': tf.reduce_mean(entropy_per_step),
      'mean_value_target': tf.reduce_mean(targets.vs),
  }


def annealed_learning_rate(config: config_lib.ImpalaConfig,
                           frames: Any) -> tf.Tensor:
  """lr0 * max(0, 1 - frames / total_frames) (Table G.1, [CODE])."""
  fraction = tf.cast(frames, tf.float64) / tf.constant(
      float(config.total_frames), tf.float64)
  remaining = tf.maximum(tf.constant(0.0, tf.float64), 1.0 - fraction)
  return tf.cast(config.learning_rate * remaining, tf.float32)


class ImpalaLearner:
  """The IMPALA learner: Acme-style step()/run()/get_variables()."""

  def __init__(self,
               network: impala_networks.ImpalaNetwork,
               dataset: Optional[DatasetLike] = None,
               config: Optional[config_lib.ImpalaConfig] = None,
               counter: Any = None,
               logger: Any = None,
               checkpoint_dir: Optional[str] = None,
               *,
               make_dataset: Optional[Callable[[], tf.data.Dataset]] = None,
               signature: Optional[queue_lib.Trajectory] = None,
               replay_client: Optional[reverb.Client] = None,
               checkpoint_period_s: float = 600.0,
               max_checkpoints_to_keep: int = 3,
               retry_period_s: float = 1.0,
               rms_initial_mean_square: float = 1.0):
    """Builds the learner, its optimizer and (if any) restores a checkpoint.

    Args:
      network: an ImpalaNetwork (the actors must build the same one).
      dataset: batches of batch-major `Trajectory` (queue.make_dataset): a
        dataset factory (preferred: rebuilt after errors), a tf.data.Dataset
        (re-iterated after errors) or a bare iterator (errors propagate).
      config: ImpalaConfig (defaults to the paper's).
      counter: acme counting.Counter-like, optional; gets learner_steps.
      logger: anything with write(dict), optional; written every step.
      checkpoint_dir: where to save and restore; None disables both.
      make_dataset: alternative keyword for a dataset factory.
      signature: the unbatched `Trajectory` specs (queue.trajectory_signature)
        used to create the variables; if None, read from the dataset's
        element_spec.
      replay_client: reverb.Client, for probing the server while waiting and
        for queue/replay sizes in report().
      checkpoint_period_s: seconds between saves in run().
      max_checkpoints_to_keep: checkpoints kept in checkpoint_dir.
      retry_period_s: pause between sampling attempts while waiting.
      rms_initial_mean_square: initial RMSProp mean-square slot (1: TF1's
        RMSPropOptimizer, as [CODE]; 0: Sonnet's).
    """
    self._config = config or config_lib.ImpalaConfig()
    self._config.validate()
    self._network = network
    self._counter = counter
    self._counter_increments = node_runtime.BackgroundIncrements(counter)
    self._logger = logger
    self._client = replay_client
    self._checkpoint_period_s = float(checkpoint_period_s)
    self._retry_period_s = float(retry_period_s)
    self._stop_event = threading.Event()
    # get_variables() serves these while warm_up() runs a throw-away step.
    self._variables_lock = threading.Lock()
    self._frozen_variables: Optional[Dict[str, List[np.ndarray]]] = None

    # --- Data source. -------------------------------------------------------
    if make_dataset is not None and dataset is not None:
      raise ValueError('Pass either `dataset` or `make_dataset`, not both.')
    source = make_dataset if make_dataset is not None else dataset
    if source is None:
      raise ValueError('A dataset, dataset iterator or dataset factory is '
                       'required.')
    if isinstance(source, tf.data.Dataset):
      self._make_dataset = lambda: source
    elif callable(source) and not hasattr(source, '__next__'):
      self._make_dataset = source
    else:
      self._make_dataset = None
    self._iterator = None if self._make_dataset else source
    self._pending_fetch = None

    # --- Variables. ---------------------------------------------------------
    if signature is None:
      if self._iterator is not None and hasattr(self._iterator,
                                                'element_spec'):
        batched = self._iterator.element_spec
      else:
        batched = self._make_dataset().element_spec
      observation = batched.observation
      observation_spec = tf.TensorSpec(observation.shape[2:],
                                       observation.dtype)
    else:
      observation_spec = tf.TensorSpec(signature.observation.shape[1:],
                                       signature.observation.dtype)
    impala_networks.create_variables(network, observation_spec)

    c = self._config
    self._learning_rate = tf.Variable(c.learning_rate, dtype=tf.float32,
                                      trainable=False, name='learning_rate')
    self._optimizer = snt.optimizers.RMSProp(
        learning_rate=self._learning_rate,
        decay=c.rmsprop_decay,
        momentum=c.rmsprop_momentum,
        epsilon=c.rmsprop_epsilon,
        centered=False)
    # Slots created eagerly (not inside the compiled step): a zero update
    # leaves the parameters unchanged; then TF1's initial mean square.
    params = network.trainable_variables
    self._optimizer.apply([tf.zeros_like(v) for v in params], params)
    for ms in self._optimizer.ms:
      ms.assign(tf.fill(ms.shape, tf.cast(rms_initial_mean_square, ms.dtype)))
    self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                  name='learner_steps')
    self._num_frames = tf.Variable(0, dtype=tf.int64, trainable=False,
                                   name='learner_frames')
    self._counter_state = tf.Variable('', dtype=tf.string, trainable=False,
                                      name='counter_state')

    # --- Checkpointing. -----------------------------------------------------
    self._checkpoint = tf.train.Checkpoint(
        network=network, optimizer=self._optimizer,
        num_steps=self._num_steps, num_frames=self._num_frames,
        counter_state=self._counter_state)
    self._manager = None
    self.restored_from = None
    if checkpoint_dir:
      self._manager = tf.train.CheckpointManager(
          self._checkpoint, checkpoint_dir, max_to_keep=max_checkpoints_to_keep)
      if self._manager.latest_checkpoint:
        self.restore(self._manager.latest_checkpoint)

    # --- The compiled step. -------------------------------------------------
    # autograph=False: the step has no Python control flow over tensors
    # (V-trace's scan and the LSTM's unroll are explicit loops), and
    # converting it dominated tracing: 1.3 s instead of 4.3 s (shallow
    # network, batch 32 x unroll 20, one core), the same graph otherwise.
    self._step_fn = tf.function(self._train_step, jit_compile=c.use_xla,
                                autograph=False)

    self._start_time = time.time()
    self._start_frames = int(self._num_frames.numpy())
    self._steps_this_run = 0
    self._last_metrics: Dict[str, Any] = {}
    self._waiting = False
    self._num_waits = 0
    self._wait_start = 0.0
    self._last_checkpoint_time = time.time()

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
    self._num_frames.assign_add(batch * unroll * c.action_repeat)
    self._num_steps.assign_add(1)
    return dict(losses, gradient_norm=grad_norm, learning_rate=learning_rate)

  def warm_up(self) -> bool:
    """Compiles the step before the first batch has arrived.

    Why: a first step costs 1.2 s against 0.5 s for the next ones (tracing
    and instantiating the graph; shallow network, batch 32 x unroll 20, one
    core; 3.9 s before autograph was turned off), and a starting learner is
    idle until the actors' first unrolls fill a batch. So the step is run
    once on a batch of zeros of the real shape, and every variable it writes
    (network, optimizer slots, learning rate, step and frame counts) is then
    restored; the first real call finds the compiled step. Meanwhile
    get_variables() serves the parameters as they were, so no actor ever
    sees the throw-away update.

    Returns False, doing nothing, when the batch's shape is not known in
    advance (a bare iterator, or a dataset with unknown dimensions).
    """
    spec = self._batch_spec()
    if spec is None or not all(s.shape.is_fully_defined()
                               for s in tree.flatten(spec)):
      return False
    with self._variables_lock:
      self._frozen_variables = self._read_variables()
    try:
      written = self._state_variables()
      saved = [v.read_value() for v in written]
      zeros = tree.map_structure(lambda s: tf.zeros(s.shape, s.dtype), spec)
      self._step_fn(zeros)
      for variable, value in zip(written, saved):
        variable.assign(value)
    finally:
      with self._variables_lock:
        self._frozen_variables = None
    return True

  def _state_variables(self) -> List[tf.Variable]:
    """Every variable a step may write, each once."""
    unique = {}
    for v in (list(self._network.variables) +
              list(self._optimizer.variables) +
              [self._learning_rate, self._num_steps, self._num_frames]):
      unique.setdefault(v.ref(), v)
    return list(unique.values())

  def _batch_spec(self) -> Optional[queue_lib.Trajectory]:
    if self._iterator is not None:
      return getattr(self._iterator, 'element_spec', None)
    return self._make_dataset().element_spec

  def _stop_requested(self) -> bool:
    return self._stop_event.is_set() or node_runtime.launchpad_stop_requested()

  def stop(self) -> None:
    """Asks step()/run() to return (from another thread, e.g. tests)."""
    self._stop_event.set()

  def _fetch(self) -> Optional[queue_lib.Trajectory]:
    """next(iterator) on a daemon thread, waited for in slices.

    The queue blocks a sampler while it is empty, so a bare next() could
    block for as long as the actors are gone; waiting in slices lets a stop
    request through. A fetch abandoned by a stop is collected next call.
    """
    if self._pending_fetch is None:
      box = {}
      done = threading.Event()
      iterator = self._iterator

      def fetch():
        try:
          box['batch'] = next(iterator)
        except BaseException as e:  # pylint: disable=broad-except
          box['error'] = e
        done.set()

      threading.Thread(target=fetch, daemon=True,
                       name='impala_learner_fetch').start()
      self._pending_fetch = (box, done)
    box, done = self._pending_fetch
    while not done.wait(self._retry_period_s):
      if self._stop_requested():
        return None
    self._pending_fetch = None
    if 'error' in box:
      raise box['error']
    return box['batch']

  def _next_batch(self) -> Optional[queue_lib.Trajectory]:
    """Next batch, waiting (and rebuilding the iterator) while none comes.

    Returns None if a stop was requested while waiting.
    """
    while True:
      attempt_start = time.time()
      try:
        if self._iterator is None:
          if self._client is not None:
            self._client.server_info(timeout=max(1, int(self._retry_period_s)))
          self._iterator = iter(self._make_dataset())
        batch = self._fetch()
        if batch is None:
          return None
        if self._waiting:
          logging.info('Learner resumes after waiting %.1f s for data.',
                       time.time() - self._wait_start)
          self._waiting = False
        return batch
      except node_runtime.RETRYABLE_REPLAY_ERRORS as e:  # pylint: disable=catching-non-exception
        if self._make_dataset is None:
          raise
        self._iterator = None
        if not self._waiting:
          self._waiting = True
          self._num_waits += 1
          self._wait_start = time.time()
          logging.warning('Learner waits for the queue (empty, or server '
                          'down or restarting): %s: %s', type(e).__name__,
                          str(e).splitlines()[0] if str(e) else '')
      if self._stop_requested():
        return None
      # At most one attempt per retry period, but no pause after an attempt
      # that already waited that long (a dataset ended by the rate limiter's
      # timeout on an empty queue): the first unrolls are then taken as soon
      # as they land, up to 1 s sooner at start-up.
      time.sleep(max(0.0, self._retry_period_s - (time.time() - attempt_start)))
      if self._stop_requested():
        return None

  def step(self) -> Optional[Dict[str, Any]]:
    """One learner update; returns its metrics, or None if stopped first."""
    batch = self._next_batch()
    if batch is None:
      return None
    out = self._step_fn(batch)
    self._steps_this_run += 1
    if self._counter is not None:
      self._counter_increments.increment(learner_steps=1)
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
    if self._logger is not None:
      self._logger.write(metrics)
    return metrics

  def run(self, num_steps: Optional[int] = None) -> None:
    """Steps until a stop (Launchpad or stop()) or `num_steps` steps.

    Checkpoints every `checkpoint_period_s` and when it returns. Traces the
    step first (warm_up()), while the first batch is still being made.
    """
    self.warm_up()
    node_runtime.run_steps(
        self.step, self._stop_requested,
        checkpoint_due=lambda: (time.time() - self._last_checkpoint_time
                                >= self._checkpoint_period_s),
        save=self.save if self._manager is not None else None,
        num_steps=num_steps)

  # ---------------------------------------------------------------------------
  # Variables, checkpoints, reporting.
  # ---------------------------------------------------------------------------

  def get_variables(self, names: Sequence[str]) -> List[List[np.ndarray]]:
    """'policy': the network's variables; 'version': [learner steps]."""
    unknown = [name for name in names if name not in ('policy', 'version')]
    if unknown:
      raise KeyError(f'Unknown variable collection(s) {unknown}; valid: '
                     'policy, version.')
    with self._variables_lock:
      values = self._frozen_variables or self._read_variables()
    return [values[name] for name in names]

  def _read_variables(self) -> Dict[str, List[np.ndarray]]:
    return {'policy': [np.asarray(v.numpy()) for v in self._network.variables],
            'version': [np.asarray(self._num_steps.numpy())]}

  @property
  def num_steps(self) -> int:
    return int(self._num_steps.numpy())

  @property
  def num_frames(self) -> int:
    return int(self._num_frames.numpy())

  @property
  def optimizer(self) -> snt.optimizers.RMSProp:
    return self._optimizer

  @property
  def network(self) -> impala_networks.ImpalaNetwork:
    return self._network

  def save(self) -> Optional[str]:
    """Writes a checkpoint (keeps the latest few); returns its path."""
    if self._manager is None:
      return None
    state = node_runtime.counter_state_json(self._counter,
                                            self._counter_increments)
    if state is not None:
      self._counter_state.assign(state)
    path = self._manager.save(checkpoint_number=self._num_steps)
    self._last_checkpoint_time = time.time()
    logging.info('IMPALA learner checkpoint at step %d: %s', self.num_steps,
                 path)
    return path

  def restore(self, path: Optional[str] = None) -> None:
    """Restores `path` (default: the latest in checkpoint_dir)."""
    if path is None:
      if self._manager is None or not self._manager.latest_checkpoint:
        raise ValueError('No checkpoint to restore.')
      path = self._manager.latest_checkpoint
    self._checkpoint.restore(path).assert_existing_objects_matched()
    node_runtime.restore_counter(self._counter,
                                 self._counter_state.numpy().decode())
    self.restored_from = path
    logging.info('IMPALA learner restored from %s at step %d.', path,
                 self.num_steps)

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
        'waiting_for_data': self._waiting,
        'data_waits': self._num_waits,
        'last_total_loss': self._last_metrics.get('total_loss'),
        'learning_rate': self._last_metrics.get('learning_rate'),
    }
    if self._client is not None:
      try:
        result.update(queue_lib.server_sizes(self._client, self._config))
      except Exception as e:  # pylint: disable=broad-except
        result['replay_error'] = type(e).__name__
    return result
