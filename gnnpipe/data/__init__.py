"""The graph in memory and how it is made: prepare, built-in generators, ids, features."""
