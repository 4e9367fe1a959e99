"""Pretrained models by name: the catalog, the GGUF importer and the fetch-once cache."""
