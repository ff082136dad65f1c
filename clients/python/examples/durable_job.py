"""A durable three-step job: run it, kill it (Ctrl-C) half way, run it again with the same
job id — finished steps are not run again and each render happens once.

    /usr/bin/python3 clients/python/examples/durable_job.py [JOB_ID]
"""

import os
import sys
import tempfile
import time
import uuid

import strata

client = strata.Strata()
job_id = sys.argv[1] if len(sys.argv) > 1 else f"trailer-{uuid.uuid4().hex[:8]}"
job = client.job(job_id, owner="worker-1", lease_seconds=30, goal="make a trailer")
out_dir = os.path.join(tempfile.gettempdir(), job_id)
os.makedirs(out_dir, exist_ok=True)


def render(name: str) -> str:
    """The side effect: writes a file (stand-in for an expensive render)."""
    path = os.path.join(out_dir, name)
    with open(path, "a") as f:
        f.write("rendered\n")
    time.sleep(0.2)
    return path


@job.step("cut")
def cut(src: str) -> str:
    return job.once("render.cut", {"src": src}, lambda: render("cut.mp4"))


@job.step("grade")
def grade(clip: str) -> str:
    return job.once("render.grade", {"clip": clip}, lambda: render("graded.mp4"))


@job.step("subtitle")
def subtitle(clip: str) -> str:
    if not clip:
        raise strata.ManualReview("no clip to subtitle")
    return job.once("render.subtitle", {"clip": clip}, lambda: render("final.mp4"))


final = subtitle(grade(cut("in.mp4")))
client.complete_job(job_id, outcome={"file": final})
print("job", job_id, "done:", final)
print("steps:", [(s["step_id"], s["status"]) for s in client.list_steps(job_id)])
