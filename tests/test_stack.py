"""The pinned packages import together and report the pinned versions."""

import importlib.metadata

import pytest


def test_pinned_stack_imports_together():
  # One interpreter, every package: ABI clashes (TF vs launchpad's courier,
  # protobuf vs TF) show up only when they share a process.
  import acme  # noqa: F401
  from acme.adders import reverb as acme_reverb_adders  # noqa: F401
  import ale_py  # noqa: F401
  from ale_py import roms
  import cv2  # noqa: F401
  from dm_control import suite  # noqa: F401
  import launchpad as lp  # noqa: F401
  import matplotlib  # noqa: F401
  import numpy as np
  import PIL  # noqa: F401
  import reverb
  import rliable  # noqa: F401
  import sonnet as snt  # noqa: F401
  import tensorflow as tf
  import tensorflow_probability as tfp  # noqa: F401
  import trfl  # noqa: F401

  assert tf.__version__.startswith('2.8.')
  assert np.__version__ == '1.23.5'
  assert len(roms.get_all_rom_ids()) >= 57
  # A Reverb server and a compiled TF function in the same process.
  server = reverb.Server([reverb.Table.queue('q', 10)])
  try:
    client = reverb.Client(f'localhost:{server.port}')
    client.insert(np.arange(3, dtype=np.float32), {'q': 1.0})
    assert client.server_info()['q'].current_size == 1
  finally:
    server.stop()
  f = tf.function(lambda x: tf.reduce_sum(x * 2.0), jit_compile=True)
  assert float(f(tf.ones([3]))) == 6.0


@pytest.mark.parametrize('distribution,version', [
    ('tensorflow-cpu', '2.8.0'),
    ('dm-reverb', '0.7.0'),
    ('dm-launchpad', '0.5.0'),
    ('dm-acme', '0.4.0'),
    ('dm-sonnet', '2.0.2'),
    ('protobuf', '3.19.6'),
    ('ale-py', '0.12.1'),
    ('dm-control', '1.0.50'),
])
def test_pinned_versions(distribution, version):
  assert importlib.metadata.version(distribution) == version
