"""Every fast path has a slow twin: the process pool must reproduce the loop backend bitwise."""

import numpy as np
import torch

from fedcond_testing import tagged_dataset
from fedcond.engine import Job, LoopEngine, PoolEngine, SGDConfig
from fedcond.engine.pool import _balanced_chunks
from fedcond.models import ModelSpec
from fedcond.scenarios import make_scenario


def _jobs(spec, sc, with_stats):
    torch.manual_seed(0)
    init = spec.build().state_dict()
    jobs = []
    for i, c in enumerate(sc.federation.clients):
        s = torch.randn(1, spec.stat_dim).expand(c.n_train, -1).contiguous() if with_stats else None
        jobs.append(Job(params=init, x=c.x_train, y=c.y_train, s=s, epochs=1 + i % 2, seed=(0, i)))
    return jobs


def test_pool_equals_loop_bitwise_unequal_clients():
    data = tagged_dataset(n_train=300, n_test=50)
    sc = make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=3, seed=0)  # 4 sizes: 30..70
    fed = sc.federation
    for stat_dim in (0, 8):
        spec = ModelSpec(fed.input_shape, fed.num_classes, stat_dim, "concat", fed.mean, fed.std)
        jobs = _jobs(spec, sc, stat_dim > 0)
        sgd = SGDConfig(batch_size=16)
        ref = LoopEngine(sgd).train(spec, jobs)
        pool = PoolEngine(sgd, workers=2)
        try:
            got = pool.train(spec, jobs)
        finally:
            pool.close()
        # the workers' CPU time comes back with their jobs (a run's cpu_seconds adds it to its own process's)
        assert pool.worker_cpu_seconds > 0
        for a, b in zip(ref, got):
            assert a.steps == b.steps and a.mean_loss == b.mean_loss
            for k in a.params:
                assert torch.equal(a.params[k], b.params[k]), k


def test_balanced_chunks_cover_every_job_once():
    work = [300, 10, 250, 40, 40, 5, 120]
    chunks = _balanced_chunks(work, 3)
    assert sorted(i for c in chunks for i in c) == list(range(7))
    loads = [sum(work[i] for i in c) for c in chunks]
    assert max(loads) - min(loads) <= 300


def test_regulariser_equals_the_loss_terms_it_stands_for():
    from fedcond.engine import Regulariser

    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    anchor = {k: torch.randn_like(v) for k, v in lin.named_parameters()}
    linear = {k: torch.randn_like(v) for k, v in lin.named_parameters()}
    x = torch.randn(5, 3)
    # autograd through mu/2 ||w - a||^2 + <w, l>
    loss = lin(x).pow(2).sum() + sum(0.3 / 2 * (p - anchor[k]).pow(2).sum() + (p * linear[k]).sum() for k, p in lin.named_parameters())
    loss.backward()
    expected = {k: p.grad.clone() for k, p in lin.named_parameters()}
    lin.zero_grad()
    lin(x).pow(2).sum().backward()
    Regulariser(mu=0.3, anchor=anchor, linear=linear).apply(list(lin.named_parameters()))
    for k, p in lin.named_parameters():
        assert torch.allclose(p.grad, expected[k], atol=1e-6)


def test_pool_losses_equal_loop_losses():
    data = tagged_dataset(n_train=200, n_test=50)
    sc = make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=2, seed=0)
    fed = sc.federation
    spec = ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)
    params = spec.build().state_dict()
    items = [(params, c.x_train, c.y_train, None) for c in fed.clients]
    pool = PoolEngine(SGDConfig(), workers=2)
    try:
        assert pool.losses(spec, items) == LoopEngine(SGDConfig()).losses(spec, items)
        assert pool.worker_cpu_seconds > 0
    finally:
        pool.close()


def test_vmap_engine_follows_the_loop_trajectory():
    """The accelerator backend (run here on the CPU): unequal clients, padded batches, momentum,
    statistics input and a regulariser all follow the loop backend to float tolerance."""
    from fedcond.engine import Regulariser, VmapEngine

    data = tagged_dataset(n_train=300, n_test=50)
    sc = make_scenario("E1", "mnist", lambda n: data, k=2, clients_per_cluster=3, seed=0)
    fed = sc.federation
    spec = ModelSpec(fed.input_shape, fed.num_classes, 8, "concat", fed.mean, fed.std)
    jobs = _jobs(spec, sc, with_stats=True)
    anchor = {k: v + 0.01 for k, v in jobs[0].params.items()}
    jobs[1].regulariser = Regulariser(mu=0.5, anchor=anchor)
    jobs[0].regulariser = Regulariser(mu=0.0, anchor=jobs[0].params)
    for j in jobs[2:]:
        j.regulariser = Regulariser(mu=0.1, anchor=anchor)
    sgd = SGDConfig(batch_size=16)
    ref = LoopEngine(sgd).train(spec, jobs)
    got = VmapEngine(sgd, device="cpu").train(spec, jobs)
    for a, b in zip(ref, got):
        assert a.steps == b.steps
        assert abs(a.mean_loss - b.mean_loss) < 1e-4
        for k in a.params:
            assert torch.allclose(a.params[k], b.params[k], atol=2e-5, rtol=1e-4), k


def test_mix_is_many_weighted_averages_at_once():
    from fedcond.engine import mix, weighted_average

    torch.manual_seed(0)
    models = [{"w": torch.randn(3, 2), "n": torch.tensor(i)} for i in range(4)]
    weights = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 2.0, 1.0, 1.0]])
    out = mix(models, weights)
    assert torch.allclose(out[0]["w"], (models[0]["w"] + models[1]["w"]) / 2, atol=1e-6)
    assert torch.allclose(out[1]["w"], (2 * models[1]["w"] + models[2]["w"] + models[3]["w"]) / 4, atol=1e-6)
    assert int(out[0]["n"]) == 1 and int(out[1]["n"]) == 3  # counters: max over the models mixed in
    assert torch.equal(weighted_average(models, weights[1])["w"], out[1]["w"])


