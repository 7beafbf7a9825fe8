"""Property tests (hypothesis): any document either loads or is refused with one bounded line.

Two sources of documents: random mutations of the shipped search spaces (a value replaced by
something of another type or size, a key dropped, renamed or added), and random documents
built from the format's keys. For each, `load_space` must either accept it, and then every
sampled trial config is one the trainer accepts, or raise a ConfigError whose message is one
line; any other exception is a bug. The CLI's printed line is checked on a sample of them.
"""

from __future__ import annotations

import copy
import io
import math
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from sweeper import cli
from sweeper.adapters.optuna_search import sample_configs
from sweeper.space import trial_config_for
from sweeper.space_file import load_space
from trainables import footprint
from trainables.config import ConfigError
from core.errors import MAX_LINE
from trainables.metrics import reported_metrics

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "search_spaces").glob("*.yaml"))
DOCS = {p.stem: yaml.safe_load(p.read_text()) for p in SHIPPED}
N_SAMPLES = 20  # sampled configs per accepted document (the shipped check uses 200)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.too_slow])

weird_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "acc_3x", "tv_3x", "max", "min", "asha", "fifo", "tpe", "cmaes", "lstm", "ssm", "cuda", "x" * 500]),
)
weird_values = st.recursive(weird_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_documents(draw):
    doc = copy.deepcopy(DOCS[draw(st.sampled_from(sorted(DOCS)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        leaf = path[-1]
        action = draw(st.sampled_from(["nudge", "nudge", "nudge", "replace", "replace", "delete", "add", "rename"]))
        value = parent[leaf]
        if action == "nudge" and isinstance(value, bool):
            parent[leaf] = not value
        elif action == "nudge" and isinstance(value, int):
            parent[leaf] = draw(st.sampled_from([value + 1, value - 1, value * 2, value // 2, 0, -value]))
        elif action == "nudge" and isinstance(value, float):
            parent[leaf] = value * draw(st.sampled_from([0.5, 0.9, 1.1, 2.0, -1.0, 0.0]))
        elif action in ("replace", "nudge"):
            parent[leaf] = draw(weird_values)
        elif action == "delete":
            del parent[leaf]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = draw(weird_values)
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(leaf)
    return doc


@st.composite
def random_documents(draw):
    """Documents made of the format's own keys with values near (and beyond) their limits."""
    ints = st.one_of(st.integers(-3, 12_000), st.sampled_from([0, 1, 2**31, 2**63, 10**20]))
    param = st.one_of(
        st.fixed_dictionaries({"type": st.just("int"), "low": ints, "high": ints},
                              optional={"step": ints, "log": st.booleans()}),
        st.fixed_dictionaries({"type": st.just("float"), "low": st.floats(-10, 10), "high": st.floats(-10, 10)},
                              optional={"log": st.booleans(), "step": st.floats(0, 5)}),
        st.fixed_dictionaries({"type": st.just("categorical"),
                               "choices": st.lists(st.sampled_from([None, True, 1, 2, "lstm", "ssm", "none"]), max_size=4)}),
    )
    sane_param = st.one_of(
        st.integers(0, 50).flatmap(lambda low: st.fixed_dictionaries(
            {"type": st.just("int"), "low": st.just(low), "high": st.integers(low + 1, low + 100)})),
        st.floats(1e-4, 1e-2).flatmap(lambda low: st.fixed_dictionaries(
            {"type": st.just("float"), "low": st.just(low), "high": st.floats(low * 1.5, 0.1), "log": st.booleans()})),
    )
    paths = st.sampled_from(["dat.switch_step", "optim.lr", "model.n_layers", "model.mixer", "ema.decay", "seed",
                             "model.d_model", "task.max_len", "eval.n_sequences", "optim.batch_size", "no.such.key"])
    doc = {"name": draw(st.sampled_from(["p", "prop-1", "p2", "p3", "p4", "", "a/b"])),
           "space": draw(st.dictionaries(paths, st.one_of(param, sane_param), min_size=1, max_size=3)),
           "fixed": {"model": {"d_model": 16, "n_heads": 2, "n_layers": 1}, "eval": {"n_sequences": 8}}}
    optional = {
        "metric": st.sampled_from(["acc_3x", "acc_1x", "tv_3x", "loss", "lr", "state_acc_2x", "acc_5x"]),
        "mode": st.sampled_from(["max", "min", None]),
        "budget": st.fixed_dictionaries({}, optional={"num_samples": ints, "max_steps": ints, "eval_every": ints,
                                                      "max_concurrent": ints}),
        "scheduler": st.fixed_dictionaries({}, optional={"type": st.sampled_from(["asha", "fifo", "hyperband"]),
                                                         "grace_period": ints, "max_t": ints,
                                                         "reduction_factor": st.floats(0, 5)}),
        "searcher": st.fixed_dictionaries({}, optional={"sampler": st.sampled_from(["tpe", "random", "cmaes", "qmc"]),
                                                        "seed": ints}),
        "resources": st.fixed_dictionaries({}, optional={"cpu": st.floats(0, 4), "gpu": st.floats(0, 2)}),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            doc[key] = draw(strategy)
    return doc


def _write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "space.yaml"
    try:
        path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    except yaml.YAMLError:
        pytest.skip("not representable as YAML")
    return path


def _check(path: Path) -> None:
    try:
        spec = load_space(path, n_samples=N_SAMPLES)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message and len(message) <= 3 * MAX_LINE, message[:1000]
        event("refused: " + message.split(": ")[1].split(".")[0][:20])
        return
    event("accepted")
    # accepted: every sampled point makes a trial config the trainer takes, reporting the metric
    for params in sample_configs(spec, str(path), 5):
        cfg = trial_config_for(spec, params)
        assert spec.metric in reported_metrics(cfg)
        assert all(math.isfinite(v) for v in params.values() if isinstance(v, float))
        if footprint.n_parameters(cfg) < 2_000_000:  # the trainer builds it and runs a step
            _one_step(cfg)


def _one_step(cfg) -> None:
    import torch

    from trainables.model import HybridLM
    from trainables.objectives import make_objective

    objective = make_objective(cfg)
    model = HybridLM(cfg.model, objective.vocab_size)
    batch = objective.sample_train(2, torch.Generator().manual_seed(0))
    out = objective.step(model(batch.tokens), batch, state_only=False)
    out.loss.backward()
    assert torch.isfinite(out.loss)


@SETTINGS
@given(doc=mutated_documents())
def test_mutated_shipped_spaces_load_or_give_one_line(tmp_path, doc):
    _check(_write(tmp_path, doc))


@SETTINGS
@given(doc=random_documents())
@example(doc={"name": "p", "space": {"dat.switch_step": {"type": "float", "low": -1.0, "high": 0.0, "step": 3.1e-142}},
              "fixed": {"model": {"d_model": 16, "n_heads": 2, "n_layers": 1}, "eval": {"n_sequences": 8}}})
def test_random_documents_load_or_give_one_line(tmp_path, doc):
    _check(_write(tmp_path, doc))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=st.one_of(mutated_documents(), random_documents()))
def test_the_cli_prints_one_bounded_line_or_succeeds(tmp_path, doc):
    path = _write(tmp_path, doc)
    err = io.StringIO()
    with redirect_stderr(err), redirect_stderr(err):
        try:
            code = cli.main(["validate", str(path), "--samples", "0"])
        except SystemExit as exit_:
            code = exit_.code
    printed = err.getvalue().strip()
    assert code in (0, 2), (code, printed)
    if code == 2:
        assert printed.count("\n") == 0 and len(printed) <= MAX_LINE + len("error: "), printed


@given(st.lists(st.text(alphabet="abcdefgh_", min_size=1, max_size=40), min_size=3, max_size=12))
def test_a_line_too_long_gives_up_the_start_of_its_paths_before_its_advice(parts):
    """A refusal that names two deep paths keeps the advice at its end: the paths lose their
    starts (their ends still name the files) before the line is cut."""
    from core.errors import one_line

    deep = "/" + "/".join(parts) + "/space.yaml"
    line = one_line(f"{deep}: missing: the space file is gone; put it back (a copy of {deep}), or pass --restart to start over")
    assert len(line) <= MAX_LINE and "\n" not in line
    assert line.endswith("or pass --restart to start over") and "space.yaml: missing" in line
