"""The README's install commands, run as written: in a fresh virtual environment, from a clean copy of the
checkout (so nothing lands in the checkout itself), `pip install '.[http]'` and the wheel route both give a
working `toolreplay` command. The environment sees this Python's packages (the extras' dependencies are
installed by CI), so pip resolves the extra without downloading it again."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.support import integration
from toolreplay import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATIENCE = 600  # seconds for a pip install: the machine's speed, not the verdict


def install_commands() -> list[str]:
    """The commands of the README's Install section (its ```sh block), comments dropped."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index("## Install\n"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "README.md: the Install section has no sh block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.split("#", 1)[0].strip()]


def clean_copy(target: str) -> None:
    """The checkout's tracked files (what a fresh clone holds), copied to `target`."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and os.path.isfile(os.path.join(ROOT, name)):
            os.makedirs(os.path.dirname(os.path.join(target, name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(target, name))


@integration  # a virtual environment and pip installs: tens of seconds
class InstallTest(unittest.TestCase):
    def test_the_readme_names_the_current_wheel(self) -> None:
        wheels = [command for command in install_commands() if ".whl" in command]
        self.assertEqual(wheels, [f"pip install 'dist/toolreplay-{__version__}-py3-none-any.whl[http]'"])

    def test_the_install_commands_work_as_written(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            checkout = os.path.join(tmp, "toolreplay")
            clean_copy(checkout)
            for number, command in enumerate(install_commands()):
                if ".whl" in command:  # run right after the wheel is built, as the README says
                    continue
                with self.subTest(command=command):
                    venv = os.path.join(tmp, f"venv-{number}")
                    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True,
                                   timeout=PATIENCE)
                    env = {**os.environ, "PATH": os.path.join(venv, "bin") + os.pathsep + os.environ["PATH"],
                           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "VIRTUAL_ENV": venv}
                    done = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True,
                                          text=True, timeout=PATIENCE, check=False)
                    self.assertEqual(done.returncode, 0, done.stderr[-2000:])
                    if command.startswith("pip wheel"):
                        wheel = next(c for c in install_commands() if ".whl" in c)
                        done = subprocess.run(["bash", "-c", wheel], cwd=checkout, env=env, capture_output=True,
                                              text=True, timeout=PATIENCE, check=False)
                        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
                    # the installed command, from another folder: not the checkout's package
                    version = subprocess.run(["toolreplay", "version"], cwd=tmp, env=env, capture_output=True,
                                             text=True, timeout=PATIENCE, check=False)
                    self.assertEqual((version.returncode, version.stdout), (0, f"toolreplay {__version__}\n"))
                    where = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                                            "import toolreplay; print(toolreplay.__file__)"], cwd=tmp, env=env,
                                           capture_output=True, text=True, timeout=PATIENCE, check=True)
                    self.assertTrue(where.stdout.startswith(venv), where.stdout)


if __name__ == "__main__":
    unittest.main()
