"""The Ray tests share the Slurm tier's fixtures (the real test cluster)."""

from tests.slurm.conftest import slurm_cluster  # noqa: F401
