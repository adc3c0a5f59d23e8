"""Fuzzed configs in all four formats (hypothesis, seeded, short in CI): every case either plans and
renders, or fails with an HpcplaceError that has a location; never a traceback, never slow.
`python bench/bench_fuzz.py` runs the same generator for >= 100,000 cases."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.safety.fuzzing import SEEDS, Chooser, make_case, run_case


@seed(20261122)
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_configs_fail_cleanly(tmp_path: Path, data: st.DataObject) -> None:
    chooser = Chooser(lambda lo, hi: data.draw(st.integers(lo, hi)))
    name, text, overrides = make_case(chooser)
    outcome = run_case(tmp_path / f"{name}.yaml", text, overrides, slow_s=60.0)
    assert outcome.kind in ("ok", "error"), (
        f"{outcome.kind} for a mutated {name} (--set {overrides}):\n{text[:2000]}\n---\n{outcome.detail}"
    )


def test_every_format_is_seeded() -> None:
    """Each format's reader is fuzzed: the file formats, and the command formats (their command in
    launch.driver) but NeMo-RL's, whose command names a config file of its own."""
    from hpcplace.config.formats import FORMATS, load_spec
    from tests.safety.fuzzing import REPO

    formats = {load_spec(REPO / "configs" / f"{name}.yaml").source_format for name in SEEDS}
    assert formats == set(FORMATS) - {"nemo_rl"}
