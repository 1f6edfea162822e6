"""The papers' score of a run: its final checkpoint, N fresh episodes per game.

The evaluator node (agents/evaluation.py) plays while the agent learns; the
mean of those episodes mixes the untrained start with the end. The papers
report the final agent:
  * IMPALA Sec. 5.3.2: "each game-score is the mean over 200 evaluation
    episodes", each started with 1 to 30 no-ops;
  * DQN (Mnih et al. 2015), whose protocol Gorila uses: 30 episodes with up
    to 30 no-ops, 18,000 frames each;
  * Ape-X Sec. 4.1: no-op starts; the count is NOT STATED (30, DQN's).
The regime (no-ops, episode cap, raw score) is the evaluation environment's
and the action choice the agent's `EvaluationPolicy`, exactly as in training
-time evaluation; only the parameters differ: the learner's last checkpoint.

Episodes are played in chunks of CHUNK, each chunk by one worker process
with its own environment and policy seeded by (run seed, game, chunk): the
scores do not depend on how many processes play them. Workers are spawned,
so the calling process (the launcher) need not import TensorFlow.
`final_evaluation.csv` is written whole, atomically, once every episode is
in (or the time budget is spent: episodes begun before the deadline finish,
later ones are not started).
"""

import concurrent.futures
import multiprocessing
import os
import pathlib
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from reproductions import run_records

# Episodes per worker task (and per environment/policy instance).
CHUNK = 5


def checkpoint_dir(run_dir: os.PathLike) -> pathlib.Path:
  """Where the (first) learner of a run writes its checkpoints."""
  return run_records.RunRecord(run_dir).checkpoint_dir / 'learner'


def latest_checkpoint(run_dir: os.PathLike) -> Optional[str]:
  """The learner's last checkpoint of the run, or None.

  Read from the CheckpointManager's state file (`model_checkpoint_path:
  "ckpt-N"`), which is what tf.train.latest_checkpoint does, without
  importing TensorFlow.
  """
  state = checkpoint_dir(run_dir) / 'checkpoint'
  if not state.exists():
    return None
  for line in state.read_text().splitlines():
    key, _, value = line.partition(':')
    if key.strip() == 'model_checkpoint_path':
      name = value.strip().strip('"')
      path = pathlib.Path(name)
      path = path if path.is_absolute() else state.parent / path
      return str(path) if path.with_suffix('.index').exists() else None
  return None


def restore_policy(policy: Any, path: str) -> Tuple[int, Dict[str, Any]]:
  """Loads the checkpoint's network into `policy`; (learner step, counts).

  Only the network (and the step and counter state) are read; the optimizer
  slots and target networks in the same checkpoint are ignored.
  """
  import json  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  step = tf.Variable(0, dtype=tf.int64)
  counts = tf.Variable('', dtype=tf.string)
  tf.train.Checkpoint(network=policy.network, num_steps=step,
                      counter_state=counts).restore(path).expect_partial()
  state = counts.numpy().decode()
  return int(step.numpy()), (json.loads(state).get('counts', {})
                             if state else {})


def _chunk_seed(run_seed: int, game_index: int, chunk: int) -> int:
  return 1_000_003 * (run_seed + 1) + 10_007 * game_index + chunk


def _play_chunk(config: Dict[str, Any], path: str, game_index: int,
                episodes: Sequence[int], deadline: float
                ) -> List[Dict[str, Any]]:
  """Worker: plays `episodes` of game `game_index` with checkpoint `path`."""
  from agents import builders  # pylint: disable=g-import-not-at-top
  from agents import evaluation  # pylint: disable=g-import-not-at-top
  builder = builders.from_run_config(config)
  seed = _chunk_seed(builder.seed, game_index, episodes[0] // CHUNK)
  environment, policy = builder.make_evaluation_policy(game_index, seed=seed)
  learner_steps, counts = restore_policy(policy, path)
  game = builder.evaluator_environments()[game_index].split('/', 1)[-1]
  training_frames = int(counts.get('actor_steps', 0)) * builder.frames_per_step
  rows = []
  for episode in episodes:
    if time.time() > deadline:
      break
    score, frames = evaluation.play_episode(environment, policy,
                                            builder.frames_per_step)
    rows.append(dict(
        game=game, episode=episode, score=score, frames=frames,
        learner_steps=learner_steps, training_frames=training_frames,
        checkpoint=os.path.basename(path)))
  return rows


def _output_to(path: str) -> None:
  """A worker's stdout and stderr (TF and ALE start-up) go to the run's log.

  Why at the descriptors: the emulator and TensorFlow print from C++.
  """
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  os.dup2(fd, 1)
  os.dup2(fd, 2)
  os.close(fd)


def evaluate(run_dir: os.PathLike, episodes: Optional[int] = None,
             processes: int = 1, max_seconds: Optional[float] = None
             ) -> Dict[str, Any]:
  """Plays the final evaluation of a run and writes final_evaluation.csv.

  Args:
    run_dir: the run record.
    episodes: per game; default the agent's paper count
      (`ActorLearnerBuilder.final_evaluation_episodes`).
    processes: worker processes playing chunks in parallel.
    max_seconds: no episode starts after this many seconds (None: no bound).

  Returns:
    A summary: per-game mean score and episode count, the checkpoint, and
    whether the budget cut the evaluation short.

  Raises:
    FileNotFoundError: the run has no learner checkpoint.
  """
  from agents import builders  # pylint: disable=g-import-not-at-top
  record = run_records.RunRecord(run_dir)
  config = record.read_config()
  builder = builders.from_run_config(config)
  episodes = (builder.final_evaluation_episodes if episodes is None
              else int(episodes))
  path = latest_checkpoint(run_dir)
  if path is None:
    raise FileNotFoundError(
        f'{record.run_dir} has no learner checkpoint in '
        f'{checkpoint_dir(run_dir)}: nothing to evaluate')
  start = time.time()
  deadline = start + max_seconds if max_seconds is not None else float('inf')
  tasks = [(g, list(range(c, min(c + CHUNK, episodes))))
           for g in range(len(builder.evaluator_environments()))
           for c in range(0, episodes, CHUNK)]
  rows: List[Dict[str, Any]] = []
  context = multiprocessing.get_context('spawn')
  log = record.logs_dir / 'final_evaluation.log'
  log.parent.mkdir(parents=True, exist_ok=True)
  with concurrent.futures.ProcessPoolExecutor(
      max_workers=max(1, min(processes, len(tasks) or 1)),
      mp_context=context, initializer=_output_to, initargs=(str(log),)
  ) as pool:
    futures = [pool.submit(_play_chunk, config, path, g, chunk, deadline)
               for g, chunk in tasks]
    for future in futures:
      rows.extend(future.result())
  rows.sort(key=lambda r: (r['game'], r['episode']))
  record.write_final_evaluation(rows)
  games = {}
  for row in rows:
    games.setdefault(row['game'], []).append(row['score'])
  return {
      'checkpoint': path,
      'learner_steps': rows[0]['learner_steps'] if rows else None,
      'episodes_requested': episodes,
      'games': {g: {'episodes': len(s), 'mean_score': sum(s) / len(s)}
                for g, s in games.items()},
      'cut_short': len(rows) < episodes * len(
          builder.evaluator_environments()),
      'seconds': round(time.time() - start, 1),
  }
