"""Readers (and small writers) for the official distribution formats: IDX, CIFAR pickles, image folders."""