class _Counted:
    """Wraps a model's features method, counting the samples it is asked for."""

    def __init__(self, model, noise: float = 0.0, per_sample: bool = False):
        self.features, self.samples, self.noise, self.per_sample = model.features, 0, noise, per_sample
        self.proj = torch.randn(28 * 28, 128, generator=torch.Generator().manual_seed(0)) if per_sample else None

    def __call__(self, x, s):
        self.samples += x.shape[0]
        if self.per_sample:  # elementwise only: no kernel can round a sample by its batch
            return (x.float().flatten(1)[:, :128] / 255.0) * self.proj[0]
        z = self.features(x, s)
        return z + self.noise * torch.rand_like(z) if self.noise else z  # noise: features that are not x's alone


def _head_job(spec, n=150, seed=0):
    from fedcond.algorithms.fedrep import HeadOnlyLoss

    torch.manual_seed(seed)
    x = torch.randint(0, 256, (n, *spec.input_shape), dtype=torch.uint8)
    y = torch.arange(n) % spec.num_classes
    return Job(params=spec.build().state_dict(), x=x, y=y, s=None, epochs=3, seed=(0, 1), loss_fn=HeadOnlyLoss())


def _train_counted(spec, job, monkeypatch, cache: bool, **counted):
    from fedcond.engine import local_sgd
    from fedcond.engine.local_sgd import FEATURE_CACHE_ENV, cpu_model, train_job

    monkeypatch.setenv(FEATURE_CACHE_ENV, "1" if cache else "0")
    monkeypatch.setattr(local_sgd, "_ROUNDS_DIFFERENTLY", set())  # what earlier models found stays with them
    model = cpu_model(spec)
    c = _Counted(model, **counted)
    model.features = c
    return train_job(model, job, SGDConfig(batch_size=32)), c.samples


def test_a_frozen_bodys_head_trains_bit_for_bit_as_the_per_step_path(monkeypatch):
    """FedRep's head update on the MNIST CNN, whatever the CPU's kernels: 150 samples (batches of 32 and 22) and
    130 (32 and 2, a size the kernels may round differently: then the check sends the job the per-step way)."""
    spec = ModelSpec((1, 28, 28), 10)
    for n in (150, 130):
        job = _head_job(spec, n)
        cached, _ = _train_counted(spec, job, monkeypatch, cache=True)
        plain, _ = _train_counted(spec, job, monkeypatch, cache=False)
        assert cached.steps == plain.steps and cached.mean_loss == plain.mean_loss
        assert all(torch.equal(cached.params[k], plain.params[k]) for k in plain.params), n
        assert all(torch.equal(cached.params[k], job.params[k]) for k in job.params if not k.startswith("fc2"))


def test_a_frozen_bodys_features_are_computed_once_per_job(monkeypatch):
    """Features that are the sample's alone: one pass over the job's samples (full batches), and one batch of each
    size the job trains on computed again as its step would (the check), instead of every step's."""
    spec = ModelSpec((1, 28, 28), 10)
    job = _head_job(spec)  # 150 samples: batches of 32 and 22
    cached, seen_cached = _train_counted(spec, job, monkeypatch, cache=True, per_sample=True)
    plain, seen_plain = _train_counted(spec, job, monkeypatch, cache=False, per_sample=True)
    # the short batch (22) inside a full window first, the cache, then the full batch (the short one's is kept)
    assert seen_plain == 3 * 150 and seen_cached == (22 + 32) + (4 * 32 + 32) + 32
    assert all(torch.equal(cached.params[k], plain.params[k]) for k in plain.params)


def test_features_that_depend_on_the_batch_or_on_chance_are_never_cached(monkeypatch):
    """Batch norm (the CIFAR CNN: batch statistics, running statistics moved by every forward) and features
    that the check finds to differ from the cache take the per-step path."""
    cifar = ModelSpec((3, 32, 32), 10)
    job = _head_job(cifar, n=96)
    res, seen = _train_counted(cifar, job, monkeypatch, cache=True)
    assert seen == 3 * 96
    assert any(not torch.equal(res.params[k], job.params[k]) for k in job.params if "running_mean" in k)
    mnist = ModelSpec((1, 28, 28), 10)
    _, seen = _train_counted(mnist, _head_job(mnist), monkeypatch, cache=True, noise=1e-3)
    assert seen == (22 + 32) + 3 * 150  # the short batch's check fails before any cache is built, then every step


def test_a_short_batch_that_rounds_differently_is_remembered(monkeypatch):
    """Once a working model's short batch size is found to round differently, the next job with that size goes
    per step without computing anything for the cache."""
    from fedcond.engine import local_sgd
    from fedcond.engine.local_sgd import FEATURE_CACHE_ENV, cpu_model, train_job

    monkeypatch.setenv(FEATURE_CACHE_ENV, "1")
    monkeypatch.setattr(local_sgd, "_ROUNDS_DIFFERENTLY", set())
    spec = ModelSpec((1, 28, 28), 10)
    model = cpu_model(spec)
    counted = _Counted(model, noise=1e-3)
    model.features = counted
    job = _head_job(spec)
    train_job(model, job, SGDConfig(batch_size=32))
    assert counted.samples == (22 + 32) + 3 * 150
    train_job(model, job, SGDConfig(batch_size=32))
    assert counted.samples == 2 * ((22 + 32) + 3 * 150) - (22 + 32)  # the second job: every step, nothing else
