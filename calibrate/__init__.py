"""Calibration: time the real kernels of a model's per-GPU shard and write a profile that
`sim.cost.calibrated.CalibratedCostModel` reads. `python -m calibrate run|fit` (needs torch; triton on GPU)."""
