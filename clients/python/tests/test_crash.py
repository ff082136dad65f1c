"""Crash test: SIGKILL a worker process running a 10-step durable job at random instrumented
points (at least once between a side effect and its step's completion), restart it until the
job is done, and check every side effect happened exactly once and no completed step re-ran."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from typing import List, Set

import strata

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_worker.py")


def test_crash_resume_exactly_once(client: strata.Strata, uid, tmp_path) -> None:
    seed = int(os.environ.get("STRATA_CRASH_SEED") or time.time_ns() % 1_000_000)
    rnd = random.Random(seed)
    jid, ledger = uid("crash"), str(tmp_path / "ledger")
    must_kill_after_effect = rnd.randint(2, 9)  # this step is killed between its side effect and completion
    points = [f"{n} {i}" for n in ("before-effect", "after-effect", "completed") for i in range(1, 11)]
    targets = {f"after-effect {must_kill_after_effect}"} | set(rnd.sample(points, 4))
    kills: List[str] = []
    completed: Set[int] = set()
    reruns_of_completed: List[int] = []
    runs_per_step = {i: 0 for i in range(1, 11)}
    finished = False
    for attempt in range(40):
        p = subprocess.Popen([sys.executable, WORKER, jid, ledger], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=os.environ.copy())
        assert p.stdin and p.stdout
        killed = False
        deadline = time.monotonic() + 30
        for line in p.stdout:
            assert time.monotonic() < deadline, "worker made no progress for 30 s"
            parts = line.split()
            if parts[:1] == ["RUN"]:
                i = int(parts[1])
                runs_per_step[i] += 1
                if i in completed:
                    reruns_of_completed.append(i)
            elif parts[:1] == ["FINISHED"]:
                finished = True
            elif parts[:1] == ["POINT"]:
                name, i = parts[1], int(parts[2])
                if name == "completed":
                    completed.add(i)
                if f"{name} {i}" in targets:
                    targets.discard(f"{name} {i}")
                    os.kill(p.pid, signal.SIGKILL)
                    kills.append(f"{name} {i}")
                    killed = True
                    break
                p.stdin.write("go\n")
                p.stdin.flush()
        rc = p.wait(timeout=30)
        err = p.stderr.read() if p.stderr else ""
        for f in (p.stdin, p.stdout, p.stderr):
            try:
                f.close()  # type: ignore[union-attr]
            except OSError:
                pass
        if killed:
            assert rc == -signal.SIGKILL
            continue
        assert rc == 0, f"worker failed (seed {seed}):\n{err[-3000:]}"
        break
    assert finished, f"the job did not finish after 40 runs (seed {seed}, kills {kills})"
    info = f"seed {seed}, kills {kills}"
    assert f"after-effect {must_kill_after_effect}" in kills, info
    assert not targets and len(kills) >= 2, info

    with open(ledger) as f:
        lines = f.read().split()
    assert lines == [f"effect-{i}" for i in range(1, 11)], info  # each side effect exactly once, in order
    assert reruns_of_completed == [], info  # no completed step ran again
    for i in range(1, 11):  # a step body ran again only if the worker was killed inside it
        killed_inside = sum(1 for k in kills if k.split()[1] == str(i) and not k.startswith("completed"))
        assert runs_per_step[i] == 1 + killed_inside, (i, runs_per_step, info)
    steps = {s["step_id"]: s for s in client.list_steps(jid)}
    assert len(steps) == 10 and all(s["status"] == "completed" for s in steps.values())
    # The restarted worker is the same owner: it got its own claim back, never a new token.
    assert all(s["fencing_token"] == 1 for s in steps.values()), info
    assert steps[f"step-{must_kill_after_effect}"]["result"] == f"effect-{must_kill_after_effect}"
    events = list(client.list_events(jid, op="ledger.write"))
    assert sorted(e["params"]["step"] for e in events) == list(range(1, 11))
    print(f"crash test: {len(kills)} kills ({', '.join(kills)}), seed {seed}")
