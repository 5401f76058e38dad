"""Fidelity of ServeSim against a real vLLM engine on this CPU: replay a schedule of requests against
vLLM (`replay_vllm`, in `.venv-fidelity`), simulate the same schedule with the same settings and a
cost model calibrated on the same machine (`compare`, in `.venv`), and report the errors."""
