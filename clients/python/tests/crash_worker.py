"""The crash test's worker: a 10-step durable job whose steps each write one line to an
fsync'd ledger file (the side effect). At each instrumented point it prints
``POINT <name> <step>`` and waits for ``go`` on stdin, so the test can SIGKILL it exactly there.

usage: crash_worker.py JOB_ID LEDGER_PATH   (STRATA_URL / STRATA_API_KEY from the environment)
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import strata  # noqa: E402

job_id, ledger = sys.argv[1], sys.argv[2]
client = strata.Strata(backoff=0.05)
job = client.job(job_id, owner="crash-worker", lease_seconds=30, goal="crash test")


def point(name: str, i: int) -> None:
    print(f"POINT {name} {i}", flush=True)
    if sys.stdin.readline().strip() != "go":
        os._exit(3)


def write_ledger(i: int) -> str:
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"effect-{i}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return f"effect-{i}"


def make_step(i: int):
    @job.step(f"step-{i}")
    def body() -> str:
        print(f"RUN {i}", flush=True)
        point("before-effect", i)
        r = job.once("ledger.write", {"step": i}, lambda: write_ledger(i))
        point("after-effect", i)  # side effect done and recorded; the step is not completed yet
        return r
    return body


for i in range(1, 11):
    make_step(i)()
    point("completed", i)
print("FINISHED", flush=True)
