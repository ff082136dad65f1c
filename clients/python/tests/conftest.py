"""Fixtures: clients for the live server named by STRATA_URL / STRATA_API_KEY (an agent key),
STRATA_ADMIN_KEY and STRATA_ORG_ID (the agent key's org). `go test ./internal/pythontest`
starts a server and sets them; to run by hand, start one and export them."""

from __future__ import annotations

import os
import sys
import uuid
from typing import Callable, Iterator

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import strata  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402


def _env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        pytest.exit(f"{name} is not set: run these tests through `go test ./internal/pythontest` "
                    "(it starts a server), or start one and export STRATA_URL, STRATA_API_KEY, "
                    "STRATA_ADMIN_KEY and STRATA_ORG_ID", returncode=2)
    return v


@pytest.fixture(scope="session")
def url() -> str:
    return _env("STRATA_URL")


@pytest.fixture(scope="session")
def org() -> str:
    return _env("STRATA_ORG_ID")


@pytest.fixture()
def client(url: str) -> Iterator[strata.Strata]:
    c = strata.Strata(url, _env("STRATA_API_KEY"))
    yield c
    c.close()


@pytest.fixture()
def admin(url: str) -> Iterator[strata.Strata]:
    c = strata.Strata(url, _env("STRATA_ADMIN_KEY"))
    yield c
    c.close()


@pytest.fixture(scope="session")
def compliance_key(url: str, org: str) -> str:
    with strata.Strata(url, _env("STRATA_ADMIN_KEY")) as a:
        return a.create_key(org, "compliance", name="pytest-compliance")["key"]  # type: ignore[typeddict-item]


@pytest.fixture(scope="session")
def org_admin_key(url: str, org: str) -> str:
    with strata.Strata(url, _env("STRATA_ADMIN_KEY")) as a:
        return a.create_key(org, "admin", name="pytest-org-admin")["key"]  # type: ignore[typeddict-item]


@pytest.fixture()
def org_admin(url: str, org_admin_key: str) -> Iterator[strata.Strata]:
    """An admin key of the agent key's org (clears manual-review steps there)."""
    c = strata.Strata(url, org_admin_key)
    yield c
    c.close()


@pytest.fixture()
def compliance(url: str, compliance_key: str) -> Iterator[strata.Strata]:
    c = strata.Strata(url, compliance_key)
    yield c
    c.close()


@pytest.fixture()
def uid() -> Callable[[str], str]:
    """Unique ids per test, so tests are isolated on one server."""
    base = uuid.uuid4().hex[:10]
    return lambda name: f"py-{name}-{base}"


@pytest.fixture()
def proxy(url: str) -> Iterator[FaultProxy]:
    p = FaultProxy(url)
    yield p
    p.close()
