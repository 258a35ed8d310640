"""Recording stand-ins: fake command-line tools on PATH that log argv and stdin, so tests can
assert the exact command a backend builds (and that no secret is in it) without the tool."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = """#!{python}
import json, os, sys
data = sys.stdin.buffer.read() if not sys.stdin.isatty() else b""
with open({log!r}, "a") as log:
    log.write(json.dumps({{"tool": {name!r}, "argv": sys.argv[1:], "stdin": data.decode("latin-1")}}) + "\\n")
sys.stdout.write(os.environ.get("STANDIN_STDOUT_" + {name!r}.upper().replace("-", "_"), ""))
sys.stderr.write(os.environ.get("STANDIN_STDERR_" + {name!r}.upper().replace("-", "_"), ""))
sys.exit(int(os.environ.get("STANDIN_EXIT_" + {name!r}.upper().replace("-", "_"), "0")))
"""


@dataclass
class Call:
    tool: str
    argv: list[str]
    stdin: str


class StandIns:
    """Fake tools in ``directory``, put first on PATH by the caller (monkeypatch.setenv)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.log = directory / "calls.jsonl"
        directory.mkdir(parents=True, exist_ok=True)

    def add(self, name: str) -> Path:
        path = self.directory / name
        path.write_text(SCRIPT.format(python=sys.executable, log=str(self.log), name=name))
        path.chmod(0o755)
        return path

    @property
    def path_env(self) -> str:
        return f"{self.directory}{os.pathsep}{os.environ.get('PATH', '')}"

    def calls(self, tool: str | None = None) -> list[Call]:
        if not self.log.exists():
            return []
        found = [Call(**json.loads(line)) for line in self.log.read_text().splitlines()]
        return [call for call in found if tool is None or call.tool == tool]


VERACRYPT_STANDIN = Path(__file__).with_name("veracrypt_standin.py")


def install_veracrypt(directory: Path) -> Path:
    """Put the VeraCrypt stand-in (tests/helpers/veracrypt_standin.py) in ``directory`` as ``veracrypt``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "veracrypt"
    path.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(VERACRYPT_STANDIN)!r}, run_name='__main__')\n"
    )
    path.chmod(0o755)
    return path
