"""JDFL's targets and class-only collapse, by hand (SPEC C.2-C.4)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedcond.errors import FedcondError
from fedcond.jdfl.targets import JointLabelLoss, collapse, default_alpha, graded_weights, sample_slots

COS = np.array([[1.0, 0.2, -0.1], [0.2, 1.0, 0.5], [-0.1, 0.5, 1.0]])


def test_graded_weights_by_hand():
    w = graded_weights(0, COS, alpha=0.55, tau=0.1)
    e1, e2 = math.exp(0.2 / 0.1), math.exp(-0.1 / 0.1)
    assert w == pytest.approx([0.55, 0.45 * e1 / (e1 + e2), 0.45 * e2 / (e1 + e2)])
    for z in range(3):
        wz = graded_weights(z, COS, alpha=0.45, tau=0.1)
        assert wz.sum() == pytest.approx(1.0) and wz[z] == pytest.approx(0.45)
    assert graded_weights(0, np.ones((1, 1)), 0.55, 0.1).tolist() == [1.0]
    assert default_alpha(5) == 0.55 and default_alpha(6) == 0.45


def test_graded_target_sums_to_one_on_class_y_and_loss_matches_soft_cross_entropy():
    M, C = 3, 4
    w = tuple(graded_weights(1, COS, 0.55, 0.1))
    loss = JointLabelLoss("graded", M, C, own=1, weights=w)
    y = torch.tensor([0, 3, 2, 2])
    t = loss.target(y).view(4, M, C)
    assert torch.allclose(t.sum((1, 2)), torch.ones(4, dtype=torch.float64))
    for b in range(4):  # all mass on class y, alpha on the own slot
        assert t[b, :, y[b]].sum() == pytest.approx(1.0) and t[b, 1, y[b]] == pytest.approx(0.55)
    logits = torch.randn(4, M * C, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = -(t.view(4, -1) * F.log_softmax(logits, 1)).sum(1).mean()
    assert loss(logits, y).item() == pytest.approx(expected.item(), rel=1e-12)


def test_hard_scheme_is_cross_entropy_on_the_joint_label():
    logits = torch.randn(5, 12, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3, 1])
    loss = JointLabelLoss("hard", 3, 4, own=2)
    assert torch.equal(loss(logits, y), F.cross_entropy(logits, 2 * 4 + y))
    t = loss.target(y).view(5, 3, 4)
    assert torch.all(t[torch.arange(5), 2, y] == 1.0) and t.sum() == 5


def test_random_scheme_draws_a_seeded_slot_per_sample_and_step():
    M, C, n = 4, 3, 4000
    y = torch.arange(n) % C
    logits = torch.randn(n, M * C, generator=torch.Generator().manual_seed(2))
    logp = F.log_softmax(logits, 1).view(n, M, C)
    loss = JointLabelLoss("random", M, C, seed=(7, 1))
    first = loss(logits, y)
    # the loss is the mean of -log p(m_b, y_b) for some slot m_b per sample; find them and check uniformity
    again = JointLabelLoss("random", M, C, seed=(7, 1))
    assert torch.equal(again(logits, y), first)  # same seed, same draws
    assert not torch.equal(loss(logits, y), first)  # a new step draws anew
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([0x5107, 7, 1]).generate_state(1)[0]))
    m = torch.randint(0, M, (n,), generator=gen)
    assert first.item() == pytest.approx(-logp[torch.arange(n), m, y].mean().item(), rel=1e-6)
    counts = torch.bincount(m, minlength=M).float() / n
    assert torch.all((counts - 0.25).abs() < 0.03)


def test_random_scheme_with_phi_below_one_spreads_the_rest_over_the_class():
    M, C = 3, 2
    y = torch.tensor([1])
    logits = torch.zeros(1, M * C)  # uniform: log p = -log 6 everywhere, whatever the target
    loss = JointLabelLoss("random", M, C, phi=0.7, seed=(0,))
    assert loss(logits, y).item() == pytest.approx(math.log(6), rel=1e-6)


def test_one_slot_is_plain_cross_entropy_for_every_scheme():
    logits = torch.randn(6, 5, generator=torch.Generator().manual_seed(3))
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    for scheme in ("graded", "random", "hard"):
        assert torch.equal(JointLabelLoss(scheme, 1, 5, weights=(1.0,))(logits, y), F.cross_entropy(logits, y))


def test_collapse_sums_or_maxes_the_slots_probabilities():
    # M = 2 slots, C = 2 classes; softmax over the 4 outputs [(0,a), (0,b), (1,a), (1,b)]
    logits = torch.log(torch.tensor([[0.30, 0.00001, 0.30, 0.39999]]))
    assert torch.allclose(collapse(logits, 2, "sum"), torch.tensor([[0.60, 0.4]]), atol=1e-5)
    assert collapse(logits, 2, "sum").argmax(1).item() == 0  # class a: 0.6 in total
    assert collapse(logits, 2, "max").argmax(1).item() == 1  # class b: the single largest slot
    assert logits.argmax(1).item() == 3  # the raw argmax would name slot 1 of class b
    assert torch.equal(collapse(logits, 1), logits)
    with pytest.raises(FedcondError):
        collapse(logits, 2, "mean")
    with pytest.raises(FedcondError):
        JointLabelLoss("soft", 2, 2)


def test_random_scheme_drawn_per_sample_keeps_each_samples_slot_across_steps_and_batches():
    M, C, n = 4, 3, 2000
    x = torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    y = torch.arange(n) % C
    slots = sample_slots(x, M, salt=7)
    assert torch.equal(slots, sample_slots(x, M, salt=7))  # fixed for the run
    assert torch.equal(slots[100:164], sample_slots(x[100:164], M, salt=7))  # whatever the batch around it
    assert not torch.equal(slots, sample_slots(x, M, salt=8))  # another run's seed, another assignment
    counts = torch.bincount(slots, minlength=M).float() / n
    assert torch.all((counts - 0.25).abs() < 0.04)
    logits = torch.randn(n, M * C, generator=torch.Generator().manual_seed(6))
    logp = F.log_softmax(logits, 1).view(n, M, C)
    loss = JointLabelLoss("random", M, C, seed=(7, 1), draw="sample")
    first = loss(logits, y, x)
    assert torch.equal(loss(logits, y, x), first)  # a new step, the same slots
    assert first.item() == pytest.approx(-logp[torch.arange(n), slots, y].mean().item(), rel=1e-6)
    with pytest.raises(FedcondError):
        loss(logits, y)  # no inputs, no per-sample slot
    with pytest.raises(FedcondError):
        JointLabelLoss("random", M, C, draw="epoch")
