"""Training pipeline for the bundled tiny model (see specserve/bundled/stdlib-coder/README.md)."""
