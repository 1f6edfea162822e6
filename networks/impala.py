"""IMPALA's networks (Espeholt et al. 2018, Figure 3, Sec. 5, App. G).

Two torsos from the paper, one for the tests' feature observations, one
interface:

  * `ShallowTorso` ('shallow', Figure 3 left): the feed-forward network of
    Mnih et al. 2016 (A3C): conv 16 8x8 stride 4, conv 32 4x4 stride 2, each
    with ReLU, VALID padding (84 -> 20 -> 9), FC 256 + ReLU. Sec. 5.3.2 calls
    it "equivalent to the feed forward network used in (Mnih et al., 2016)
    which features three convolutional layers", Figure 3's caption says "2
    convolutional layers". The A3C paper's Atari network has two conv layers
    and one FC layer (three hidden layers), which fits the caption's 2 and its
    1.2M parameters (this torso with Figure 3's LSTM and heads counts about
    1.23M), so 2 conv layers is the default; `variant='nature'` gives the
    three conv layers of Mnih et al. 2015 (32 8x8/4, 64 4x4/2, 64 3x3/1)
    before the same FC 256, for whoever reads "three convolutional layers"
    literally.
  * `DeepResidualTorso` ('deep', Figure 3 right; the released code's
    `Agent._torso`): three sections of (16, 32, 32) channels, each conv 3x3
    stride 1 SAME, max-pool 3x3 stride 2 SAME, then two residual blocks
    x + conv(relu(conv(relu(x)))); then ReLU, flatten, FC 256, ReLU. At 84x84
    input the pooling gives 42 -> 21 -> 11, so 11*11*32 = 3872 features.
    15 conv layers, as the caption says.
  * `MLPTorso`: an MLP for flat or small feature observations (Catch), so
    learning tests run in seconds. Not in the paper.

`ImpalaNetwork` puts a core and two linear heads (policy logits over |A|
actions and a scalar baseline V) on a torso. With `use_lstm` the core is the
paper's LSTM of 256 units, whose input is the torso output concatenated with
the one-hot last action and the last reward clipped to [-1, 1] (released
code, `Agent._head`). Without it the core is the identity and the heads read
the torso output directly: App. G says every Atari agent is feed-forward,
with 4 stacked frames as its short-term history, and does not say that the
feed-forward net still sees the last action and reward; A3C's feed-forward
net, which the shallow model copies, did not.

Episode boundaries: `first[t]` is True when observation x_t is the first of
an episode. The LSTM state is reset to zeros before x_t is processed there,
exactly as the released code does with its `done` flags (the state carried
into a new episode would leak information between episodes), and the last
action / reward inputs are zeroed there as well. The released code feeds the
previous episode's final action and reward at that step; zero is what "no
previous action" means, and the reset state cannot use it either way.

Observations may stay uint8 all the way into the network (4x less memory in
the queue, the replay and the learner's batches); frames are cast and scaled
by 1/255 inside the torso, where XLA can fuse the cast into the first conv.

The learner's `unroll` folds time into the batch for the torso and the heads
(Sec. 3.1: "An IMPALA learner applies the convolutional network to all
inputs in parallel by folding the time dimension into the batch
dimension"), and steps the LSTM through time with a Python loop over the
static unroll length, as the released code does; under XLA the loop is
compiled into one program.

Initialisers are Sonnet's defaults (truncated normal with stddev
1/sqrt(fan_in), zero biases). The released code also uses Sonnet's defaults.
"""

from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

import sonnet as snt
import tensorflow as tf
import tree

# Figure 3 / released code: the torso ends in FC 256 and the LSTM has 256
# units.
EMBEDDING_SIZE = 256
LSTM_SIZE = 256
# Released code `Agent._torso`: (num_channels, num_blocks) per section.
DEEP_SECTIONS = ((16, 2), (32, 2), (32, 2))
NETWORKS = ('shallow', 'deep', 'mlp')
SHALLOW_VARIANTS = ('a3c', 'nature')


class ImpalaInputs(NamedTuple):
  """What the network reads at each step ([B, ...] or time-major [T, B, ...]).

  observation: the frame stack (uint8, scaled in the torso) or features.
  first: bool, True where `observation` starts an episode (core reset).
  last_action: int, the action taken before `observation` (ignored at first).
  last_reward: float, the raw reward received with `observation` (clipped to
    [-1, 1] inside the network; ignored at first).
  """
  observation: Any
  first: Any
  last_action: Any
  last_reward: Any


