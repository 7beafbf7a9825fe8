"""HybridLM: causality for every mixer, attention on and off."""

import pytest
import torch

from trainables.config import ModelConfig
from trainables.model import CausalSelfAttention, HybridLM, rotate

VOCAB = 20


def _model(**kw) -> HybridLM:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_layers=2, n_heads=2, attn_zero_init=False, **kw)
    return HybridLM(cfg, VOCAB).eval()


SYSTEMS = [
    dict(mixer="lstm", attention=True),
    dict(mixer="lstm", attention=False),
    dict(mixer="none", attention=True),
    dict(mixer="none", attention=True, positional="sinusoidal"),
    dict(mixer="lstm", attention=True, positional="rope"),
]


@pytest.mark.parametrize("kw", SYSTEMS, ids=lambda kw: "-".join(str(v) for v in kw.values()))
@pytest.mark.parametrize("t", [0, 7, 15])
def test_changing_token_t_never_changes_outputs_before_t(kw, t):
    model = _model(**kw)
    x = torch.randint(VOCAB, (3, 16), generator=torch.Generator().manual_seed(t))
    y = x.clone()
    y[:, t] = (y[:, t] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.equal(a[:, :t], b[:, :t])
    assert not torch.allclose(a[:, t:], b[:, t:])  # and the change is visible from t on


def test_attn_scale_zero_equals_the_attention_free_model():
    hybrid = _model(mixer="lstm", attention=True)
    plain = _model(mixer="lstm", attention=False)
    missing, unexpected = plain.load_state_dict(hybrid.state_dict(), strict=False)
    assert not missing and all(".attn" in k for k in unexpected)
    x = torch.randint(VOCAB, (2, 12))
    hybrid.attn_scale = 0.0
    with torch.no_grad():
        assert torch.equal(hybrid(x), plain(x))
        hybrid.attn_scale = 1.0
        assert not torch.allclose(hybrid(x), plain(x))


def test_zero_initialised_attention_starts_as_identity():
    torch.manual_seed(0)
    model = HybridLM(ModelConfig(d_model=16, n_heads=2, attn_zero_init=True), VOCAB).eval()
    x = torch.randint(VOCAB, (2, 12))
    with torch.no_grad():
        on = model(x)
        model.attn_scale = 0.0
        assert torch.equal(on, model(x))


def test_rope_scores_depend_on_the_distance_between_positions_only():
    torch.manual_seed(0)
    L, hs = 12, 8
    q, k = torch.randn(hs).expand(1, 1, L, hs), torch.randn(hs).expand(1, 1, L, hs)  # one vector at every position
    scores = rotate(q) @ rotate(k).transpose(-1, -2)  # (1, 1, L, L)
    for d in range(-3, 4):
        diagonal = scores[0, 0].diagonal(d)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5), d
    assert not torch.allclose(scores[0, 0].diagonal(0)[0], scores[0, 0].diagonal(2)[0])  # but it does see the distance
    assert torch.allclose(rotate(q).norm(dim=-1), q.norm(dim=-1), atol=1e-5)  # a rotation
    assert torch.equal(rotate(q)[..., 0, :], q[..., 0, :])  # position 0 is not turned


def test_rope_needs_an_even_head_size():
    with pytest.raises(ValueError, match="must be even"):
        ModelConfig(d_model=12, n_heads=4, positional="rope")


def _reference_attention(attn, x):
    """CausalSelfAttention as it was before the cached tables: split, transpose, `rotate` q and k apart."""
    B, L, D = x.shape
    q, k, v = attn.qkv(x).split(D, dim=-1)
    q, k, v = (t.view(B, L, attn.n_heads, D // attn.n_heads).transpose(1, 2) for t in (q, k, v))
    q, k = rotate(q), rotate(k)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return attn.out(y.transpose(1, 2).reshape(B, L, D))


@pytest.mark.parametrize("L", [1, 23, 150])
def test_fast_rotary_attention_equals_the_reference_bit_for_bit(L):
    # cached tables in (B, L, 2nh, hs) layout, q and k in one go: same values and gradients as `rotate`
    torch.manual_seed(L)
    attn = CausalSelfAttention(64, 4, zero_init_out=False, rope=True)
    x = torch.randn(3, L, 64)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    fast, ref = attn(xa), _reference_attention(attn, xb)
    assert torch.equal(fast, ref)
    g = torch.randn_like(fast)
    fast.backward(g), ref.backward(g)
    assert torch.equal(xa.grad, xb.grad)


def test_rotary_tables_grow_with_the_length():
    attn = CausalSelfAttention(16, 2, zero_init_out=False, rope=True)
    for L in (5, 200, 7):  # longer than the first table, then shorter again
        x = torch.randn(2, L, 16)
        assert torch.equal(attn(x), _reference_attention(attn, x))
