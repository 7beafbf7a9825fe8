"""One thin adapter per framework; nothing else in the project imports these frameworks.

    ray_tune         driver side of Ray Tune: ray.init, Tuner(OptunaSearch + ASHA), restore, events
    ray_trainable    trial side of Ray Tune: the trainer as a function trainable
    optuna_search    a SearchSpace as an Optuna define-by-run function; samplers; the study
    mlflow_tracking  MLflow: one parent run per sweep, one child run per trial
"""