class ImpalaOutputs(NamedTuple):
  """policy_logits: [..., num_actions]; baseline: [...] (the value V(x))."""
  policy_logits: Any
  baseline: Any


def _frames_to_float(observation: tf.Tensor) -> tf.Tensor:
  """uint8 frames -> float32 in [0, 1]; floats are taken as already scaled."""
  observation = tf.convert_to_tensor(observation)
  if observation.dtype == tf.uint8:
    return tf.cast(observation, tf.float32) * (1.0 / 255.0)
  if observation.dtype.is_floating:
    return tf.cast(observation, tf.float32)
  raise TypeError('IMPALA conv torsos expect uint8 frames (scaled by 1/255 '
                  'here) or floats already in [0, 1]; got dtype '
                  f'{observation.dtype.name}.')


class ShallowTorso(snt.Module):
  """Figure 3 (left): [B, 84, 84, C] -> [B, 256]. See the module docstring."""

  def __init__(self, variant: str = 'a3c', output_size: int = EMBEDDING_SIZE,
               name: str = 'shallow_torso'):
    super().__init__(name=name)
    if variant not in SHALLOW_VARIANTS:
      raise ValueError(f'Unknown shallow torso variant {variant!r}; valid '
                       f'choices: {", ".join(SHALLOW_VARIANTS)}.')
    self.variant = variant
    # VALID padding: the A3C/DQN sizes 84 -> 20 -> 9 (-> 7); Sonnet's default
    # SAME would change every layer after the first.
    if variant == 'a3c':
      layers = ((16, 8, 4), (32, 4, 2))
    else:
      layers = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    self._convs = [
        snt.Conv2D(channels, kernel_shape=kernel, stride=stride,
                   padding='VALID', name=f'conv_{i}')
        for i, (channels, kernel, stride) in enumerate(layers)]
    self._flatten = snt.Flatten()
    self._linear = snt.Linear(output_size, name='linear')

  def __call__(self, observation: tf.Tensor) -> tf.Tensor:
    x = _frames_to_float(observation)
    for conv in self._convs:
      x = tf.nn.relu(conv(x))
    return tf.nn.relu(self._linear(self._flatten(x)))


class _ResidualBlock(snt.Module):
  """x + conv(relu(conv(relu(x)))): pre-activation, no normalisation."""

  def __init__(self, channels: int, name: str):
    super().__init__(name=name)
    self._conv_0 = snt.Conv2D(channels, 3, stride=1, padding='SAME',
                              name='conv_0')
    self._conv_1 = snt.Conv2D(channels, 3, stride=1, padding='SAME',
                              name='conv_1')

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    return x + self._conv_1(tf.nn.relu(self._conv_0(tf.nn.relu(x))))


class DeepResidualTorso(snt.Module):
  """Figure 3 (right): [B, H, W, C] -> [B, 256]. See the module docstring."""

  def __init__(self, sections: Sequence[Tuple[int, int]] = DEEP_SECTIONS,
               output_size: int = EMBEDDING_SIZE,
               name: str = 'deep_residual_torso'):
    super().__init__(name=name)
    self._sections = []
    for i, (channels, num_blocks) in enumerate(sections):
      conv = snt.Conv2D(channels, 3, stride=1, padding='SAME',
                        name=f'section_{i}_conv')
      blocks = [_ResidualBlock(channels, name=f'section_{i}_block_{j}')
                for j in range(num_blocks)]
      self._sections.append((conv, blocks))
    self._flatten = snt.Flatten()
    self._linear = snt.Linear(output_size, name='linear')

  def __call__(self, observation: tf.Tensor) -> tf.Tensor:
    x = _frames_to_float(observation)
    for conv, blocks in self._sections:
      x = conv(x)
      x = tf.nn.max_pool2d(x, ksize=3, strides=2, padding='SAME')
      for block in blocks:
        x = block(x)
    x = tf.nn.relu(x)
    return tf.nn.relu(self._linear(self._flatten(x)))


class MLPTorso(snt.Module):
  """Flattened features -> ReLU MLP. For Catch-sized observations in tests.

  Features are cast to float32 without scaling (Catch cells are 0/1 already).
  """

  def __init__(self, sizes: Sequence[int] = (64, 64), name: str = 'mlp_torso'):
    super().__init__(name=name)
    if not sizes:
      raise ValueError('MLPTorso needs at least one layer size.')
    self._flatten = snt.Flatten()
    self._mlp = snt.nets.MLP(list(sizes), activate_final=True)

  def __call__(self, observation: tf.Tensor) -> tf.Tensor:
    return self._mlp(self._flatten(tf.cast(observation, tf.float32)))


