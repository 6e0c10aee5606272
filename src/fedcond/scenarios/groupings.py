"""Class groupings that the paper's sources leave open, fixed here as named tables.

Every table is keyed by dataset. Class indices are the official label orders:
MNIST / digits: the digits 0-9.
Fashion-MNIST: 0 T-shirt/top, 1 Trouser, 2 Pullover, 3 Dress, 4 Coat, 5 Sandal, 6 Shirt,
  7 Sneaker, 8 Bag, 9 Ankle boot.
CIFAR-10: 0 airplane, 1 automobile, 2 bird, 3 cat, 4 deer, 5 dog, 6 frog, 7 horse, 8 ship, 9 truck.
CIFAR-100: the official 100 fine classes with their 20 official superclasses (coarse labels).
"""

from __future__ import annotations

import numpy as np

from ..errors import FedcondError

# Datasets whose label space is the 10 digits; they share every table.
DIGIT_LIKE = ("mnist", "digits")

# ---- E1 label shift: K disjoint class groups ("superclasses"), one per cluster. ----------------
# The paper gives one grouping only: CIFAR-10 K=2, vehicles | animals. For the rest, groupings are
# named (`--groups NAME`) or given explicitly (`--groups '0,2,3,4,6|1,5,7,8,9'`):
# - "semantic" (the principle: classes of one kind share a cluster, kinds kept whole as far as
#   K allows): Fashion-MNIST by garment kind (tops: T-shirt, pullover, coat, shirt, with the dress;
#   bottoms; footwear; the bag); CIFAR-10 vehicles and animals split further by habitat and kind;
#   the digits have no kinds, so MNIST keeps the label order's consecutive blocks.
# - "blocks": consecutive blocks of the label order (np.array_split) for every dataset.
E1_SEMANTIC: dict[str, dict[int, tuple[tuple[int, ...], ...]]] = {
    "mnist": {
        2: ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)),
        3: ((0, 1, 2, 3), (4, 5, 6), (7, 8, 9)),
        5: ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9)),
        10: tuple((c,) for c in range(10)),
    },
    "fmnist": {
        2: ((0, 2, 3, 4, 6), (1, 5, 7, 8, 9)),  # tops and dress | trouser, footwear, bag
        3: ((0, 2, 4, 6), (1, 3, 8), (5, 7, 9)),  # tops | trouser, dress, bag | footwear
        5: (
            (0, 6),
            (2, 4),
            (1, 3),
            (5, 7),
            (8, 9),
        ),  # T-shirt, shirt | pullover, coat | trouser, dress | sandal, sneaker | bag, boot
        10: tuple((c,) for c in range(10)),
    },
    "cifar10": {
        2: ((0, 1, 8, 9), (2, 3, 4, 5, 6, 7)),  # vehicles | animals (the paper's split)
        3: ((0, 1, 8, 9), (2, 3, 5), (4, 6, 7)),  # vehicles | bird, cat, dog | deer, frog, horse
        5: ((0, 8), (1, 9), (2, 6), (3, 5), (4, 7)),  # air/sea | road | bird, frog | cat, dog | deer, horse
        10: tuple((c,) for c in range(10)),
    },
}
E1_SEMANTIC["digits"] = E1_SEMANTIC["mnist"]
GROUPINGS = ("semantic", "blocks")
DEFAULT_GROUPING = "semantic"


def blocks(num_classes: int, k: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(c) for c in g) for g in np.array_split(np.arange(num_classes), k))


def parse_groups(text: str, num_classes: int) -> tuple[tuple[int, ...], ...]:
    """'0,2,3|1,4' -> ((0, 2, 3), (1, 4)): disjoint, non-empty groups of valid class indices."""
    try:
        groups = tuple(tuple(int(c) for c in part.split(",")) for part in text.split("|"))
    except ValueError:
        raise FedcondError(
            f"--groups '{text}': expected a grouping name ({', '.join(GROUPINGS)}) "
            "or class indices like '0,2,3,4,6|1,5,7,8,9'"
        ) from None
    flat = [c for g in groups for c in g]
    if any(not 0 <= c < num_classes for c in flat):
        raise FedcondError(f"--groups '{text}': class indices must be in 0..{num_classes - 1}")
    if len(set(flat)) != len(flat):
        raise FedcondError(f"--groups '{text}': a class appears in two groups")
    return groups


def format_groups(groups) -> str:
    return "|".join(",".join(str(c) for c in g) for g in groups)


def e1_groups(dataset: str, k: int, grouping: str | None, num_classes: int = 10) -> tuple[tuple[int, ...], ...]:
    """The K class groups of E1 under a grouping name or an explicit grouping (None: the default)."""
    grouping = (grouping or DEFAULT_GROUPING).strip()
    if grouping.lower() == "blocks":
        return blocks(num_classes, k)
    if grouping.lower() == "semantic":  # K not in the table: consecutive blocks
        return E1_SEMANTIC.get(dataset, {}).get(k) or blocks(num_classes, k)
    groups = parse_groups(grouping, num_classes)
    if len(groups) != k:
        raise FedcondError(f"--groups '{grouping}' has {len(groups)} groups but K is {k}")
    return groups


