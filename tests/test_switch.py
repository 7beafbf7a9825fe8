"""Adaptive switch criteria, driven by synthetic signal streams: exactly when each one fires."""

import math

import pytest

from trainables.config import DATConfig, TrialConfig
from trainables.dat import DATSchedule
from trainables.switch import LossPlateau, Signals, SmoothedValue
from trainables.train import train


def _schedule(**dat) -> DATSchedule:
    return DATSchedule(DATConfig(mode="adaptive", **dat), has_attention=True)


def _switch_step(schedule: DATSchedule, stream: list[Signals], steps: int | None = None) -> int | None:
    """Run the schedule as the trainer does: advance before step t, observe step t's signals after it."""
    for step in range(steps or len(stream)):
        if schedule.advance(step):
            return step
        schedule.observe(stream[step] if step < len(stream) else stream[-1])
    return None


def test_smoothed_value_is_bias_corrected():
    s = SmoothedValue(0.9)
    assert math.isnan(s.value)
    assert s.update(0.5) == pytest.approx(0.5)  # no pull towards the zero start
    assert s.update(0.5) == pytest.approx(0.5)
    assert SmoothedValue(0.0).update(0.7) == 0.7  # decay 0: the raw value


def test_state_acc_fires_the_step_after_the_raw_accuracy_reaches_the_threshold():
    accs = [0.1] * 20 + [0.96] * 20  # crosses 0.95 at step 20
    stream = [Signals(loss=1.0, state_acc=a) for a in accs]
    assert _switch_step(_schedule(criterion="state_acc", acc_threshold=0.95, smoothing=0.0, min_step=0, max_step=100), stream) == 21


def test_state_acc_smoothing_delays_the_switch_by_the_moving_average():
    # EMA with decay 0.5 from 0.0: after the jump to 1.0 at step 10 the smoothed value is
    # 1 - 0.5^j (up to bias correction) after j ones: it reaches 0.9 after 4 ones (steps 10..13)
    stream = [Signals(loss=1.0, state_acc=0.0)] * 10 + [Signals(loss=1.0, state_acc=1.0)] * 10
    s = _schedule(criterion="state_acc", acc_threshold=0.9, smoothing=0.5, min_step=0, max_step=100)
    got = _switch_step(s, stream)
    # smoothed after n=10+j observations: (1 - 0.5^j) / (1 - 0.5^(10+j)); >= 0.9 first for j = 4
    expected_j = next(j for j in range(1, 10) if (1 - 0.5**j) / (1 - 0.5 ** (10 + j)) >= 0.9)
    assert expected_j == 4 and got == 10 + expected_j


def test_min_step_holds_a_ready_criterion_back():
    stream = [Signals(loss=1.0, state_acc=1.0)] * 50
    assert _switch_step(_schedule(criterion="state_acc", smoothing=0.0, min_step=30, max_step=100), stream) == 30


def test_max_step_switches_even_if_the_criterion_never_fires():
    stream = [Signals(loss=1.0, state_acc=0.2)] * 100
    assert _switch_step(_schedule(criterion="state_acc", smoothing=0.0, min_step=0, max_step=40), stream) == 40


def test_loss_plateau_fires_after_patience_steps_without_relative_improvement():
    # improves by 10% per step until step 9, then flat: best is set at step 9
    losses = [0.9**t for t in range(10)] + [0.9**9] * 30
    stream = [Signals(loss=x) for x in losses]
    s = _schedule(criterion="loss_plateau", smoothing=0.0, plateau_delta=0.01, patience=5, min_step=0, max_step=100)
    # steps 10..14 bring no improvement: ready after observing step 14, switch before step 15
    assert _switch_step(s, stream) == 15


def test_loss_plateau_ignores_improvements_smaller_than_delta():
    losses = [1.0] + [1.0 - 0.001 * t for t in range(1, 40)]  # 0.1% per step: below a 1% delta
    crit = LossPlateau(DATConfig(mode="adaptive", criterion="loss_plateau", smoothing=0.0, plateau_delta=0.01, patience=3))
    for x in losses[:3]:
        crit.observe(Signals(loss=x))
    assert not crit.ready  # best at step 0, two steps since
    crit.observe(Signals(loss=losses[3]))
    assert crit.ready


def test_grad_norm_fires_when_the_recurrent_gradient_falls_to_a_fraction_of_its_peak():
    norms = [1.0, 2.0, 4.0, 3.0, 2.0, 1.5, 1.0, 0.5, 0.5]  # peak 4 at step 2; <= 0.25 * 4 = 1.0 at step 6
    stream = [Signals(loss=1.0, mixer_grad_norm=g) for g in norms]
    s = _schedule(criterion="grad_norm", smoothing=0.0, grad_ratio=0.25, min_step=0, max_step=100)
    assert _switch_step(s, stream) == 7


def test_a_missing_signal_is_an_error_not_a_silent_never():
    s = _schedule(criterion="state_acc", min_step=0, max_step=10)
    with pytest.raises(ValueError, match="state_acc"):
        s.observe(Signals(loss=1.0))


def test_criterion_state_round_trips_through_the_schedule():
    losses = [0.9**t for t in range(10)] + [0.9**9] * 30
    stream = [Signals(loss=x) for x in losses]
    kw = dict(criterion="loss_plateau", smoothing=0.5, plateau_delta=0.01, patience=5, min_step=0, max_step=100)
    a = _schedule(**kw)
    for step in range(12):
        a.advance(step), a.observe(stream[step])
    b = _schedule(**kw)
    b.load_state_dict(a.state_dict())
    fired = {}
    for name, s in (("a", a), ("b", b)):
        for step in range(12, 40):
            if s.advance(step):
                fired[name] = step
                break
            s.observe(stream[step])
    assert fired["a"] == fired["b"]


def test_ramp_scales_attention_in_linearly_after_the_switch():
    s = DATSchedule(DATConfig(mode="fixed", switch_step=10, ramp_steps=4), has_attention=True)
    for step in range(11):
        s.advance(step)
    assert [s.attn_scale(t) for t in range(10, 15)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert DATSchedule(DATConfig(mode="fixed", switch_step=0), has_attention=True).attn_scale(0) == 1.0


def test_adaptive_config_rules():
    with pytest.raises(ValueError, match="min_step <= max_step"):
        DATConfig(mode="adaptive", min_step=50, max_step=10)
    with pytest.raises(ValueError, match="max_step <= steps"):
        TrialConfig.model_validate({"dat": {"mode": "adaptive", "max_step": 500}, "steps": 100})


@pytest.mark.parametrize("criterion", ["state_acc", "loss_plateau", "grad_norm"])
def test_the_trainer_reports_the_step_an_adaptive_criterion_switched_at(criterion):
    cfg = TrialConfig.model_validate({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "dat": {"mode": "adaptive", "criterion": criterion, "min_step": 5, "max_step": 35, "smoothing": 0.5,
                "acc_threshold": 0.3, "patience": 3, "plateau_delta": 0.05, "grad_ratio": 0.9, "ramp_steps": 4},
        "eval": {"every": 10, "n_sequences": 8},
        "steps": 40,
    })
    reports = []
    train(cfg, report=lambda m, c: reports.append(m))
    switch = reports[-1]["switch_step"]
    assert 5 <= switch <= 35
    for m in reports:  # before the switch: inactive and -1; after: the same step everywhere
        if m["step"] <= switch:
            assert m["attention_active"] == 0.0 and m["switch_step"] == -1
        else:
            assert m["attention_active"] == 1.0 and m["switch_step"] == switch