class ImpalaNetwork(snt.Module):
  """Torso, optional LSTM core, policy and baseline heads.

  `initial_state(B)` gives the core state (an `snt.LSTMState` of [B, 256]
  tensors, or `()` without the LSTM); `__call__` takes one step of a batch of
  environments (the actors); `unroll` runs a time-major batch of trajectories
  (the learner). Both return `(ImpalaOutputs, next_state)`.
  """

  def __init__(self, num_actions: int, torso: snt.Module,
               use_lstm: bool = False, lstm_size: int = LSTM_SIZE,
               name: str = 'impala_network'):
    super().__init__(name=name)
    if int(num_actions) != num_actions or num_actions < 1:
      raise ValueError(f'num_actions must be an integer >= 1, got '
                       f'{num_actions!r}.')
    self._num_actions = int(num_actions)
    self._torso = torso
    self._use_lstm = bool(use_lstm)
    self._core = snt.LSTM(lstm_size, name='lstm') if use_lstm else None
    self._policy = snt.Linear(self._num_actions, name='policy_logits')
    self._baseline = snt.Linear(1, name='baseline')

  @property
  def num_actions(self) -> int:
    return self._num_actions

  @property
  def use_lstm(self) -> bool:
    return self._use_lstm

  @property
  def torso(self) -> snt.Module:
    return self._torso

  def initial_state(self, batch_size: int) -> Any:
    """Zero LSTM state for `batch_size` environments; () if feed-forward."""
    if self._core is None:
      return ()
    return self._core.initial_state(batch_size)

  # --- Pieces shared by the single step and the unroll. ---------------------

  def _core_input(self, embedding, first, last_action, last_reward):
    """[embedding, one-hot last action, clipped last reward]; 0 at firsts."""
    not_first = 1.0 - tf.cast(first, tf.float32)[:, None]
    one_hot = tf.one_hot(tf.cast(last_action, tf.int32), self._num_actions)
    reward = tf.clip_by_value(tf.cast(last_reward, tf.float32), -1.0, 1.0)
    return tf.concat(
        [embedding, one_hot * not_first, reward[:, None] * not_first], axis=-1)

  def _core_step(self, core_input, first, state):
    """One LSTM step, with the state reset to zeros where `first` is True."""
    first = tf.cast(first, tf.bool)
    batch_size = tf.shape(first)[0]
    initial = self._core.initial_state(batch_size)
    state = tree.map_structure(
        lambda zero, s: tf.where(first[:, None], zero, s), initial, state)
    return self._core(core_input, state)

  def _heads(self, core_output) -> ImpalaOutputs:
    return ImpalaOutputs(policy_logits=self._policy(core_output),
                         baseline=tf.squeeze(self._baseline(core_output), -1))

  # --- Public calls. ----------------------------------------------------------

  def __call__(self, inputs: ImpalaInputs, state: Any = ()):
    """One step for a batch: inputs [B, ...] -> (outputs [B, ...], state)."""
    embedding = self._torso(inputs.observation)
    if self._core is None:
      return self._heads(embedding), state
    core_input = self._core_input(embedding, inputs.first, inputs.last_action,
                                  inputs.last_reward)
    core_output, state = self._core_step(core_input, inputs.first, state)
    return self._heads(core_output), state

  def unroll(self, inputs: ImpalaInputs, state: Any = ()):
    """Time-major: inputs [T, B, ...] -> (outputs [T, B, ...], final state).

    The torso and heads see all T*B inputs at once; the LSTM steps through
    the T steps (T must be known statically), resetting where `first`.
    """
    observation = tf.convert_to_tensor(inputs.observation)
    obs_shape = tf.shape(observation)
    time_steps, batch = obs_shape[0], obs_shape[1]
    folded = tf.reshape(observation,
                        tf.concat([[time_steps * batch], obs_shape[2:]], 0))
    embedding = self._torso(folded)
    embedding = tf.reshape(embedding, [time_steps, batch, -1])
    if self._core is None:
      core_outputs = embedding
    else:
      static_t = observation.shape[0]
      if static_t is None:
        raise ValueError('ImpalaNetwork.unroll with an LSTM needs a static '
                         'unroll length (the time dimension of the inputs).')
      first = tf.convert_to_tensor(inputs.first)
      last_action = tf.convert_to_tensor(inputs.last_action)
      last_reward = tf.convert_to_tensor(inputs.last_reward)
      outputs = []
      for t in range(static_t):
        core_input = self._core_input(embedding[t], first[t], last_action[t],
                                      last_reward[t])
        output, state = self._core_step(core_input, first[t], state)
        outputs.append(output)
      core_outputs = tf.stack(outputs)
    flat = tf.reshape(core_outputs, [time_steps * batch, -1])
    heads = self._heads(flat)
    return ImpalaOutputs(
        policy_logits=tf.reshape(heads.policy_logits,
                                 [time_steps, batch, self._num_actions]),
        baseline=tf.reshape(heads.baseline, [time_steps, batch])), state


