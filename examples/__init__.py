"""Examples of fedcond's extension API (docs/extending.md). A package, so that
`--plugin examples.plugins.fedavgm` run from the repository root finds this folder."""
