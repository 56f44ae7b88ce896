"""Hypothesis profiles: ``ci`` for ``make test``, ``thorough`` for ``make test-thorough``.

Chosen with HYPOTHESIS_PROFILE. Tests that need their own example counts call
``examples(ci=..., thorough=...)`` so both numbers are visible at the test.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
THOROUGH = PROFILE == "thorough" or os.environ.get("TXJOIN_THOROUGH") == "1"

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=20, deadline=None, print_blob=True)
# For slow tests while developing: report the first failure without shrinking it.
settings.register_profile(
    "noshrink",
    deadline=None,
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(PROFILE)


def examples(ci: int, thorough: int) -> int:
    """The example count for the active profile."""
    return thorough if THOROUGH else ci
