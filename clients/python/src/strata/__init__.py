"""Strata: durable memory and durable jobs for long-running AI agents.

``Strata`` (blocking) and ``AsyncStrata`` (asyncio) talk to a Strata server over HTTP;
``client.job(id, owner=...)`` runs durable steps (``@job.step(name)``). Configuration comes
from STRATA_URL and STRATA_API_KEY unless passed explicitly.
"""

from ._async_client import AsyncStrata
from ._sync_client import Strata
from .durable import Job, StepRun, current_step
from .durable_async import AsyncJob, AsyncStepRun
from .errors import (
    Conflict, FieldError, Forbidden, LeaseLost, ManualReview, NotFound, PreconditionRequired, RateLimited,
    StepNotCompleted, StrataError, Unauthorized, Unavailable, ValidationError,
)

__version__ = "1.0.0"
API_VERSION = "1.0.0"

__all__ = [
    "Strata", "AsyncStrata", "Job", "AsyncJob", "StepRun", "AsyncStepRun", "current_step",
    "StrataError", "ValidationError", "Unauthorized", "Forbidden", "NotFound", "Conflict", "LeaseLost",
    "PreconditionRequired", "RateLimited", "Unavailable", "StepNotCompleted", "ManualReview", "FieldError",
    "__version__", "API_VERSION",
]