def make_network(num_actions: int,
                 network: str = 'deep',
                 use_lstm: bool = False,
                 lstm_size: int = LSTM_SIZE,
                 shallow_variant: str = 'a3c',
                 mlp_sizes: Sequence[int] = (64, 64),
                 embedding_size: int = EMBEDDING_SIZE) -> ImpalaNetwork:
  """Builds an `ImpalaNetwork` by name ('shallow', 'deep' or 'mlp')."""
  if network == 'shallow':
    torso = ShallowTorso(shallow_variant, output_size=embedding_size)
  elif network == 'deep':
    torso = DeepResidualTorso(output_size=embedding_size)
  elif network == 'mlp':
    torso = MLPTorso(mlp_sizes)
  else:
    raise ValueError(f'Unknown IMPALA network {network!r}; valid choices: '
                     f'{", ".join(NETWORKS)}.')
  return ImpalaNetwork(num_actions, torso, use_lstm=use_lstm,
                       lstm_size=lstm_size)


def make_network_from_config(config: Any, num_actions: int) -> ImpalaNetwork:
  """The network an `agents.impala.config.ImpalaConfig` describes.

  Reads the config by attribute so that this module does not import the agent
  package (networks are shared; configs belong to agents).
  """
  return make_network(num_actions,
                      network=config.network,
                      use_lstm=config.use_lstm,
                      lstm_size=config.lstm_size,
                      shallow_variant=config.shallow_variant,
                      mlp_sizes=tuple(config.mlp_sizes))


def core_state_spec(network: ImpalaNetwork) -> Any:
  """Unbatched TensorSpecs of the network's core state (() if feed-forward)."""
  state = network.initial_state(1)
  return tree.map_structure(
      lambda x: tf.TensorSpec(x.shape[1:], x.dtype), state)


def create_variables(network: ImpalaNetwork, observation_spec: Any) -> None:
  """Creates the network's variables with one dummy single step (batch 1)."""
  observation = tf.zeros([1] + list(observation_spec.shape),
                         tf.as_dtype(observation_spec.dtype))
  inputs = ImpalaInputs(observation=observation,
                        first=tf.ones([1], tf.bool),
                        last_action=tf.zeros([1], tf.int32),
                        last_reward=tf.zeros([1], tf.float32))
  network(inputs, network.initial_state(1))


def make_policy_step(network: ImpalaNetwork, jit_compile: bool = False,
                     input_signature: Optional[Sequence[Any]] = None
                     ) -> Callable[..., Tuple[tf.Tensor, Any]]:
  """One compiled acting step: (observation, first, last_action, last_reward,
  state) -> (policy logits, next state), for a batch of environments.

  The one forward pass that actors, evaluators and central inference run.
  Traced without autograph: the network has no Python control flow over
  tensors (the LSTM's unroll is an explicit loop), so autograph would only
  slow tracing.
  """

  @tf.function(jit_compile=jit_compile, autograph=False,
               input_signature=input_signature)
  def policy_step(observation, first, last_action, last_reward, state):
    outputs, next_state = network(
        ImpalaInputs(observation, first, last_action, last_reward), state)
    return outputs.policy_logits, next_state

  return policy_step


def make_assign(network: ImpalaNetwork) -> Callable[[Sequence[Any]], None]:
  """Compiled assignment of fetched values to the network's variables."""

  @tf.function(autograph=False)
  def assign(values):
    for variable, value in zip(network.variables, values):
      variable.assign(value)

  return assign

