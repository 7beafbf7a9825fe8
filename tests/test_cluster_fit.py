"""On an existing cluster, a trial no node can hold now gets a clear line (not a silent wait)."""

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.serial  # a bare ray.init() joins a `ray start` cluster of another test if one runs
def test_the_note_names_what_is_asked_and_the_largest_node():
    import ray

    from sweeper.adapters import ray_tune

    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        assert ray_tune.cluster_fit_note(1, 0) is None
        assert ray_tune.cluster_fit_note(2, 0) is None
        note = ray_tune.cluster_fit_note(3, 0)
        assert note and "asks for 3 CPU and 0 GPU" in note and "largest: 2 CPU, 0 GPU" in note
        assert "largest: 2 CPU" in ray_tune.cluster_fit_note(1, 1)
    finally:
        ray.shutdown()
