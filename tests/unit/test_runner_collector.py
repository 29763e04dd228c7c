"""The runner turns Python's cyclic collector off through its start-up (`rollout_runner.main`'s
docstring says why): it must be on again for the trial and for any other importer, and stay off
for one that had it off. Each case runs in a fresh interpreter, where nothing was imported yet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_importing_the_runner_leaves_the_collector_on_and_its_modules_frozen() -> None:
    out = _python(
        "import gc, rollout_runner.main; print(gc.isenabled(), gc.get_freeze_count() > 10000)"
    )
    assert out == "True True"


def test_an_importer_that_had_the_collector_off_keeps_it_off() -> None:
    out = _python("import gc; gc.disable(); import rollout_runner.main; print(gc.isenabled())")
    assert out == "False"


def test_the_collector_is_on_again_after_a_run_that_fails_on_its_input(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    out = _python(
        "import gc, rollout_runner.main as m; "
        f"code = m.run(['--spec', '/nonexistent/spec.json', '--termination-log', {str(log)!r}]); "
        "print(code, gc.isenabled())"
    )
    assert out == "2 True"
    assert "spec" in log.read_text()
