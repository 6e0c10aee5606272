"""How long a sweep's cells will take: from the recorded rows most like each cell, on this kind of machine.
A row's time is its CPU time where it recorded one (`extra.cpu_seconds`: the cost of the run on one core,
whatever else shared the machine), else its wall time.

One cell's wall time differs 2-3x between kinds of machine (the same JDFL run: 27-30 min on an
AVX-512 Xeon, 33-41 min on an AVX-512 EPYC, 51-56 min on an AVX2 EPYC), so a kind is the CPU model
with its vector ISA, and a row recorded on another kind counts scaled by the speed ratio the
database itself shows between the two kinds (the same cells recorded on both, else the most alike
cells), and unscaled, with a note saying so, only where no row like the cell can be scaled.
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics

# the method every grid runs: a method with no row like a cell is estimated against it (_from_reference)
REFERENCE = "FedAvg"


def machine_kind(device: str, versions: str | dict | None) -> str | None:
    """'cpu avx512 (AMD EPYC)', 'cpu avx2 (AMD EPYC)', ... for a CPU row (its vector ISA and model,
    from results.versions(): an AVX-512 EPYC ran JDFL ~1.4x slower than an AVX-512 Xeon), the device
    for any other ('cuda'); None for a CPU row that did not record its CPU (rows made before it did)."""
    if device != "cpu":
        return device
    recorded = json.loads(versions or "{}") if not isinstance(versions, dict) else versions
    cpu = re.match(r"(.*) \((\w+);", recorded.get("cpu", ""))
    return _cpu_kind(cpu.group(2), cpu.group(1)) if cpu else None


def _cpu_kind(isa: str, model: str) -> str:
    return f"cpu {isa} ({model})"


def this_machine() -> str:
    """The kind of machine a local sweep runs on (sweeps train on the CPU)."""
    from .models.cpu_kernels.build import cpu_model, vector_isa

    return _cpu_kind(vector_isa(), cpu_model())


def _likeness(exp, family, dataset, per_cluster, clients, method, pname) -> tuple:
    """The keys a cell shares with recorded rows, most alike first: the same experiment, method and
    protocol (other seeds); the same dataset, clients per cluster, client count, method and protocol
    (another family at the same sparsity); the same family, dataset, method and protocol (another
    setting of the family: E4a pools two datasets, so it costs about twice what other MNIST cells
    do); the same dataset, method and protocol; the same dataset and protocol with the method's base
    name (options dropped: `FedAvg+jdfl-graded(M=2)` -> `FedAvg+jdfl-graded`)."""
    base = method.split("(", 1)[0]
    return (
        (exp, method, pname),
        (dataset, per_cluster, clients, method, pname),
        (family, dataset, method, pname),
        (dataset, method, pname),
        (dataset, base, pname),
    )


class Estimator:
    """Expected times of cells from the finished rows of one results database, for machines of kind
    `here` (default: this one): a row's CPU time where it recorded one (`extra.cpu_seconds`, what the
    run cost whatever else shared the cores), else its wall time, which also holds whatever else the
    machine ran then. An estimate for planning, not a benchmark."""

    def __init__(self, con, here: str | None = None):
        self.here = here or this_machine()
        self.levels: list[dict[tuple, list[tuple[str | None, float]]]] = [{}, {}, {}, {}, {}]
        rows = con.execute(
            "SELECT experiment, family, dataset, scenario, method, protocol_name,"
            # CPU time on a CPU row only (an accelerator's time is not in it); extra may hold NaN, which
            # SQLite's JSON functions refuse: such a row counts its wall time
            " COALESCE(CASE WHEN device = 'cpu' AND json_valid(extra) THEN json_extract(extra, '$.cpu_seconds') END,"
            " seconds) AS spent, device, versions"
            " FROM runs WHERE status = 'ok' AND spent > 0 AND experiment IS NOT NULL"
        ).fetchall()
        # (experiment, protocol, kind) -> method -> times: how methods' costs compare within one setting
        self.settings: dict[tuple, dict[str, list[float]]] = {}
        for exp, family, dataset, scenario, method, pname, sec, device, versions in rows:
            sc = json.loads(scenario or "{}")
            kind = machine_kind(device, versions)
            self.settings.setdefault((exp, pname, kind), {}).setdefault(method, []).append(sec)
            for level, key in zip(
                self.levels,
                _likeness(exp, family, dataset, sc.get("clients_per_cluster"), sc.get("clients"), method, pname),
            ):
                level.setdefault(key, []).append((kind, sec))
        self.ratios, self.ratio_level = self._ratios()
        self.used: dict[str | None, int] = {}  # kind of machine -> rows it lent to the estimates so far
        self.from_reference: dict[str, tuple[float, int]] = {}  # method -> its ratio to REFERENCE, where used

    def _ratios(self) -> tuple[dict[str | None, tuple[float, int]], dict[str | None, int]]:
        """kind -> (how many times longer a cell takes here than there, cells it is the median of):
        over the cells (experiment, method, protocol) recorded both here and there, the ratio of
        their fastest times; for a kind that shares no such cell with this one, over the most alike
        cells it shares (a likeness level of _likeness, returned second, kind -> level: a new machine
        that ran only variants of a method still gets a ratio from the method's other rows).
        The fastest, not the median: a recorded time also holds whatever else the machine ran
        then and the code of that day (a seed run beside two others, or before a speed-up, took
        1.5-4x longer), and the fastest of each side holds least of both."""
        ratios: dict[str | None, tuple[float, int]] = {}
        levels: dict[str | None, int] = {}
        for depth, level in enumerate(self.levels):
            per_kind: dict[str | None, list[float]] = {}
            for recorded in level.values():
                times: dict[str | None, list[float]] = {}
                for kind, sec in recorded:
                    times.setdefault(kind, []).append(sec)
                if self.here not in times:
                    continue
                here = min(times[self.here])
                for kind, secs in times.items():
                    if kind != self.here and kind not in ratios:
                        per_kind.setdefault(kind, []).append(here / min(secs))
            for kind, r in per_kind.items():
                ratios[kind] = (statistics.median(r), len(r))
                levels[kind] = depth
        return ratios, levels

    def seconds(self, cell) -> float | None:
        """The median time of the rows most like `cell`: those recorded on this kind of machine where
        the most alike level has any; else those of kinds the database shows a ratio for, each
        scaled to this kind; else all of that level's, unscaled. Where no row is like it, the
        method's cost against FedAvg's elsewhere (_from_reference); None where that is missing too."""
        e = cell.experiment
        like = _likeness(e.name, e.family, e.dataset, e.clients_per_cluster, e.clients, cell.method, cell.protocol_name)
        found = next((level[k] for level, k in zip(self.levels, like) if k in level), None)
        if not found:
            return self._from_reference(cell)
        mine = [sec for kind, sec in found if kind == self.here]
        if mine:
            self.used[self.here] = self.used.get(self.here, 0) + len(mine)
            return statistics.median(mine)
        scalable = [(kind, sec) for kind, sec in found if kind in self.ratios]
        for kind, _ in scalable or found:
            self.used[kind] = self.used.get(kind, 0) + 1
        return statistics.median(sec * self.ratios.get(kind, (1.0, 0))[0] for kind, sec in scalable or found)

    def _from_reference(self, cell) -> float | None:
        """A method never recorded on a cell's dataset (CIFAR-10's Ditto): REFERENCE's estimate for the
        cell times the method's cost over REFERENCE's where both ran in one setting (the same experiment,
        protocol and kind of machine; the median over settings, each side's fastest row), on any dataset.
        None where either is missing."""
        if cell.method == REFERENCE:
            return None
        ratio = self._ratio_to_reference(cell.method) or self._ratio_to_reference(cell.method.split("(", 1)[0])
        if ratio is None:
            return None
        reference = self.seconds(dataclasses.replace(cell, method=REFERENCE))
        if reference is None:
            return None
        self.from_reference[cell.method] = ratio
        return reference * ratio[0]

    def _ratio_to_reference(self, method: str) -> tuple[float, int] | None:
        ratios = [
            min(times[method]) / min(times[REFERENCE])
            for times in self.settings.values()
            if method in times and REFERENCE in times
        ]
        return (statistics.median(ratios), len(ratios)) if ratios else None

    def basis(self) -> str:
        """Which machines the estimates so far came from, and how they were scaled (one line)."""

        def rows(kind):
            return f"{kind} rows" if kind else "rows of machines that did not record their CPU"

        parts = []
        for kind in sorted(self.used, key=lambda k: (k != self.here, str(k))):
            if kind == self.here:
                parts.append(f"{rows(kind)} as recorded")
            elif kind in self.ratios:
                ratio, cells = self.ratios[kind]
                like = " like" * (self.ratio_level[kind] > 0)  # not the same cells: the most alike ones
                parts.append(
                    f"{rows(kind)} x{ratio:.2f} (the median ratio over {cells}{like} cell{'s' * (cells != 1)}"
                    f" recorded on both{'; one cell: rough' * (cells == 1)})"
                )
            else:
                parts.append(f"{rows(kind)} unscaled (no cell recorded on both; times here may differ 2-3x)")
        if not parts:
            return ""
        scaled = "; ".join(
            f"{m} as {REFERENCE} x{ratio:.2f} (its median ratio over {n} setting{'s' * (n != 1)} that ran both)"
            for m, (ratio, n) in sorted(self.from_reference.items())
        )
        where = f"; methods never recorded on a cell's dataset: {scaled}" if scaled else ""
        return f"estimates for this {self.here} machine from " + "; ".join(parts) + where
