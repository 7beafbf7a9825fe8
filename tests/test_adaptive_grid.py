"""The adaptive-switch grid (the second set of learning curves): its cells are distinct, every one
a valid trial on seeds nothing else used, and a trained trial's config maps back to its cell."""

from experiments import adaptive_grid, switch_grid
from sweeper.space import SearchSpace, trial_config_for


def test_every_cell_is_a_distinct_trial_that_maps_back_to_itself():
    grid = adaptive_grid.grid()
    cells = adaptive_grid.cells()
    assert len(cells) == len({grid.key(c) for c in cells}) == 13 * 2 * 2 * 2
    _, space = grid.space_for(cells, 2)
    spec = SearchSpace.model_validate(space)
    for cell in cells:
        config = trial_config_for(spec, cell).model_dump(mode="json")
        assert adaptive_grid.cell_of(config) == cell
        assert config["steps"] == switch_grid.MAX_STEPS and config["eval"]["seed"] == adaptive_grid.EVAL_SEED
    assert not set(adaptive_grid.SEEDS) & set(switch_grid.SEEDS)  # fresh training seeds


def test_the_first_seed_s_whole_grid_trains_first():
    seeds = [c["seed"] for c in adaptive_grid.cells()]
    assert seeds == sorted(seeds)
