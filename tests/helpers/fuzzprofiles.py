"""hypothesis profiles of the fuzz tests: ``make test`` runs "ci" (a few dozen examples per
target), ``make fuzz`` runs "fuzz" (HYPOTHESIS_PROFILE=fuzz, thousands of examples)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=40, deadline=5000,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("fuzz", max_examples=3000, deadline=10000,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
