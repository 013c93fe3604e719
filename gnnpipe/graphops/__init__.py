"""Whole-graph operations: diagnostics, partitioning and shards, SIGN propagation."""
