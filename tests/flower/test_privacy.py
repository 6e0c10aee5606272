"""What the server receives in a federated run: never a client's statistics, never Ditto's personal weights.

Every message that reaches the server is recorded at the grid (the only way in) and searched:
- statistics: no array holds two consecutive components of any client's statistics vector (raw
  eigenvalues, or the normalised s_i the model takes), in float32 or float64, and no scalar or
  number inside a JSON or byte payload equals one of its non-zero components. (Single values are
  not searched inside weight arrays: among 400k float32 weights some equal one of 640 given
  floats by chance.)
- Ditto: no array equals, bit for bit, any tensor of any client's personal model after any round.
"""

import re

import numpy as np
import pytest

from fedcond.client_stats import client_statistics
from fedcond.simulate import run_method

from flower_testing import TWO_ROUNDS

pytestmark = [pytest.mark.flower, pytest.mark.slow]

_NUMBER = re.compile(rb"-?\d+\.\d+(?:[eE][-+]?\d+)?")


def payloads(message):
    """(arrays, scalars) of a message's content, as float64: ArrayRecord arrays, config and metric
    values, numbers inside JSON strings, and byte strings read as float32/float64/fixed-point."""
    arrays, scalars = [], []
    for rec in message.content.values():
        if hasattr(rec, "to_numpy_ndarrays"):
            arrays += [a.astype(np.float64).ravel() for a in rec.to_numpy_ndarrays() if a.dtype.kind == "f"]
            continue
        for value in rec.values():
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, bool):
                    continue
                if isinstance(v, (str, bytes)):
                    raw = v.encode() if isinstance(v, str) else v
                    nums = [float(x) for x in _NUMBER.findall(raw)]
                    if nums:
                        arrays.append(np.asarray(nums))
                        scalars += nums
                    if isinstance(v, bytes):
                        for dt in (np.float32, np.float64):
                            if len(v) % np.dtype(dt).itemsize == 0:
                                with np.errstate(all="ignore"):
                                    arrays.append(np.frombuffer(v, dtype=dt).astype(np.float64))
                        if len(v) % 8 == 0:
                            arrays.append(np.frombuffer(v, dtype=np.int64).astype(np.float64) / 2.0**32)
                else:
                    scalars.append(float(v))
    return arrays, scalars


def leaks(arrays, scalars, vectors) -> list[str]:
    found = []
    for name, vec in vectors.items():
        for as_type in (np.float32, np.float64):
            v = vec.astype(as_type)
            values = set(v[np.abs(v) > 1e-6].tolist())
            for a in arrays:
                with np.errstate(all="ignore"):
                    a = a.astype(as_type)
                hit = np.isin(a, v[np.abs(v) > 1e-6])
                if (hit[:-1] & hit[1:]).any():
                    idx = np.flatnonzero(hit[:-1] & hit[1:])
                    pairs = set(zip(v[:-1].tolist(), v[1:].tolist()))
                    if any((a[k], a[k + 1]) in pairs for k in idx):
                        found.append(f"{name}: two consecutive components in an array")
            found += [f"{name}: scalar {x}" for x in scalars if as_type(x) in values]
    return found


def test_the_search_finds_a_planted_statistics_vector():
    s = np.linspace(-1.5, 2.5, 32)
    weights = np.random.default_rng(0).normal(size=10_000)
    weights[500:510] = s[3:13]
    assert leaks([weights], [], {"s": s})
    assert leaks([], [float(np.float32(s[7]))], {"s": s})
    assert not leaks([np.random.default_rng(1).normal(size=10_000)], [0.5], {"s": s})


@pytest.mark.parametrize("run,statistic", [("Conditional", "eigenvalues"), ("Conditional-class_means", "class_means")])
def test_no_statistics_reach_the_server(fl_scenario, flower_session, run, statistic):
    result, received = flower_session[run]
    raw, s = client_statistics(fl_scenario, TWO_ROUNDS.replace(statistic=statistic))
    vectors = {f"client {i} raw": raw[i] for i in range(len(raw))}
    vectors.update({f"client {i} s": s[i].numpy().astype(np.float64) for i in range(len(s))})
    kinds = {m.metadata.message_type for m in received}
    assert {"query.secagg", "train", "evaluate"} <= kinds  # the statistics phase and the rounds were seen
    found = []
    for m in received:
        found += [f"{m.metadata.message_type}: {f}" for f in leaks(*payloads(m), vectors)]
    arrays = sum(len(payloads(m)[0]) for m in received)
    print(f"\nprivacy ({statistic}): {len(received)} messages received by the server ({arrays} arrays) searched for "
          f"{len(vectors)} statistics vectors; leaks found: {len(found)}")
    assert found == []


def test_ditto_personal_weights_never_leave_the_client(fl_scenario, flower_session):
    personal = set()
    n = fl_scenario.federation.num_clients

    def keep(r, state):
        for v in state.models[1:]:
            personal.update(t.numpy().tobytes() for t in v.values() if t.is_floating_point() and t.numel() > 1)

    ref = run_method(fl_scenario, "Ditto", TWO_ROUNDS, seed=0, on_round=keep)
    result, received = flower_session["Ditto"]
    assert result["per_client"] == ref.per_client  # the clients predicted with their personal models
    sent = [a.tobytes() for m in received for rec in m.content.values() if hasattr(rec, "to_numpy_ndarrays")
            for a in rec.to_numpy_ndarrays()]
    assert len(personal) >= n * 2 * 2  # the search set: every client's tensors after each round
    assert len(sent) >= n * 2 * 4  # the global track's updates did come back
    assert not personal.intersection(sent)
    print(f"\nDitto: {len(sent)} arrays received, none equal to any of {len(personal)} personal tensors")
