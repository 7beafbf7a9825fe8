"""Othello: the vectorised generator against a plain reference, the task's targets and metrics
against direct computations and closed forms, the sample command, and a short training run."""

import math
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from trainables.config import ConfigError, TaskConfig, TrialConfig, load_trial_config, trial_config_from_dict, with_overrides
from trainables.othello import (PAD, SQUARE_TO_TOKEN, TOKEN_TO_SQUARE, VOCAB_SIZE, evaluate_othello, games_to_batch, main,
                                make_othello_eval_sets)
from trainables.othello_game import (BLACK, ReferenceGame, generate_games, square_index, square_name, unpack)
from trainables.set_complement import soft_cross_entropy
from trainables.train import train


def _squares(bitboard) -> list[int]:
    return torch.nonzero(unpack(bitboard)).flatten().tolist()


def _replay_against_reference(games, g: int) -> int:
    """Replay game g in the reference, checking every legal set, flip, colour, pass and the end.
    Returns the number of passes seen."""
    ref, passes = ReferenceGame(), 0
    n = int(games.length[g])
    for t in range(n):
        if games.passed[g, t]:
            ref.pass_turn()  # raises unless the player due had no move and the other has one
            passes += 1
        assert _squares(games.legal[g, t]) == ref.legal(), (g, t)  # the same legal set, after any pass
        assert int(games.colour[g, t]) == ref.to_move
        turned = ref.play(int(games.moves[g, t]))  # raises if the move is illegal
        assert _squares(games.flips[g, t]) == turned, (g, t)
        if not ref.over() and t + 1 < games.moves.shape[1]:
            assert not ref.legal() or not games.passed[g, t + 1]  # no pass while a move exists
    assert bool(games.over[g]) == ref.over()
    if ref.over():
        assert int(games.legal[g, n]) == 0 and (games.moves[g, n:] == -1).all() and (games.colour[g, n:] == 0).all()
    else:
        assert _squares(games.legal[g, n]) == (ref.legal() or ref.legal(-ref.to_move))
    return passes


# --------------------------------------------------------------------------- the generator


def test_the_start_position_and_black_s_first_moves():
    ref = ReferenceGame()
    assert [square_name(i) for i, c in enumerate(ref.board()) if c == BLACK] == ["e4", "d5"]
    assert [square_name(i) for i in ref.legal()] == ["d3", "c4", "f5", "e6"]
    games = generate_games(5, torch.Generator().manual_seed(0), max_moves=1)
    assert all(_squares(legal) == [19, 26, 37, 44] for legal in games.legal[:, 0])
    assert (games.colour[:, 0] == BLACK).all()


@pytest.mark.parametrize("seed", range(6))
def test_generator_equals_the_reference_on_seeded_games(seed):
    # 6 seeds x 100 games = 600 full games: every legal set, flip, colour, pass and end
    games = generate_games(100, torch.Generator().manual_seed(seed))
    passes = sum(_replay_against_reference(games, g) for g in range(100))
    assert passes > 0 or seed > 0  # seed 0 holds games with passes: the branch is exercised
    assert games.over.all()  # a full-length generation ends every game


def test_passes_and_early_ends_occur_and_are_checked():
    games = generate_games(400, torch.Generator().manual_seed(14))
    assert games.passed.any() and (games.length < 60).sum() == 7  # both rare paths are in this sample
    for g in torch.nonzero(games.passed.any(1) | (games.length < 60)).flatten().tolist():
        _replay_against_reference(games, g)


def test_a_cut_generation_is_the_prefix_of_the_full_one_and_stays_open():
    full = generate_games(50, torch.Generator().manual_seed(4))
    cut = generate_games(50, torch.Generator().manual_seed(4), max_moves=20)
    assert torch.equal(cut.moves, full.moves[:, :20]) and torch.equal(cut.legal, full.legal[:, :21])
    assert not cut.over.any()  # no game ends within 20 moves here
    for g in range(5):
        _replay_against_reference(cut, g)


def test_same_seed_same_games_other_seed_other_games():
    a, b = (generate_games(20, torch.Generator().manual_seed(9)) for _ in range(2))
    c = generate_games(20, torch.Generator().manual_seed(10))
    assert torch.equal(a.moves, b.moves) and torch.equal(a.legal, b.legal) and torch.equal(a.flips, b.flips)
    assert not torch.equal(a.moves, c.moves)


def test_moves_are_uniform_over_the_legal_set():
    first = generate_games(4000, torch.Generator().manual_seed(2), max_moves=1).moves[:, 0]
    counts = torch.bincount(first, minlength=64)[[19, 26, 37, 44]].float()
    assert counts.sum() == 4000
    assert ((counts - 1000).abs() < 5 * math.sqrt(4000 * 0.25 * 0.75)).all()  # binomial, within 5 sigma


