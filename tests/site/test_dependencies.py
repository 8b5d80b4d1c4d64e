"""The dependencies a fresh machine installs: each bounded to the series tested,
and requirements-lock.txt (what the Makefile installs through) holding, for each,
a version that pyproject.toml allows."""

from __future__ import annotations

import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
UPPER = {"<", "<=", "==", "~=", "==="}


def requirements() -> list[Requirement]:
    specs = list(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        specs += extra
    own = canonicalize_name(PROJECT["name"])
    return [r for r in map(Requirement, specs) if canonicalize_name(r.name) != own]


def locked() -> dict[str, list[str]]:
    """Each package's pinned versions whose markers hold here (one, normally)."""
    pins: dict[str, list[str]] = {}
    for line in (ROOT / "requirements-lock.txt").read_text().splitlines():
        if not line or line[0] in " #-":
            continue
        pin = Requirement(line)
        if pin.marker is None or pin.marker.evaluate():
            (version,) = (s.version for s in pin.specifier if s.operator == "==")
            pins.setdefault(canonicalize_name(pin.name), []).append(version)
    return pins


@pytest.mark.parametrize("requirement", requirements(), ids=str)
def test_every_dependency_is_bounded_above(requirement):
    assert {s.operator for s in requirement.specifier} & UPPER, requirement


@pytest.mark.parametrize("requirement", requirements(), ids=str)
def test_the_lock_pins_each_dependency_at_a_version_pyproject_allows(requirement):
    pins = locked().get(canonicalize_name(requirement.name))
    assert pins, f"{requirement.name} is not in the lock: make lock"
    assert len(pins) == 1, pins
    assert requirement.specifier.contains(pins[0], prereleases=True), (requirement, pins)


def test_the_websockets_lower_bound_is_one_the_sdk_works_with():
    (websockets,) = [r for r in requirements() if r.name == "websockets"]
    # 13.x's connect() is the legacy client, without the SDK's additional_headers.
    assert not websockets.specifier.contains("13.1")
    assert websockets.specifier.contains("14.0")
