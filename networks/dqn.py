"""Nature-DQN torso and the dueling Q-network that Ape-X DQN uses.

Ape-X (Horgan et al. 2018), Appendix C: "We use the same network as in the
Dueling DDQN agent", i.e. the network of Wang et al. 2016 ("Dueling Network
Architectures for Deep Reinforcement Learning", arXiv:1511.06581, Section 4.2):

  * torso = Nature DQN (Mnih et al. 2015): 84x84x4 input, conv 32 8x8 stride 4,
    conv 64 4x4 stride 2, conv 64 3x3 stride 1, each followed by ReLU, VALID
    padding (84 -> 20 -> 9 -> 7), flattened to 7*7*64 = 3136 features;
  * two streams on the flattened features, each FC 512 + ReLU, then a linear
    layer: the value stream outputs 1 number V(s), the advantage stream |A|
    numbers A(s, a);
  * aggregation (Wang et al. eq. 9):
    Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a');
  * both streams backpropagate into the last convolutional layer, so Wang et
    al. rescale the combined gradient entering it by 1/sqrt(2). Ape-X does not
    restate this; "the same network" implies it (UNVERIFIED), so it is on by
    default and can be switched off.

Observations stay uint8 all the way to the network (4x less memory in replay
and in the actor's batches than float32); the cast and the 1/255 scaling
happen inside the torso, so they are compiled together with the convolutions.

Everything here is plain Sonnet 2 / TF ops and compiles under
`tf.function(jit_compile=True)` (the paper's implementation is TensorFlow;
XLA is a config switch, see agents/apex_dqn/config.py).

Initialisers are Sonnet's defaults (truncated normal, stddev 1/sqrt(fan_in);
zero biases), as in Acme's TF DQN networks. The papers do not state theirs.
"""

import math
from typing import Optional, Sequence

import sonnet as snt
import tensorflow as tf

# Wang et al. 2016, Section 4.2: the gradient entering the last conv layer is
# rescaled by 1/sqrt(2) because two streams feed back into it.
DUELING_GRADIENT_SCALE = 1.0 / math.sqrt(2.0)

# Nature DQN torso output size for 84x84 inputs: 7 * 7 * 64.
NATURE_DQN_EMBEDDING_SIZE = 3136


def scale_gradient(x: tf.Tensor, scale: float) -> tf.Tensor:
  """Identity on the forward pass; multiplies the gradient by `scale`.

  Written with `tf.custom_gradient` rather than the
  `x * s + stop_gradient(x * (1 - s))` trick so that the forward value is
  bit-exactly `x` (the trick rounds twice in float32).

  Args:
    x: any floating tensor.
    scale: python float applied to the incoming gradient.

  Returns:
    A tensor equal to `x`.
  """

  @tf.custom_gradient
  def _scale(t):

    def grad(dy):
      return dy * tf.cast(scale, dy.dtype)

    return tf.identity(t), grad

  return _scale(x)


class NatureDQNTorso(snt.Module):
  """Conv torso of Mnih et al. 2015: [B, 84, 84, 4] -> [B, 3136].

  uint8 inputs are cast to float32 and scaled by 1/255 here. Floating inputs
  are taken to be already scaled to [0, 1] and are only cast to float32.
  """

  def __init__(self, name: str = 'nature_dqn_torso'):
    super().__init__(name=name)
    # VALID padding: Nature DQN's 84 -> 20 -> 9 -> 7 spatial sizes (Sonnet's
    # default 'SAME' would give 21 -> 11 -> 11 and a 7744-wide embedding).
    self._convs = [
        snt.Conv2D(32, kernel_shape=8, stride=4, padding='VALID',
                   name='conv_0'),
        snt.Conv2D(64, kernel_shape=4, stride=2, padding='VALID',
                   name='conv_1'),
        snt.Conv2D(64, kernel_shape=3, stride=1, padding='VALID',
                   name='conv_2'),
    ]
    self._flatten = snt.Flatten()

  def __call__(self, observation: tf.Tensor) -> tf.Tensor:
    observation = tf.convert_to_tensor(observation)
    if observation.dtype == tf.uint8:
      x = tf.cast(observation, tf.float32) * (1.0 / 255.0)
    elif observation.dtype.is_floating:
      x = tf.cast(observation, tf.float32)
    else:
      raise TypeError(
          'NatureDQNTorso expects uint8 frames (scaled by 1/255 here) or '
          f'floats already in [0, 1]; got dtype {observation.dtype.name}.')
    for conv in self._convs:
      x = tf.nn.relu(conv(x))
    return self._flatten(x)


