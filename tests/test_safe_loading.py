"""Safe loading: checkpoints hold tensors and plain values only; YAML limits; memory estimates."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest
import torch

from tests.conftest import ROOT, sweeper_cmd
from trainables import footprint, safe_yaml
from trainables.config import ConfigError, TrialConfig, load_trial_config, preset_names
from trainables.train import CHECKPOINT_FILE, read_checkpoint

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class Payload:
    """Pickles to a call that creates a file: proof that loading ran code."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def _trained_run(tmp_path) -> pathlib.Path:
    out = tmp_path / "run"
    r = subprocess.run(sweeper_cmd("trial", "tiny", "--steps", "20", "--out", out, "--threads", "1"),
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def test_a_checkpoint_with_a_pickled_object_is_refused_and_runs_nothing(tmp_path):
    out = _trained_run(tmp_path)
    ckpt = out / "checkpoint" / CHECKPOINT_FILE
    state = torch.load(ckpt, weights_only=True)
    marker = tmp_path / "pwned"
    state["metrics"] = {"note": Payload(marker)}
    torch.save(state, ckpt)
    with pytest.raises(ConfigError) as err:
        read_checkpoint(ckpt.parent)
    assert "refused" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()
    # the same through the CLI: one line, exit 2, no code run
    r = subprocess.run(sweeper_cmd("trial", "tiny", "--steps", "40", "--out", out, "--resume"),
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "weights_only" in r.stderr
    assert not marker.exists()


def test_a_truncated_checkpoint_is_one_line(tmp_path):
    out = _trained_run(tmp_path)
    ckpt = out / "checkpoint" / CHECKPOINT_FILE
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    with pytest.raises(ConfigError, match="not a readable checkpoint"):
        read_checkpoint(ckpt.parent)


def test_a_real_checkpoint_loads_with_weights_only(tmp_path):
    out = _trained_run(tmp_path)
    state = read_checkpoint(out / "checkpoint")
    assert state["step"] == 20 and "model" in state and "optimizer" in state


# --------------------------------------------------------------------------- YAML limits


def test_anchors_aliases_and_merge_keys_within_limits_are_fine():
    text = "base: &b {d_model: 16, n_heads: 2}\nmodel:\n  <<: *b\n  n_layers: 1\nlist: [*b, *b]\n"
    data = safe_yaml.load_yaml_text(text, "t.yaml")
    assert data["model"] == {"d_model": 16, "n_heads": 2, "n_layers": 1} and data["list"] == [data["base"]] * 2


def test_depth_limit_is_exact():
    def nested(depth):
        return "a: " + "[" * depth + "]" * depth + "\n"

    safe_yaml.load_yaml_text(nested(safe_yaml.MAX_DEPTH - 1), "ok.yaml")  # the root mapping is one level
    with pytest.raises(ConfigError, match="nested deeper than"):
        safe_yaml.load_yaml_text(nested(safe_yaml.MAX_DEPTH), "deep.yaml")


def test_expansion_limit_counts_aliases():
    ten = "l0: &l0 [" + ", ".join(["x"] * 99) + "]\n"  # 100 nodes
    under = ten + "l1: [" + ", ".join(["*l0"] * 900) + "]\n"  # ~90,000 when expanded
    over = ten + "l1: [" + ", ".join(["*l0"] * 1100) + "]\n"  # ~110,000
    assert len(safe_yaml.load_yaml_text(under, "u.yaml")["l1"]) == 900
    with pytest.raises(ConfigError, match="expands to more than"):
        safe_yaml.load_yaml_text(over, "o.yaml")


@pytest.mark.parametrize("text, key", [("a: 1\nb: 2\na: 3\n", "a"), ("x:\n  y: 1\n  y: 2\n", "x.y"),
                                      ("l:\n  - {k: 1, k: 2}\n", "l[0].k"),
                                      ("o: {<<: {lr: 0.001}, <<: {lr: 0.003}}\n", "o.<<")])  # the first merge was dropped
def test_duplicate_keys_are_named_with_their_path(text, key):
    with pytest.raises(ConfigError) as err:
        safe_yaml.load_yaml_text(text, "d.yaml")
    assert str(err.value).startswith(f"d.yaml: {key}: duplicate key")


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_fits_a_laptop(preset):
    assert footprint.estimate_bytes(load_trial_config(preset)) < 4 * 2**30


def test_the_estimate_names_the_key_that_drives_it():
    base = load_trial_config("tiny")
    big_batch = TrialConfig.model_validate({**base.model_dump(), "optim": {"batch_size": 500_000}})
    with pytest.raises(ConfigError, match=r"x\.yaml: optim\.batch_size: this config needs about"):
        footprint.check_fits(big_batch, "x.yaml", available=8 * 2**30)
    big_eval = TrialConfig.model_validate({**base.model_dump(), "eval": {"n_sequences": 5_000_000, "batch_size": 8}})
    with pytest.raises(ConfigError, match=r"eval\.n_sequences"):
        footprint.check_fits(big_eval, "x.yaml", available=8 * 2**30)
    footprint.check_fits(base, "x.yaml", available=8 * 2**30)


def test_the_parameter_count_matches_the_model():
    from trainables.model import HybridLM
    from trainables.objectives import make_objective

    for preset in ("hybrid_dat", "transformer", "lstm", "set_complement"):
        cfg = load_trial_config(preset)
        model = HybridLM(cfg.model, make_objective(cfg).vocab_size)
        real = sum(p.numel() for p in model.parameters())
        assert real <= footprint.n_parameters(cfg) <= 1.5 * real + 20_000, (preset, real, footprint.n_parameters(cfg))


@pytest.mark.parametrize("text, value", [("1e-3", 0.001), ("2.5E4", 25000.0), ("-.5", -0.5), ("+.5e-3", 0.0005),
                                         ("1.0e3", 1000.0), ("10", 10), ("1.5", 1.5), (".5", 0.5),
                                         ('"1e-3"', "1e-3"), ("1e", "1e"), ("e3", "e3")])
def test_a_number_with_an_exponent_is_read_as_the_number_it_is(text, value):
    # YAML 1.1 reads 1e-3 (no dot, no signed exponent) as text: a space's `low: 1e-3` was refused as a number in quotes
    loaded = safe_yaml.load_yaml_text(f"v: {text}\n", "n.yaml")["v"]
    assert loaded == value and type(loaded) is type(value)
