"""The compiled engine core (numba): the engine loop for its most common case, with the Python engine's records."""
