import pytest
import torch

from fedcond_testing import SHARED, shared_file, tagged_dataset

torch.set_num_threads(1)


@pytest.fixture
def tagged():
    data = tagged_dataset()
    return lambda name: data


@pytest.fixture(scope="session")
def mnist():
    shared_file("mnist.npz.xz")
    from fedcond import data

    return data.load("mnist", data_dir=SHARED)
