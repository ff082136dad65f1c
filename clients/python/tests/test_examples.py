"""The examples in clients/python/examples run as written against the live server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _run(*args: str) -> str:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, env=os.environ.copy())
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_quickstart_example() -> None:
    out = _run(os.path.join(EXAMPLES, "quickstart.py"))
    assert "conflict, current: {'version': 2}" in out
    assert "'Prefers 16:9 trailers with subtitles'" in out.split("recalled:")[1].splitlines()[0]
    assert "invalid: 422 ['body.ttl_seconds']" in out


def test_durable_job_example_runs_each_step_once() -> None:
    job_id = f"py-example-{uuid.uuid4().hex[:8]}"
    out = _run(os.path.join(EXAMPLES, "durable_job.py"), job_id)
    assert f"job {job_id} done:" in out
    assert "('cut', 'completed'), ('grade', 'completed'), ('subtitle', 'completed')" in out
