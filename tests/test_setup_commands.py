"""The README's two commands: their shape, and their set-up's failure and reuse paths."""

import pathlib
import re
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_readme_opens_with_exactly_the_two_commands():
  readme = (REPO / 'README.md').read_text()
  block = re.search(r'```bash\n(.*?)```', readme, re.S)
  assert block and readme.index('```bash') < readme.index('\n## ')
  commands = [line.split('#')[0].strip() for line in block.group(1).splitlines()
              if line.split('#')[0].strip()]
  assert commands == ['bash launch_programs/main.sh', 'bash tests/run.sh']
  # CI runs the README's test command and nothing else.
  ci = [line.strip() for line in (REPO / '.ci' / 'run').read_text().splitlines()
        if line.strip() and not line.strip().startswith(('#', 'set ', 'cd '))]
  assert ci == ['bash tests/run.sh']


def _copy_of_setup(tmp_path):
  (tmp_path / 'launch_programs').mkdir()
  shutil.copy(REPO / 'launch_programs' / 'ensure_venv.sh',
              tmp_path / 'launch_programs')
  shutil.copy(REPO / 'setup.py', tmp_path)
  return tmp_path / 'launch_programs' / 'ensure_venv.sh'


def test_without_python310_the_setup_says_what_to_install(tmp_path):
  script = _copy_of_setup(tmp_path)
  # A PATH with system tools but neither python3.10 nor pyenv.
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  for tool in ('cat', 'sha256sum', 'cut', 'ls', 'sort', 'rm', 'grep', 'dirname'):
    found = shutil.which(tool)
    if found:
      (bin_dir / tool).symlink_to(found)
  result = subprocess.run(
      ['/bin/bash', '-c', f'source {script}'], capture_output=True, text=True,
      env={'PATH': str(bin_dir), 'HOME': str(tmp_path)}, timeout=60)
  assert result.returncode == 1
  assert 'Python 3.10 is required' in result.stderr
  assert 'pyenv install 3.10' in result.stderr
  assert not (tmp_path / '.venv').exists()


def test_a_second_call_installs_nothing():
  # The suite itself runs inside the .venv that the first call made; sourcing
  # the set-up again must find the stamp and skip pip entirely.
  result = subprocess.run(
      ['/bin/bash', '-c',
       f'source {REPO}/launch_programs/ensure_venv.sh && command -v python'],
      capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  assert '[setup]' not in result.stderr
  assert result.stdout.strip() == str(REPO / '.venv' / 'bin' / 'python')
