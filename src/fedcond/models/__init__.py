"""The paper's conditioned CNNs."""

from .cnn import CONDITIONINGS, ConditionedCNN, cifar_cnn, mnist_cnn
from .registry import MODELS
from .spec import ModelSpec, model_for

__all__ = ["CONDITIONINGS", "ConditionedCNN", "MODELS", "ModelSpec", "cifar_cnn", "mnist_cnn", "model_for"]
