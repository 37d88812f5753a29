"""Generators the job's own code makes without a seed (``launcher.job.observe.seeding``), in this process."""

from __future__ import annotations

import random

import numpy as np
import pytest

from launcher.job.observe import seeding


@pytest.fixture
def noting(monkeypatch):
    """NumPy's entropy and ``random.Random`` wrapped for this test file's code only, put back after."""
    monkeypatch.setattr(seeding, "unseeded", [])
    monkeypatch.setattr(np.random.bit_generator, "randbits", np.random.bit_generator.randbits)
    monkeypatch.setattr(random.Random, "__init__", random.Random.__init__)
    ours = lambda filename: filename == __file__  # noqa: E731
    seeding._wrap_entropy(np, ours)
    seeding._wrap_random_init(random, ours)
    return seeding.unseeded


def test_generators_made_without_a_seed_are_named_with_their_call_site(noting):
    np.random.RandomState()
    np.random.Generator(np.random.PCG64(None))
    random.Random()
    calls = [u["call"] for u in noting]
    assert calls == ["np.random.RandomState()", "np.random.PCG64()", "random.Random()"], noting
    assert all(u["where"].startswith("test_seeding.py:") for u in noting)


def test_seeded_generators_are_not_named(noting):
    np.random.RandomState(3)
    np.random.RandomState(seed=3)
    np.random.default_rng(7)
    np.random.PCG64(
        12,
    )
    random.Random(5)
    assert noting == []