# ---- E2a covariate shift by subclasses: superclasses whose members are divided among clusters.
# The task label is the superclass index. Members are dealt round-robin to the K clusters, so a
# superclass with m members supports K <= m. The "semantic" superclasses below follow the same
# principle as E1's; "blocks" halves the label order; an explicit '0,1,2|3,4' names the members.
E2A_SUPERCLASSES: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    "mnist": (("below_5", (0, 1, 2, 3, 4)), ("5_and_above", (5, 6, 7, 8, 9))),
    "fmnist": (("clothing", (0, 1, 2, 3, 4, 6)), ("shoes_and_bags", (5, 7, 8, 9))),
    # the paper's example for K=2: trucks and dogs in one cluster, cars and cats in the other
    "cifar10": (("vehicle", (9, 1, 0, 8)), ("animal", (5, 3, 2, 4, 6, 7))),
}
E2A_SUPERCLASSES["digits"] = E2A_SUPERCLASSES["mnist"]


def e2a_superclasses(dataset: str, grouping: str | None, num_classes: int = 10):
    """((name, members), ...) of E2a under a grouping name or explicit member lists."""
    grouping = (grouping or DEFAULT_GROUPING).strip()
    if grouping.lower() == "semantic":
        return table_for(E2A_SUPERCLASSES, dataset, "E2a (subclass covariate shift)")
    groups = blocks(num_classes, 2) if grouping.lower() == "blocks" else parse_groups(grouping, num_classes)
    if len(groups) < 2:
        raise FedcondError(f"--groups '{grouping}': E2a needs at least two superclasses (the task's labels)")
    return tuple((f"super{i}", g) for i, g in enumerate(groups))


# ---- E3a semantic concept shift: the same images, one labelling per cluster. -----------------
# Each labelling maps every source class to a task label; names list the task labels.
E3A_LABELINGS: dict[str, tuple[tuple[str, tuple[str, ...], tuple[int, ...]], ...]] = {
    "mnist": (
        ("odd_even", ("even", "odd"), (0, 1, 0, 1, 0, 1, 0, 1, 0, 1)),
        ("below_5", ("below_5", "5_and_above"), (0, 0, 0, 0, 0, 1, 1, 1, 1, 1)),
    ),
    "fmnist": (
        # formal: dress, coat, shirt, bag, ankle boot; casual: t-shirt, trouser, pullover, sandal, sneaker
        ("formal_casual", ("formal", "casual"), (1, 1, 1, 0, 0, 1, 0, 1, 0, 0)),
        # summer: t-shirt, dress, sandal, sneaker, bag; winter: trouser, pullover, coat, shirt, ankle boot
        ("seasonal", ("summer", "winter"), (0, 1, 1, 0, 1, 0, 1, 0, 0, 1)),
    ),
    "cifar10": (
        # vehicle: airplane, automobile, ship, truck; domestic: cat, dog, horse; wild: bird, deer, frog
        ("vehicle_domestic_wild", ("vehicle", "domestic", "wild"), (0, 0, 2, 1, 2, 1, 2, 1, 0, 0)),
        # large: airplane, ship, truck, horse; medium: automobile, deer, dog; small: bird, cat, frog
        ("size", ("large", "medium", "small"), (0, 1, 2, 2, 1, 1, 2, 0, 0, 0)),
    ),
}
E3A_LABELINGS["digits"] = E3A_LABELINGS["mnist"]

# ---- E2b covariate shift by rotation: one angle (degrees) per cluster. -----------------------
ROTATIONS: dict[str, tuple[float, ...]] = {
    "C1": (0.0, 180.0),
    "C2": (0.0, 120.0, 240.0),
    "C3": (0.0, 90.0, 180.0, 270.0),
    "C4": (0.0, 10.0, 180.0, 350.0),
}

# ---- Sparsity levels: clients per cluster. ----------------------------------------------------
SPARSITY: dict[str, int] = {"rich": 5, "medium": 10, "sparse": 20, "very_sparse": 50, "super_sparse": 100}

# ---- E4b: total clients of the C=2 sparsity sweep (2C = 4 clusters). --------------------------
E4B_SPARSITY_TOTAL: dict[str, int] = {"rich": 20, "medium": 40, "sparse": 100, "very_sparse": 200}


def table_for(table: dict, dataset: str, what: str, keyed_by: str = "dataset"):
    """table[dataset]; keyed_by names what the key is, for the error (E2b's table is keyed by configuration)."""
    if dataset not in table:
        raise FedcondError(f"{what} is defined for {', '.join(sorted(table))}, not for {keyed_by} '{dataset}'")
    return table[dataset]


def deal_round_robin(members: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
    """Divide a superclass's member classes among k clusters: member j goes to cluster j mod k."""
    return [tuple(members[j] for j in range(c, len(members), k)) for c in range(k)]


# ---- Domain federations (JDFL, SPEC C.7): PACS and Office-Caltech-10 have no official split. ---
# Each domain's images are split per class into train / test (DOMAIN_TEST_FRACTION held out,
# seeded); the domain's train and test shares are then dealt to its clients, so the union of the
# clients' test sets is all the held-out data (global test accuracy) and per-domain accuracy is
# the accuracy over one domain's clients.
DOMAIN_TEST_FRACTION = 0.2
DOMAIN_CLIENTS = 5  # clients per domain (PACS: 20 clients of 267..629 training images)
