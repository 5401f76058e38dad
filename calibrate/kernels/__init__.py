"""Kernels that calibration times: a Triton paged-attention decode kernel, torch ops, and the
torch references every kernel is checked against before it is timed."""
