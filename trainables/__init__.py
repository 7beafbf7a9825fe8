"""The hybrid DAT trainer: tasks, model, schedule, loop. No Ray, Optuna or MLflow in here
except `trainables.tune`, the thin Ray Tune adapter."""

from trainables.config import ConfigError, TrialConfig, load_trial_config, trial_config_from_dict
from trainables.train import TrainResult, train

__all__ = ["ConfigError", "TrialConfig", "TrainResult", "load_trial_config", "train", "trial_config_from_dict"]
