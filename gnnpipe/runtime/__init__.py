"""A stage process's environment: randomness, threads, resources, progress, profiles."""
