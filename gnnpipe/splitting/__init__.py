"""Leak-free splits and what proves them: node/edge/ordered splits, negatives, audit."""
