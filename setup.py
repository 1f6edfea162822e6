"""Installs the reproduction on an exactly pinned DeepMind TF 2.8 stack.

Why every package is pinned, transitive ones included: a plain install of the
unpinned names resolves to numpy 2 and protobuf 7, which break TF 2.8, and pip's
resolver backtracks for tens of minutes over tensorboard 2.8's loose
requirements. With every version fixed the install is a straight download.
The set was resolved for CPython 3.10 on manylinux x86-64 and is checked to
import together (tests/test_stack.py).

Python 3.10 exactly: dm-launchpad publishes wheels for CPython <= 3.10 only, and
its C++ extension is linked against TF 2.8, which has no wheels past 3.10.
"""

import setuptools

STACK = [
    'ale-py==0.12.1',  # ships the ROMs: no download step
    'dm-acme==0.4.0',  # last release; building blocks for the agents
    # Ape-X DPG's humanoid and manipulator tasks (features only, no GL).
    'dm-control==1.0.50',
    'dm-launchpad==0.5.0',  # dm-acme 0.4.0 pins it exactly; cp310 wheels only
    'dm-reverb==0.7.0',  # built for TF 2.8; the version dm-acme 0.4.0 names
    'dm-sonnet==2.0.2',  # 2.0.0 crashes on Python 3.10 (collections.Sequence)
    'gym==0.25.2',  # only because acme.wrappers imports gym
    'jax==0.4.13',  # only because acme.adders.reverb.utils imports jax.numpy
    'jaxlib==0.4.13',  # pairs with jax 0.4.13
    'keras==2.8.0',  # matches TF 2.8
    'matplotlib==3.10.9',  # paper figures
    'mujoco==3.17.0',  # dm-control 1.0.50 needs >= 3.17
    'numpy==1.23.5',  # TF 2.8 breaks on numpy 2; acme wrappers break on >= 1.24
    # Frame ops and the INTER_AREA resize, far cheaper than PIL's: they keep
    # the Atari wrapper near bare-emulator speed. Also the PNG decoder.
    'opencv-python-headless==4.10.0.84',
    # A second PNG decoder: the tests check the observation codec (Ape-X
    # App. F) and the figures with it.
    'pillow==12.3.0',
    # TF 2.8 breaks on protobuf >= 3.20 ('Descriptors cannot be created
    # directly').
    'protobuf==3.19.6',
    'pytest==9.2.0',  # the test runner
    # IQM with stratified-bootstrap intervals (Agarwal et al. 2021) for the
    # Atari-57 comparison.
    'rliable==1.2.0',
    # TF 2.8 line: launchpad's courier and reverb link TF 2.8's C++ ABI
    # (README, "Why Python 3.10 and TF 2.8"). On a GPU host, swap for
    # 'tensorflow==2.8.0'.
    'tensorflow-cpu==2.8.0',
    'tensorflow-estimator==2.8.0',  # matches TF 2.8
    'tensorflow-probability==0.16.0',  # the TF 2.8 release
    'trfl==1.2.0',  # used by acme's TF modules
]

# Transitive requirements of STACK, pinned to the versions resolved with it.
TRANSITIVE = [
    'absl-py==2.5.1',
    'arch==7.2.0',
    'astunparse==1.6.3',
    'attrs==26.1.0',
    'certifi==2026.10.19.post1',
    'cffi==2.1.1',
    'charset-normalizer==3.5.3',
    'cloudpickle==3.1.3',
    'contourpy==1.3.2',
    'cryptography==50.0.2',
    'cycler==0.12.1',
    'decorator==5.3.1',
    'dm-env==1.6',
    'dm-tree==0.1.10',
    'etils==1.13.0',
    'exceptiongroup==1.3.2',
    'flatbuffers==25.12.19',
    'fonttools==4.65.0',
    'formulaic==1.2.2',
    'fsspec==2026.9.0',
    'gast==0.7.0',
    'glfw==2.11.0',
    'google-auth==2.63.0',
    'google-auth-oauthlib==0.4.6',
    'google-pasta==0.2.0',
    'grpcio==1.85.3',
    'gym-notices==0.1.0',
    'h5py==3.16.0',
    'idna==3.20',
    'importlib-resources==7.1.0',
    'iniconfig==2.3.1',
    'interface-meta==2.0.1',
    'keras-preprocessing==1.1.2',
    'kiwisolver==1.5.1',
    'labmaze==1.0.6',
    'libclang==18.1.1',
    'lxml==6.1.3',
    'markdown==3.10.3',
    'markupsafe==3.0.4',
    'ml-dtypes==0.5.4',
    'mock==5.2.0',
    'narwhals==2.29.0',
    'oauthlib==4.0.1',
    'opt-einsum==3.4.0',
    'packaging==26.4',
    'pandas==2.3.3',
    'patsy==1.0.3',
    'pluggy==1.7.0',
    'portpicker==1.6.0',
    'psutil==7.2.2',
    'pyasn1==0.6.5',
    'pyasn1-modules==0.4.2',
    'pycparser==3.11',
    'pygments==2.21.0',
    'pyopengl==3.1.10',
    'pyparsing==3.3.3',
    'python-dateutil==3.0.0',
    'pytz==2026.6',
    'requests==2.34.2',
    'requests-oauthlib==2.0.0',
    'scipy==1.15.3',
    'seaborn==0.13.2',
    'six==1.17.0',
    'statsmodels==0.15.0',
    'tabulate==0.10.0',
    'tensorboard==2.8.0',
    'tensorboard-data-server==0.6.1',
    'tensorboard-plugin-wit==1.8.1',
    'tensorflow-io-gcs-filesystem==0.37.1',
    'termcolor==3.3.0',
    'tf-estimator-nightly==2.8.0.dev2021122109',
    'tomli==2.5.0',
    'tqdm==4.70.1',
    'typing-extensions==4.16.0',
    'tzdata==2026.6',
    'urllib3==2.8.0',
    'websockets==16.1.1',
    'werkzeug==3.1.9',
    'wrapt==2.5.2',
    'zipp==4.1.2',
]

setuptools.setup(
    name='distributed-rl-reproductions',
    version='0.1.0',
    description=('Gorila, Ape-X and IMPALA reproduced on Acme, Sonnet, '
                 'Reverb and Launchpad (TF 2.8).'),
    python_requires='>=3.10,<3.11',
    packages=setuptools.find_packages(
        include=['agents*', 'networks*', 'launch_programs*', 'reproductions*']),
    package_data={'reproductions': ['*.csv']},
    install_requires=STACK + TRANSITIVE,
)
