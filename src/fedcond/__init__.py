"""fedcond: client-conditional federated learning under data heterogeneity."""

__version__ = "0.1.0"

# The extension API (fedcond.plugins), imported on first use so that `import fedcond` stays light.
_PLUGIN_API = (
    "register_algorithm",
    "register_dataset",
    "register_model",
    "register_partition",
    "register_statistic",
    "load_plugins",
)
__all__ = ["__version__", *_PLUGIN_API]


def __getattr__(name: str):
    if name in _PLUGIN_API:
        from . import plugins

        return getattr(plugins, name)
    raise AttributeError(f"module 'fedcond' has no attribute {name!r}")