def test_square_names_round_trip():
    assert [square_index(square_name(i)) for i in range(64)] == list(range(64))
    assert square_index("a1") == 0 and square_index("h8") == 63 and square_index("d5") == 35
    with pytest.raises(ValueError, match="not a square"):
        square_index("i9")


# --------------------------------------------------------------------------- the sample command


def _replay_text(line: str) -> None:
    """A printed game replays legally: `pass` exactly where the player to move has none, and it ends the game."""
    ref = ReferenceGame()
    for word in line.split():
        if word == "pass":
            ref.pass_turn()
        else:
            assert ref.legal(), f"{word}: the player to move must pass first"
            ref.play(square_index(word))
    assert ref.over()


def test_printed_games_replay_legally(capsys):
    assert main(["sample", "--n", "60", "--seed", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 60
    for line in lines:
        _replay_text(line)
    assert any("pass" in line for line in lines)  # the pass notation is exercised


def test_sample_runs_as_a_module_and_is_deterministic():
    cmd = [sys.executable, "-m", "trainables.othello", "sample", "--n", "3", "--seed", "1"]
    a, b = (subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120) for _ in range(2))
    assert a.returncode == 0 and a.stdout == b.stdout and len(a.stdout.splitlines()) == 3


@pytest.mark.parametrize("argv", [["sample", "--n", "0"], ["sample", "--n", "x"], [], ["sample", "--bogus"]])
def test_bad_arguments_give_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: python -m trainables.othello")


# --------------------------------------------------------------------------- the task


def test_vocabulary_is_the_60_playable_squares_then_pad():
    assert VOCAB_SIZE == 61 and PAD == 60 and len(TOKEN_TO_SQUARE) == 60
    assert [square_name(int(s)) for s in TOKEN_TO_SQUARE[[0, 26, 27, 32, 33, 59]]] == ["a1", "c4", "f4", "c5", "f5", "h8"]
    assert (SQUARE_TO_TOKEN[[27, 28, 35, 36]] == -1).all()
    assert torch.equal(SQUARE_TO_TOKEN[TOKEN_TO_SQUARE], torch.arange(60))


def test_targets_are_uniform_over_the_next_player_s_legal_moves():
    games = generate_games(40, torch.Generator().manual_seed(3))
    batch = games_to_batch(games, 60)
    assert batch.tokens.shape == (40, 60) and batch.target.shape == (40, 60, VOCAB_SIZE)
    for g in range(40):
        ref = ReferenceGame()
        n = int(games.length[g])
        for t in range(n):
            ref.play(int(TOKEN_TO_SQUARE[batch.tokens[g, t]]))
            if ref.must_pass():
                ref.pass_turn()
            legal = ref.legal()
            assert bool(batch.mask[g, t]) == bool(legal)  # not asked after the game's last move
            expected = torch.zeros(VOCAB_SIZE)
            if legal:
                expected[SQUARE_TO_TOKEN[legal]] = 1.0 / len(legal)
            assert torch.allclose(batch.target[g, t], expected)
        assert (batch.tokens[g, n:] == PAD).all() and not batch.mask[g, n:].any()


def test_played_targets_are_the_next_move_of_the_game_one_hot_inside_the_legal_set():
    from trainables.othello import OthelloTask, played_next

    games = generate_games(200, torch.Generator().manual_seed(4), max_moves=21)
    played, legal = played_next(games, 20), games_to_batch(games, 20)
    assert torch.equal(played.tokens, legal.tokens)
    asked = played.mask
    assert torch.equal(asked, legal.mask & (games.moves[:, 1:21] >= 0)) and asked.sum() > 0
    assert torch.allclose(played.target[asked].sum(-1), torch.ones(int(asked.sum())))
    token = played.target.argmax(-1)
    assert torch.equal(token[asked], SQUARE_TO_TOKEN[games.moves[:, 1:21][asked]])
    assert (legal.target[asked].gather(-1, token[asked][:, None]) > 0).all()  # always a legal move
    # averaged over many games, the played move is distributed as the legal target (the first reply to f5 here)
    many = generate_games(6000, torch.Generator().manual_seed(5), max_moves=2)
    first = played_next(many, 1)
    f5 = many.moves[:, 0] == many.moves[0, 0]
    assert torch.allclose(first.target[f5, 0].mean(0), games_to_batch(many, 1).target[f5, 0].mean(0), atol=0.03)
    task = OthelloTask(TaskConfig(name="othello", max_len=15, othello_targets="played"))
    batch = task.sample_train(8, torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (8, 15) and set(batch.target[batch.mask].sum(-1).tolist()) == {1.0}
    with pytest.raises(ValueError, match="othello_targets is othello's"):
        TaskConfig(othello_targets="played")


def test_the_worked_example_of_the_docstring():
    games = generate_games(2000, torch.Generator().manual_seed(0), max_moves=3)
    g = next(i for i, m in enumerate(games.moves.tolist()) if m == [37, 43, 18])  # f5 d6 c3
    batch = games_to_batch(games, 3)
    assert batch.tokens[g].tolist() == [33, 39, 18]
    named = [sorted(square_name(int(TOKEN_TO_SQUARE[i])) for i in torch.nonzero(row[:60]).flatten()) for row in batch.target[g]]
    assert named == [["d6", "f4", "f6"], ["c3", "c4", "c5", "c6", "c7"], ["d3", "f3", "f4", "g5"]]


def test_soft_target_loss_equals_a_direct_computation():
    batch = games_to_batch(generate_games(4, torch.Generator().manual_seed(1)), 60)
    logits = torch.randn(*batch.target.shape, generator=torch.Generator().manual_seed(0))
    direct = [-sum(float(batch.target[b, t, v]) * float(logits[b, t].log_softmax(-1)[v]) for v in range(VOCAB_SIZE))
              for b in range(4) for t in range(60) if batch.mask[b, t]]
    assert soft_cross_entropy(logits, batch) == pytest.approx(sum(direct) / len(direct), rel=1e-5)


def test_eval_sets_read_k_n_moves_and_ask_only_the_k_th_range():
    cfg = TaskConfig(name="othello", max_len=10)
    sets = make_othello_eval_sets(cfg, (1, 2, 3), 16, seed=5)
    assert {k: s.tokens.shape for k, s in sets.items()} == {1: (16, 10), 2: (16, 20), 3: (16, 30)}
    for k, s in sets.items():
        asked = torch.nonzero(s.mask.any(0)).flatten()
        assert asked.min() == (k - 1) * 10 and asked.max() == k * 10 - 1
    assert torch.equal(sets[3].tokens[:, :20], sets[2].tokens)  # the same games at every range


class _Fixed(torch.nn.Module):
    """A 'model' with fixed logits for known rows: each row is looked up by its tokens."""

    def __init__(self, logits, tokens):
        super().__init__()
        self.logits, self.tokens = logits, tokens

    def forward(self, tokens):
        T = tokens.shape[1]
        row = (tokens[:, None, :] == self.tokens[None, :, :T]).all(-1).int().argmax(1)
        return self.logits[row, :T]


def _full_eval(n_games=12, max_len=20):
    cfg = TaskConfig(name="othello", max_len=max_len)
    sets = make_othello_eval_sets(cfg, (1, 2, 3), n_games, seed=7)
    return sets, sets[3]


@pytest.mark.parametrize("off", [-1e4, -math.inf])
def test_a_perfect_predictor_scores_legal_top1_1_and_zero_tv_illegal_mass_and_kl(off):
    sets, full = _full_eval()
    perfect = torch.where(full.target > 0, full.target.clamp(min=1e-30).log(), torch.full_like(full.target, off))
    m = evaluate_othello(_Fixed(perfect, full.tokens), sets, batch_size=5)
    for k in (1, 2, 3):
        assert m[f"acc_{k}x"] == 1.0 and m[f"tv_{k}x"] < 1e-6 and m[f"illegal_mass_{k}x"] < 1e-6 and abs(m[f"loss_{k}x"]) < 1e-5


def test_a_uniform_over_empty_squares_predictor_scores_the_closed_form():
    sets, full = _full_eval()
    # after move t + 1 (position t) the board has 60 - (t + 1) empty squares E; the legal set L is among them
    logits = torch.full(full.target.shape, -math.inf)
    expected = {k: [0.0, 0.0, 0.0, 0] for k in (1, 2, 3)}  # sums of 1 - |L|/E, log(E/|L|), hit; count
    for g in range(full.tokens.shape[0]):
        ref = ReferenceGame()
        for t in range(60):
            if full.tokens[g, t] == PAD:
                break
            ref.play(int(TOKEN_TO_SQUARE[full.tokens[g, t]]))
            if ref.must_pass():
                ref.pass_turn()
            empty = [s for s, c in enumerate(ref.board()) if c == 0]
            assert len(empty) == 60 - (t + 1)
            logits[g, t, SQUARE_TO_TOKEN[empty]] = 0.0
            legal = ref.legal()
            if not legal:
                continue
            k = t // 20 + 1
            E, L = len(empty), len(legal)
            expected[k][0] += 1 - L / E  # mass off the legal set = TV (the target covers only L)
            expected[k][1] += math.log(E / L)  # KL(uniform on L || uniform on E)
            expected[k][2] += float(min(empty) in legal)  # ties: argmax takes the lowest token, the lowest square
            expected[k][3] += 1
    m = evaluate_othello(_Fixed(logits, full.tokens), sets, batch_size=64)
    for k, (off_legal, kl, hits, n) in expected.items():
        assert m[f"illegal_mass_{k}x"] == pytest.approx(off_legal / n, abs=1e-6)
        assert m[f"tv_{k}x"] == pytest.approx(off_legal / n, abs=1e-6)
        assert m[f"loss_{k}x"] == pytest.approx(kl / n, abs=1e-5)
        assert m[f"acc_{k}x"] == pytest.approx(hits / n)


# --------------------------------------------------------------------------- config and training


def test_the_config_refuses_ranges_past_the_60th_move_in_one_line():
    with pytest.raises(ConfigError) as info:
        trial_config_from_dict({"task": {"name": "othello", "max_len": 20}}, source="x.yaml")  # default multipliers 1..4
    assert str(info.value) == ("x.yaml: othello needs `task.max_len * max(eval.multipliers) <= 60` "
                               "(a game has at most 60 moves), got 20 * 4 = 80")
    TrialConfig.model_validate({"task": {"name": "othello", "max_len": 15}})  # 4 x 15 = 60 is fine
    with pytest.raises(ValueError, match="state_acc needs state-tracking targets; task othello"):
        TrialConfig.model_validate({"task": {"name": "othello", "max_len": 20}, "eval": {"multipliers": [1, 2, 3]},
                                    "dat": {"mode": "adaptive", "criterion": "state_acc"}})
    with pytest.raises(ConfigError) as info:
        trial_config_from_dict({"task": {"name": "othello", "max_len": 15}, "eval": {"curve_window": 5}}, source="x.yaml")
    assert str(info.value) == "x.yaml: eval.curve_window needs a sequence task (modsum_recall, modsum, recall), got task othello"


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny(**overrides) -> TrialConfig:
    small = {"model.d_model": 32, "model.n_layers": 1, "model.n_heads": 2, "optim.batch_size": 16, "optim.warmup_steps": 10,
             "eval.n_sequences": 16, "eval.every": 30, "steps": 60, "task.max_len": 8, "device": "cpu"}
    return with_overrides(load_trial_config("othello"), {**small, **overrides})


def test_the_preset_is_the_gpt_style_decoder_scored_at_1x_to_3x():
    cfg = load_trial_config("othello")
    assert cfg.task.name == "othello" and cfg.model.mixer == "none" and cfg.model.positional in ("rope", "none")
    assert cfg.eval.multipliers == (1, 2, 3) and cfg.task.max_len == 20 and cfg.dat.mode == "none"


@pytest.mark.slow
def test_a_short_training_run_lowers_the_loss_and_is_deterministic(one_thread):
    reports = [[], []]
    for run in reports:
        result = train(_tiny(), report=lambda m, _, run=run: run.append(m))
        assert result.status == "completed"
    first, last = reports[0]
    assert last["loss"] < first["loss"] - 0.3  # 60 steps already learn which squares are never legal
    assert last["acc_1x"] > first["acc_1x"]
    assert {k for k in last if k.endswith("_3x")} == {"acc_3x", "tv_3x", "illegal_mass_3x", "loss_3x"}
    strip = lambda m: {k: v for k, v in m.items() if k != "steps_per_s"}  # noqa: E731
    assert [strip(m) for m in reports[0]] == [strip(m) for m in reports[1]]  # same seed, same run


@pytest.mark.slow
def test_the_dat_hybrid_and_the_ema_run_on_othello(one_thread):
    cfg = _tiny(**{"model.mixer": "lstm", "dat.mode": "fixed", "dat.switch_step": 30, "ema.decay": 0.9, "steps": 40})
    result = train(cfg)
    assert result.status == "completed" and "raw_acc_3x" in result.metrics and result.metrics["switch_step"] == 30


def test_training_on_played_moves_runs_and_is_scored_against_the_legal_set(one_thread):
    result = train(_tiny(**{"task.othello_targets": "played", "steps": 20}))
    assert result.status == "completed" and 0.0 <= result.metrics["acc_1x"] <= 1.0 and math.isfinite(result.metrics["loss_1x"])