class DuelingDQNHead(snt.Module):
  """Value and advantage streams aggregated into Q-values (Wang et al. eq. 9).

  Input: the torso embedding [B, D]. Output: Q-values [B, num_actions].
  """

  def __init__(self,
               num_actions: int,
               hidden_size: int = 512,
               gradient_scale: Optional[float] = DUELING_GRADIENT_SCALE,
               name: str = 'dueling_dqn_head'):
    """Creates the two streams.

    Args:
      num_actions: |A|, the size of the advantage stream's output.
      hidden_size: width of each stream's hidden layer (512 in Wang et al.).
      gradient_scale: factor applied to the gradient that flows from the two
        streams back into the embedding (1/sqrt(2) in Wang et al.); None or
        1.0 turns the rescaling off.
      name: module name.
    """
    super().__init__(name=name)
    if num_actions < 1:
      raise ValueError(f'num_actions must be >= 1, got {num_actions}.')
    self._num_actions = num_actions
    self._gradient_scale = gradient_scale
    self._value_hidden = snt.Linear(hidden_size, name='value_hidden')
    self._value = snt.Linear(1, name='value')
    self._advantage_hidden = snt.Linear(hidden_size, name='advantage_hidden')
    self._advantage = snt.Linear(num_actions, name='advantage')

  @property
  def num_actions(self) -> int:
    return self._num_actions

  def value_and_advantages(self, embedding: tf.Tensor):
    """Returns (V [B, 1], A [B, num_actions]) before aggregation."""
    if self._gradient_scale is not None and self._gradient_scale != 1.0:
      embedding = scale_gradient(embedding, self._gradient_scale)
    value = self._value(tf.nn.relu(self._value_hidden(embedding)))
    advantages = self._advantage(
        tf.nn.relu(self._advantage_hidden(embedding)))
    return value, advantages

  def __call__(self, embedding: tf.Tensor) -> tf.Tensor:
    value, advantages = self.value_and_advantages(embedding)
    # Eq. 9: the mean (not the max of eq. 8) is subtracted; Wang et al. chose
    # it for optimisation stability. It makes A identifiable up to V.
    return value + advantages - tf.reduce_mean(
        advantages, axis=-1, keepdims=True)


class DuelingDQN(snt.Module):
  """Ape-X DQN's Q-network: Nature DQN torso + dueling head.

  Maps uint8 observations [B, 84, 84, 4] to Q-values [B, num_actions].
  """

  def __init__(self,
               num_actions: int,
               hidden_size: int = 512,
               gradient_scale: Optional[float] = DUELING_GRADIENT_SCALE,
               name: str = 'dueling_dqn'):
    super().__init__(name=name)
    self._torso = NatureDQNTorso()
    self._head = DuelingDQNHead(
        num_actions, hidden_size=hidden_size, gradient_scale=gradient_scale)

  @property
  def num_actions(self) -> int:
    return self._head.num_actions

  @property
  def torso(self) -> NatureDQNTorso:
    return self._torso

  @property
  def head(self) -> DuelingDQNHead:
    return self._head

  def __call__(self, observation: tf.Tensor) -> tf.Tensor:
    return self._head(self._torso(observation))


class DuelingMLP(snt.Module):
  """The dueling head over an MLP torso, for feature observations.

  Why it exists: tests and the tiny environments (Catch) need Ape-X DQN to
  learn in seconds; the Atari torso expects 84x84x4 frames. The head, and so
  the dueling aggregation and its gradient rescale, are the paper's.
  """

  def __init__(self,
               num_actions: int,
               torso_sizes: Sequence[int] = (64,),
               hidden_size: int = 64,
               gradient_scale: Optional[float] = DUELING_GRADIENT_SCALE,
               name: str = 'dueling_mlp'):
    super().__init__(name=name)
    self._torso = snt.nets.MLP(list(torso_sizes), activate_final=True)
    self._head = DuelingDQNHead(num_actions, hidden_size=hidden_size,
                                gradient_scale=gradient_scale)

  def __call__(self, observation: tf.Tensor) -> tf.Tensor:
    flat = snt.Flatten()(tf.cast(observation, tf.float32))
    return self._head(self._torso(flat))
