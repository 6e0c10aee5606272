"""The paper's conditioned CNNs."""

from .cnn import CONDITIONINGS, ConditionedCNN, cifar_cnn, mnist_cnn, model_for

__all__ = ["CONDITIONINGS", "ConditionedCNN", "cifar_cnn", "mnist_cnn", "model_for"]
