"""The paper's conditioned CNNs."""

from .cnn import CONDITIONINGS, ConditionedCNN, cifar_cnn, mnist_cnn
from .spec import ModelSpec, model_for

__all__ = ["CONDITIONINGS", "ConditionedCNN", "ModelSpec", "cifar_cnn", "mnist_cnn", "model_for"]
