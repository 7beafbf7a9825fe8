"""The hybrid DAT trainer: tasks, model, schedule, loop. No Ray, Optuna or MLflow in here
except `sweeper.adapters.ray_trainable`, the thin Ray Tune adapter.

`trainables.config` (and the modules it needs) imports without torch, so the CLI can
validate a config in well under a second; the loop is `trainables.train.train`."""

from trainables.config import ConfigError, TrialConfig, load_trial_config, trial_config_from_dict

__all__ = ["ConfigError", "TrialConfig", "load_trial_config", "trial_config_from_dict"]
