"""Built-in models and GPUs, as data, with the source of every number next to it.

Model shapes come from each model's Hugging Face `config.json`: written out below with the repo named in the
comment, or shipped as the file itself in `sim/model/configs/` (its README names each file's source) and read by
`sim.model.hf_config` when first named. GPU rates from NVIDIA datasheets, dense (no 2:4 sparsity). What follows from a
shape (weight matrices per layer, parameter counts) is computed in `sim.model.shapes`, so memory math and cost models
agree.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from sim.errors import ConfigError, did_you_mean
from sim.model.checkpoint_quant import CheckpointQuantization
from sim.model.specs import GPUSpec, ModelSpec, RopeScaling

MODELS: dict[str, ModelSpec] = {
    "opt-13b": ModelSpec(
        name="opt-13b",
        num_layers=40,  # facebook/opt-13b config.json num_hidden_layers
        hidden_size=5120,  # facebook/opt-13b config.json hidden_size
        num_attention_heads=40,  # facebook/opt-13b config.json num_attention_heads
        num_kv_heads=40,  # facebook/opt-13b: multi-head attention, one KV head per query head
        head_dim=128,  # facebook/opt-13b config.json hidden_size / num_attention_heads
        ffn_size=20480,  # facebook/opt-13b config.json ffn_dim
        vocab_size=50272,  # facebook/opt-13b config.json vocab_size
        max_context=2048,  # facebook/opt-13b config.json max_position_embeddings
        attention="mha",
        gated_mlp=False,  # facebook/opt-13b: fc1 -> ReLU -> fc2
        tie_word_embeddings=True,  # facebook/opt-13b: lm_head shares embed_tokens
        linear_bias=True,  # facebook/opt-13b config.json enable_bias
        learned_position_embeddings=2050,  # HF OPTLearnedPositionalEmbedding: max_position_embeddings + offset 2
        published_params=12.85e9,  # Zhang et al. 2022 "OPT" (13B); 12.85e9 is the released checkpoint's exact count
    ),
    "llama-2-7b": ModelSpec(
        name="llama-2-7b",
        num_layers=32,  # meta-llama/Llama-2-7b-hf config.json num_hidden_layers
        hidden_size=4096,  # meta-llama/Llama-2-7b-hf config.json hidden_size
        num_attention_heads=32,  # meta-llama/Llama-2-7b-hf config.json num_attention_heads
        num_kv_heads=32,  # meta-llama/Llama-2-7b-hf config.json num_key_value_heads
        head_dim=128,  # meta-llama/Llama-2-7b-hf config.json hidden_size / num_attention_heads
        ffn_size=11008,  # meta-llama/Llama-2-7b-hf config.json intermediate_size
        vocab_size=32000,  # meta-llama/Llama-2-7b-hf config.json vocab_size
        max_context=4096,  # meta-llama/Llama-2-7b-hf config.json max_position_embeddings
        attention="mha",
        published_params=6.74e9,  # meta-llama/Llama-2-7b-hf safetensors total (6,738,415,616 parameters)
    ),
    "llama-2-13b": ModelSpec(
        name="llama-2-13b",
        num_layers=40,  # meta-llama/Llama-2-13b-hf config.json num_hidden_layers
        hidden_size=5120,  # meta-llama/Llama-2-13b-hf config.json hidden_size
        num_attention_heads=40,  # meta-llama/Llama-2-13b-hf config.json num_attention_heads
        num_kv_heads=40,  # meta-llama/Llama-2-13b-hf config.json num_key_value_heads
        head_dim=128,  # meta-llama/Llama-2-13b-hf config.json hidden_size / num_attention_heads
        ffn_size=13824,  # meta-llama/Llama-2-13b-hf config.json intermediate_size
        vocab_size=32000,  # meta-llama/Llama-2-13b-hf config.json vocab_size
        max_context=4096,  # meta-llama/Llama-2-13b-hf config.json max_position_embeddings
        attention="mha",
        published_params=13.02e9,  # meta-llama/Llama-2-13b-hf safetensors total (13,015,864,320 parameters)
    ),
    "llama-2-70b": ModelSpec(
        name="llama-2-70b",
        num_layers=80,  # meta-llama/Llama-2-70b-hf config.json num_hidden_layers
        hidden_size=8192,  # meta-llama/Llama-2-70b-hf config.json hidden_size
        num_attention_heads=64,  # meta-llama/Llama-2-70b-hf config.json num_attention_heads
        num_kv_heads=8,  # meta-llama/Llama-2-70b-hf config.json num_key_value_heads
        head_dim=128,  # meta-llama/Llama-2-70b-hf config.json hidden_size / num_attention_heads
        ffn_size=28672,  # meta-llama/Llama-2-70b-hf config.json intermediate_size
        vocab_size=32000,  # meta-llama/Llama-2-70b-hf config.json vocab_size
        max_context=4096,  # meta-llama/Llama-2-70b-hf config.json max_position_embeddings
        published_params=68.98e9,  # meta-llama/Llama-2-70b-hf safetensors total (68,976,648,192 parameters)
    ),
    "llama-3.1-8b": ModelSpec(
        name="llama-3.1-8b",
        num_layers=32,  # meta-llama/Llama-3.1-8B config.json num_hidden_layers
        hidden_size=4096,  # meta-llama/Llama-3.1-8B config.json hidden_size
        num_attention_heads=32,  # meta-llama/Llama-3.1-8B config.json num_attention_heads
        num_kv_heads=8,  # meta-llama/Llama-3.1-8B config.json num_key_value_heads
        head_dim=128,  # meta-llama/Llama-3.1-8B config.json head_dim
        ffn_size=14336,  # meta-llama/Llama-3.1-8B config.json intermediate_size
        vocab_size=128256,  # meta-llama/Llama-3.1-8B config.json vocab_size
        max_context=131072,  # meta-llama/Llama-3.1-8B config.json max_position_embeddings
        # its rope_scaling (llama3's, which no engine's context rule scales by: sim/config/engines/)
        rope_scaling=(RopeScaling(rope_type="llama3", factor=8.0, original_max_position_embeddings=8192),),
        published_params=8.03e9,  # meta-llama/Llama-3.1-8B safetensors total (8,030,261,248 parameters)
    ),
    "llama-3.1-70b": ModelSpec(
        name="llama-3.1-70b",
        num_layers=80,  # meta-llama/Llama-3.1-70B config.json num_hidden_layers
        hidden_size=8192,  # meta-llama/Llama-3.1-70B config.json hidden_size
        num_attention_heads=64,  # meta-llama/Llama-3.1-70B config.json num_attention_heads
        num_kv_heads=8,  # meta-llama/Llama-3.1-70B config.json num_key_value_heads
        head_dim=128,  # meta-llama/Llama-3.1-70B config.json head_dim
        ffn_size=28672,  # meta-llama/Llama-3.1-70B config.json intermediate_size
        vocab_size=128256,  # meta-llama/Llama-3.1-70B config.json vocab_size
        max_context=131072,  # meta-llama/Llama-3.1-70B config.json max_position_embeddings
        published_params=70.55e9,  # meta-llama/Llama-3.1-70B safetensors total (70,553,706,496 parameters)
    ),
    "mistral-7b-v0.1": ModelSpec(
        name="mistral-7b-v0.1",
        num_layers=32,  # mistralai/Mistral-7B-v0.1 config.json num_hidden_layers
        hidden_size=4096,  # mistralai/Mistral-7B-v0.1 config.json hidden_size
        num_attention_heads=32,  # mistralai/Mistral-7B-v0.1 config.json num_attention_heads
        num_kv_heads=8,  # mistralai/Mistral-7B-v0.1 config.json num_key_value_heads
        head_dim=128,  # mistralai/Mistral-7B-v0.1 config.json hidden_size / num_attention_heads
        ffn_size=14336,  # mistralai/Mistral-7B-v0.1 config.json intermediate_size
        vocab_size=32000,  # mistralai/Mistral-7B-v0.1 config.json vocab_size
        max_context=32768,  # mistralai/Mistral-7B-v0.1 config.json max_position_embeddings
        sliding_window=4096,  # mistralai/Mistral-7B-v0.1 config.json sliding_window
        published_params=7.24e9,  # mistralai/Mistral-7B-v0.1 safetensors total (7,241,732,096 parameters)
    ),
    "qwen2.5-7b": ModelSpec(
        name="qwen2.5-7b",
        num_layers=28,  # Qwen/Qwen2.5-7B config.json num_hidden_layers
        hidden_size=3584,  # Qwen/Qwen2.5-7B config.json hidden_size
        num_attention_heads=28,  # Qwen/Qwen2.5-7B config.json num_attention_heads
        num_kv_heads=4,  # Qwen/Qwen2.5-7B config.json num_key_value_heads
        head_dim=128,  # Qwen/Qwen2.5-7B config.json hidden_size / num_attention_heads
        ffn_size=18944,  # Qwen/Qwen2.5-7B config.json intermediate_size
        vocab_size=152064,  # Qwen/Qwen2.5-7B config.json vocab_size
        max_context=131072,  # Qwen/Qwen2.5-7B config.json max_position_embeddings
        tie_word_embeddings=False,  # Qwen/Qwen2.5-7B config.json tie_word_embeddings (tied only up to 3B)
        attention_bias=True,  # HF Qwen2Attention: q/k/v_proj bias=True
        published_params=7.61e9,  # Qwen/Qwen2.5-7B model card ("Number of Parameters: 7.61B")
    ),
    "qwen2.5-72b": ModelSpec(
        name="qwen2.5-72b",
        num_layers=80,  # Qwen/Qwen2.5-72B config.json num_hidden_layers
        hidden_size=8192,  # Qwen/Qwen2.5-72B config.json hidden_size
        num_attention_heads=64,  # Qwen/Qwen2.5-72B config.json num_attention_heads
        num_kv_heads=8,  # Qwen/Qwen2.5-72B config.json num_key_value_heads
        head_dim=128,  # Qwen/Qwen2.5-72B config.json hidden_size / num_attention_heads
        ffn_size=29568,  # Qwen/Qwen2.5-72B config.json intermediate_size
        vocab_size=152064,  # Qwen/Qwen2.5-72B config.json vocab_size
        max_context=131072,  # Qwen/Qwen2.5-72B config.json max_position_embeddings
        attention_bias=True,  # HF Qwen2Attention: q/k/v_proj bias=True
        published_params=72.7e9,  # Qwen/Qwen2.5-72B model card ("Number of Parameters: 72.7B")
    ),
    "mixtral-8x7b": ModelSpec(
        name="mixtral-8x7b",
        num_layers=32,  # mistralai/Mixtral-8x7B-v0.1 config.json num_hidden_layers
        hidden_size=4096,  # mistralai/Mixtral-8x7B-v0.1 config.json hidden_size
        num_attention_heads=32,  # mistralai/Mixtral-8x7B-v0.1 config.json num_attention_heads
        num_kv_heads=8,  # mistralai/Mixtral-8x7B-v0.1 config.json num_key_value_heads
        head_dim=128,  # mistralai/Mixtral-8x7B-v0.1 config.json hidden_size / num_attention_heads
        ffn_size=14336,  # mistralai/Mixtral-8x7B-v0.1 config.json intermediate_size (per expert)
        vocab_size=32000,  # mistralai/Mixtral-8x7B-v0.1 config.json vocab_size
        max_context=32768,  # mistralai/Mixtral-8x7B-v0.1 config.json max_position_embeddings
        num_experts=8,  # mistralai/Mixtral-8x7B-v0.1 config.json num_local_experts
        num_experts_per_token=2,  # mistralai/Mixtral-8x7B-v0.1 config.json num_experts_per_tok
        published_params=46.7e9,  # Mistral AI blog "Mixtral of experts" (2023): 46.7B total, 12.9B per token
    ),
    "deepseek-v2-lite": ModelSpec(
        name="deepseek-v2-lite",
        num_layers=27,  # deepseek-ai/DeepSeek-V2-Lite config.json num_hidden_layers
        hidden_size=2048,  # deepseek-ai/DeepSeek-V2-Lite config.json hidden_size
        num_attention_heads=16,  # deepseek-ai/DeepSeek-V2-Lite config.json num_attention_heads
        num_kv_heads=16,  # deepseek-ai/DeepSeek-V2-Lite config.json num_key_value_heads
        head_dim=192,  # deepseek-ai/DeepSeek-V2-Lite config.json qk_nope_head_dim + qk_rope_head_dim
        ffn_size=1408,  # deepseek-ai/DeepSeek-V2-Lite config.json moe_intermediate_size (per expert)
        vocab_size=102400,  # deepseek-ai/DeepSeek-V2-Lite config.json vocab_size
        max_context=163840,  # deepseek-ai/DeepSeek-V2-Lite config.json max_position_embeddings
        attention="mla",
        num_experts=64,  # deepseek-ai/DeepSeek-V2-Lite config.json n_routed_experts
        num_experts_per_token=6,  # deepseek-ai/DeepSeek-V2-Lite config.json num_experts_per_tok
        num_shared_experts=2,  # deepseek-ai/DeepSeek-V2-Lite config.json n_shared_experts
        num_dense_layers=1,  # deepseek-ai/DeepSeek-V2-Lite config.json first_k_dense_replace
        dense_ffn_size=10944,  # deepseek-ai/DeepSeek-V2-Lite config.json intermediate_size
        kv_lora_rank=512,  # deepseek-ai/DeepSeek-V2-Lite config.json kv_lora_rank
        q_lora_rank=0,  # deepseek-ai/DeepSeek-V2-Lite config.json q_lora_rank (null: no query compression)
        qk_rope_head_dim=64,  # deepseek-ai/DeepSeek-V2-Lite config.json qk_rope_head_dim
        qk_nope_head_dim=128,  # deepseek-ai/DeepSeek-V2-Lite config.json qk_nope_head_dim
        v_head_dim=128,  # deepseek-ai/DeepSeek-V2-Lite config.json v_head_dim
        published_params=15.7e9,  # deepseek-ai/DeepSeek-V2-Lite model card (15.7B total, 2.4B active)
    ),
}

_MIB = 2**20

# Prices are approximate on-demand cloud prices in USD per GPU-hour (AWS us-east-1 list price of the
# instance divided by its GPUs, 2024); they change often and differ by provider, so edit them.
GPUS: dict[str, GPUSpec] = {
    "a100-40gb": GPUSpec(
        name="a100-40gb",
        bf16_flops_per_s=312e12,  # NVIDIA A100 datasheet, BF16 Tensor Core (dense)
        fp8_flops_per_s=None,  # Ampere has no fp8 tensor cores
        fp32_flops_per_s=19.5e12,  # NVIDIA A100 datasheet, FP32
        hbm_bytes=40960 * _MIB,  # nvidia-smi total memory, A100-SXM4-40GB
        hbm_bytes_per_s=1.555e12,  # NVIDIA A100 datasheet, 40GB SXM GPU memory bandwidth
        interconnect_bytes_per_s=300e9,  # NVIDIA A100 datasheet, NVLink 600 GB/s bidirectional
        host_link_bytes_per_s=32e9,  # PCIe Gen4 x16, 64 GB/s bidirectional
        price_per_hour=4.10,  # approximate: AWS p4d.24xlarge $32.77/h / 8 GPUs
        compute_capability=(8, 0),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    "a100-80gb": GPUSpec(
        name="a100-80gb",
        bf16_flops_per_s=312e12,  # NVIDIA A100 datasheet, BF16 Tensor Core (dense)
        fp8_flops_per_s=None,  # Ampere has no fp8 tensor cores
        fp32_flops_per_s=19.5e12,  # NVIDIA A100 datasheet, FP32
        hbm_bytes=81920 * _MIB,  # nvidia-smi total memory, A100-SXM4-80GB
        hbm_bytes_per_s=2.039e12,  # NVIDIA A100 datasheet, 80GB SXM GPU memory bandwidth
        interconnect_bytes_per_s=300e9,  # NVIDIA A100 datasheet, NVLink 600 GB/s bidirectional
        host_link_bytes_per_s=32e9,  # PCIe Gen4 x16, 64 GB/s bidirectional
        price_per_hour=5.12,  # approximate: AWS p4de.24xlarge $40.97/h / 8 GPUs
        compute_capability=(8, 0),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    # The A800 and the H800, NVIDIA's parts for China before the H20 (2022-2023): the A100 80GB SXM's and the H100
    # SXM's silicon, clocks and memory with NVLink cut from 600 / 900 to 400 GB/s bidirectional (third-party spec
    # tables and published NCCL tests agree: 8 links of 25 GB/s a direction; NVIDIA's own H800 / A800 pages are China's
    # and were not read here). FP64 was cut too, which nothing here prices. No kernel table measured either; being the
    # same silicon, each is priced by its twin's measured kernels (`kernels_as`), its all-reduces on its own links.
    # Their prices are estimates.
    "a800": GPUSpec(
        name="a800",  # the A800 80GB SXM ("NVIDIA A800-SXM4-80GB"), not the A800 40GB Active workstation card
        bf16_flops_per_s=312e12,  # as the A100 80GB SXM (above)
        fp8_flops_per_s=None,  # Ampere has no fp8 tensor cores
        fp32_flops_per_s=19.5e12,  # as the A100
        hbm_bytes=81920 * _MIB,  # nvidia-smi total memory, "NVIDIA A800-SXM4-80GB" (several published outputs, 400 W)
        hbm_bytes_per_s=2.039e12,  # as the A100 80GB SXM
        interconnect_bytes_per_s=200e9,  # NVLink 400 GB/s bidirectional (above)
        host_link_bytes_per_s=32e9,  # PCIe Gen4 x16, as the A100's
        price_per_hour=5.12,  # estimate, edit it: no on-demand list price checked; set at the A100 80GB SXM's
        compute_capability=(8, 0),  # Ampere GA100, as the A100
        kernels_as="a100-80gb",
    ),
    # Two Ampere PCIe cards AIConfigurator 0.12.0 describes but measured no kernels on: rates from its
    # systems/<system>.yaml ("estimate-only system spec"), memory as nvidia-smi prints it (several published outputs).
    # Both are priced by the learned roofline.
    "a100-pcie": GPUSpec(
        name="a100-pcie",  # the A100 80GB PCIe card; a 40 GB A100 is a100-40gb (SXM)
        bf16_flops_per_s=312e12,  # aiconfigurator-core 0.12.0 systems/a100_pcie.yaml bfloat16_tc_flops
        fp8_flops_per_s=None,  # Ampere has no fp8 tensor cores
        fp32_flops_per_s=19.5e12,  # NVIDIA A100 datasheet, FP32 (the same for the PCIe card)
        hbm_bytes=81920 * _MIB,  # nvidia-smi total memory, "NVIDIA A100 80GB PCIe"
        hbm_bytes_per_s=1.935e12,  # same file, mem_bw
        # Peers over PCIe Gen4 x16 (same file, intra_node_bw, "without NVLink"): a bridged pair at TP 2 is faster
        interconnect_bytes_per_s=32e9,
        host_link_bytes_per_s=32e9,  # same file, pcie_bw
        price_per_hour=3.8,  # estimate, edit it: no on-demand list price checked; set at 0.75x the A100 80GB SXM's
        compute_capability=(8, 0),  # same file, sm_version 80
    ),
    "a30": GPUSpec(
        name="a30",
        bf16_flops_per_s=165e12,  # aiconfigurator-core 0.12.0 systems/a30.yaml bfloat16_tc_flops
        fp8_flops_per_s=None,  # Ampere has no fp8 tensor cores
        fp32_flops_per_s=None,  # not in that file: not known here (the materialized attention kernel: the bf16 rate)
        hbm_bytes=24576 * _MIB,  # nvidia-smi total memory, "NVIDIA A30" 24GB HBM2
        hbm_bytes_per_s=933e9,  # same file, mem_bw
        interconnect_bytes_per_s=32e9,  # peers over PCIe Gen4 x16 (same file, intra_node_bw, "without NVLink")
        host_link_bytes_per_s=32e9,  # same file, pcie_bw
        price_per_hour=1.5,  # estimate, edit it: no on-demand list price checked
        compute_capability=(8, 0),  # same file, sm_version 80
    ),
    "h100-sxm": GPUSpec(
        name="h100-sxm",
        bf16_flops_per_s=989e12,  # NVIDIA H100 datasheet, SXM BF16 Tensor Core 1,979 TFLOPS with sparsity / 2
        fp8_flops_per_s=1979e12,  # NVIDIA H100 datasheet, SXM FP8 Tensor Core 3,958 TFLOPS with sparsity / 2
        fp32_flops_per_s=67e12,  # NVIDIA H100 datasheet, SXM FP32
        hbm_bytes=81559 * _MIB,  # nvidia-smi total memory, H100 80GB HBM3
        hbm_bytes_per_s=3.35e12,  # NVIDIA H100 datasheet, SXM GPU memory bandwidth
        interconnect_bytes_per_s=450e9,  # NVIDIA H100 datasheet, NVLink 900 GB/s bidirectional
        host_link_bytes_per_s=64e9,  # PCIe Gen5 x16, 128 GB/s bidirectional
        price_per_hour=12.29,  # approximate: AWS p5.48xlarge $98.32/h / 8 GPUs (AWS cut P5 prices in 2025)
        compute_capability=(9, 0),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    # The H100's PCIe cards, priced by the learned roofline (AIConfigurator measured neither). Rates: NVIDIA H100
    # datasheet's PCIe and NVL columns ("with sparsity" / 2), read through copies of its table (hpctech.co.jp's for
    # the PCIe card; third-party tables agree on the NVL's ~835 / ~1,670 TFLOPS and 3.9 TB/s), not NVIDIA's PDF;
    # memory: nvidia-smi's total, as several published nvidia-smi outputs print it for each card.
    "h100-pcie": GPUSpec(
        name="h100-pcie",
        bf16_flops_per_s=756.5e12,  # NVIDIA H100 datasheet, PCIe BF16 Tensor Core 1,513 TFLOPS with sparsity / 2
        fp8_flops_per_s=1513e12,  # NVIDIA H100 datasheet, PCIe FP8 Tensor Core 3,026 TFLOPS with sparsity / 2
        fp32_flops_per_s=51e12,  # NVIDIA H100 datasheet, PCIe FP32
        hbm_bytes=81559 * _MIB,  # nvidia-smi total memory, H100 PCIe (80GB HBM2e)
        hbm_bytes_per_s=2.0e12,  # NVIDIA H100 datasheet, PCIe GPU memory bandwidth 2 TB/s
        # Peers over PCIe Gen5 x16: an NVLink bridge (600 GB/s bidirectional) joins only two cards, and many servers
        # have none; a bridged pair at TP 2 is faster than priced here
        interconnect_bytes_per_s=64e9,
        host_link_bytes_per_s=64e9,  # NVIDIA H100 datasheet, PCIe Gen5 128 GB/s bidirectional
        price_per_hour=9.2,  # estimate, edit it: no on-demand list price checked; set at 0.75x the H100 SXM's
        compute_capability=(9, 0),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    "h100-nvl": GPUSpec(
        name="h100-nvl",
        bf16_flops_per_s=835.5e12,  # NVIDIA H100 datasheet, NVL BF16 Tensor Core 1,671 TFLOPS with sparsity / 2
        fp8_flops_per_s=1670.5e12,  # NVIDIA H100 datasheet, NVL FP8 Tensor Core 3,341 TFLOPS with sparsity / 2
        fp32_flops_per_s=60e12,  # NVIDIA H100 datasheet, NVL FP32
        hbm_bytes=95830 * _MIB,  # nvidia-smi total memory, H100 NVL (94GB HBM3)
        hbm_bytes_per_s=3.9e12,  # NVIDIA H100 datasheet, NVL GPU memory bandwidth 3.9 TB/s
        # Sold as pairs joined by NVLink bridges (datasheet: 600 GB/s bidirectional): TP 2 within a pair. A TP above 2
        # crosses PCIe between pairs, which this rate does not price (optimistic there)
        interconnect_bytes_per_s=300e9,
        host_link_bytes_per_s=64e9,  # NVIDIA H100 datasheet, PCIe Gen5 128 GB/s bidirectional
        price_per_hour=10.5,  # estimate, edit it: no on-demand list price checked; set at 0.85x the H100 SXM's
        compute_capability=(9, 0),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    "h800": GPUSpec(
        name="h800",  # the H800 SXM ("NVIDIA H800"); the H800 PCIe card (114 SMs) is another part
        bf16_flops_per_s=989e12,  # as the H100 SXM (above): its tensor cores and clocks
        fp8_flops_per_s=1979e12,  # as the H100 SXM
        fp32_flops_per_s=67e12,  # as the H100 SXM
        hbm_bytes=81559 * _MIB,  # nvidia-smi total memory, "NVIDIA H800" (several published outputs, 700 W cap)
        hbm_bytes_per_s=3.35e12,  # as the H100 SXM
        interconnect_bytes_per_s=200e9,  # NVLink 400 GB/s bidirectional (the A800's comment above)
        host_link_bytes_per_s=64e9,  # PCIe Gen5 x16, as the H100's
        price_per_hour=12.29,  # estimate, edit it: no on-demand list price checked; set at the H100 SXM's
        compute_capability=(9, 0),  # Hopper GH100, as the H100
        kernels_as="h100-sxm",
    ),
    # The H20, NVIDIA's Hopper part for China: NVIDIA publishes no datasheet for it outside China. Rates as third-party
    # spec tables give them (willitrunai.com's H20 96GB page; a zangshuxian.com summary: 148 dense FP16/BF16, 296
    # INT8, 44 FP32 TFLOPS, 4.0 TB/s); FP8 at the INT8 rate, as on every Hopper part. The 96 GB card, not the later
    # 141 GB one. Priced by the learned roofline (AIConfigurator measured no H20).
    "h20": GPUSpec(
        name="h20",
        bf16_flops_per_s=148e12,  # third-party spec tables (above), FP16/BF16 dense
        fp8_flops_per_s=296e12,  # the INT8 rate those tables give, 296 TOPS dense
        fp32_flops_per_s=44e12,  # same tables, FP32
        hbm_bytes=97871 * _MIB,  # nvidia-smi total memory, "NVIDIA H20" (two published outputs, 500 W cap)
        hbm_bytes_per_s=4.0e12,  # same tables, 4.0 TB/s
        interconnect_bytes_per_s=450e9,  # same tables, NVLink 4 900 GB/s bidirectional
        host_link_bytes_per_s=64e9,  # PCIe Gen5 x16, 128 GB/s bidirectional (as the H100's)
        price_per_hour=6.1,  # estimate, edit it: no on-demand list price checked; set at 0.5x the H100 SXM's
        compute_capability=(9, 0),  # Hopper, as the H100
    ),
    "h200": GPUSpec(
        name="h200",
        bf16_flops_per_s=989e12,  # NVIDIA H200 datasheet, SXM BF16 Tensor Core 1,979 TFLOPS with sparsity / 2
        fp8_flops_per_s=1979e12,  # NVIDIA H200 datasheet, SXM FP8 Tensor Core 3,958 TFLOPS with sparsity / 2
        fp32_flops_per_s=67e12,  # NVIDIA H200 datasheet, SXM FP32
        hbm_bytes=143771 * _MIB,  # nvidia-smi total memory, H200 141GB HBM3e
        hbm_bytes_per_s=4.8e12,  # NVIDIA H200 datasheet, SXM GPU memory bandwidth
        interconnect_bytes_per_s=450e9,  # NVIDIA H200 datasheet, NVLink 900 GB/s bidirectional
        host_link_bytes_per_s=64e9,  # PCIe Gen5 x16, 128 GB/s bidirectional
        price_per_hour=13.50,  # estimate: ~1.1x the H100 price (AWS sells p5e mostly as Capacity Blocks)
        compute_capability=(9, 0),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    "b200": GPUSpec(
        name="b200",
        bf16_flops_per_s=2250e12,  # NVIDIA Blackwell datasheet, HGX B200 BF16 Tensor Core (dense), per GPU
        fp8_flops_per_s=4500e12,  # NVIDIA Blackwell datasheet, HGX B200 FP8 Tensor Core (dense), per GPU
        fp4_flops_per_s=9000e12,  # NVIDIA Blackwell datasheet, HGX B200 FP4 Tensor Core 144 PFLOPS (sparse) / 8 / 2
        fp32_flops_per_s=75e12,  # NVIDIA Blackwell datasheet, HGX B200 FP32, per GPU
        hbm_bytes=183359 * _MIB,  # nvidia-smi total memory, "NVIDIA B200" (NVIDIA/TensorRT-LLM issue #10278)
        hbm_bytes_per_s=7.7e12,  # aiconfigurator-core 0.12.0 systems/b200_sxm.yaml mem_bw (pytorch/ao#4002: 7.67 TB/s)
        interconnect_bytes_per_s=900e9,  # NVIDIA Blackwell datasheet, NVLink 5 1.8 TB/s bidirectional
        host_link_bytes_per_s=64e9,  # assumed PCIe Gen5 x16, 128 GB/s bidirectional (as the H100's)
        price_per_hour=18.0,  # estimate, edit it: AWS sells P6-B200 only as Capacity Blocks (no on-demand list
        # price); set at 1.33x the H200's estimate
        compute_capability=(10, 0),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    # The Blackwell parts below have NVIDIA's kernel tables (aiconfigurator-core 0.12.0, calibrate/measured/); their
    # rates are that package's systems/<system>.yaml, which cites NVIDIA's datasheets (the Blackwell datasheet for the
    # GB200, the Blackwell Ultra datasheet for the B300 and GB300); fp32 there is not given: None.
    "b300": GPUSpec(
        name="b300",
        bf16_flops_per_s=2250e12,  # aiconfigurator-core 0.12.0 systems/b300_sxm.yaml bfloat16_tc_flops
        # ("4.5 PFLOPS sparse / 2")
        fp8_flops_per_s=4500e12,  # same file, fp8_tc_flops (9 PFLOPS sparse / 2)
        fp4_flops_per_s=14000e12,  # same file, fp4_tc_flops ("14 PFLOPS dense")
        hbm_bytes=275040 * _MIB,  # same file, mem_capacity: "275040MiB reported by nvidia-smi"
        hbm_bytes_per_s=7.75e12,  # same file, mem_bw ("Total mem_bw: 62TB/s / 8 GPUs")
        interconnect_bytes_per_s=900e9,  # same file, intra_node_bw (NVLink 5, 1.8 TB/s bidirectional / 2)
        host_link_bytes_per_s=128e9,  # same file, pcie_bw (PCIe Gen6, 256 GB/s bidirectional / 2)
        price_per_hour=21.6,  # estimate, edit it: no on-demand list price checked; set at 1.2x the B200's estimate
        compute_capability=(10, 3),  # same file, sm_version 103
    ),
    "gb200": GPUSpec(
        name="gb200",  # one Blackwell GPU of a GB200 superchip (an NVL72 rack: 72 GPUs on one NVLink domain)
        bf16_flops_per_s=2500e12,  # aiconfigurator-core 0.12.0 systems/gb200.yaml bfloat16_tc_flops
        fp8_flops_per_s=5000e12,  # same file, fp8_tc_flops
        fp4_flops_per_s=10000e12,  # same file, fp4_tc_flops
        hbm_bytes=189471 * _MIB,  # same file, mem_capacity: "189471MiB reported by nvidia-smi"
        hbm_bytes_per_s=8.0e12,  # same file, mem_bw
        interconnect_bytes_per_s=900e9,  # same file, intra_node_bw and inter_node_bw (NVLink 5 through the rack)
        host_link_bytes_per_s=64e9,  # same file, pcie_bw (its NVLink-C2C link to the Grace CPU is not modelled)
        price_per_hour=20.0,  # estimate, edit it: no on-demand list price checked; set at 1.1x the B200's estimate
        compute_capability=(10, 0),  # same file, sm_version 100
    ),
    "gb300": GPUSpec(
        name="gb300",  # one Blackwell Ultra GPU of a GB300 superchip (an NVL72 rack)
        bf16_flops_per_s=2500e12,  # aiconfigurator-core 0.12.0 systems/gb300.yaml bfloat16_tc_flops
        fp8_flops_per_s=5000e12,  # same file, fp8_tc_flops
        fp4_flops_per_s=15000e12,  # same file, fp4_tc_flops
        hbm_bytes=284208 * _MIB,  # same file, mem_capacity: "284208MiB reported by nvidia-smi"
        hbm_bytes_per_s=8.0e12,  # same file, mem_bw
        interconnect_bytes_per_s=900e9,  # same file, intra_node_bw and inter_node_bw (NVLink 5 through the rack)
        host_link_bytes_per_s=64e9,  # same file, pcie_bw (its NVLink-C2C link to the Grace CPU is not modelled)
        price_per_hour=24.0,  # estimate, edit it: no on-demand list price checked; set at 1.2x the GB200's estimate
        compute_capability=(10, 3),  # same file, sm_version 103
    ),
    "l40s": GPUSpec(
        name="l40s",
        bf16_flops_per_s=362.05e12,  # NVIDIA L40S datasheet, BF16 Tensor Core (dense)
        fp8_flops_per_s=733e12,  # NVIDIA L40S datasheet, FP8 Tensor Core (dense)
        fp32_flops_per_s=91.6e12,  # NVIDIA L40S datasheet, FP32
        hbm_bytes=46068 * _MIB,  # nvidia-smi total memory, L40S 48GB GDDR6
        hbm_bytes_per_s=864e9,  # NVIDIA L40S datasheet, memory bandwidth
        interconnect_bytes_per_s=32e9,  # no NVLink: peers talk over PCIe Gen4 x16 (datasheet: 64 GB/s bidirectional)
        host_link_bytes_per_s=32e9,  # NVIDIA L40S datasheet, PCIe Gen4 x16 64 GB/s bidirectional
        price_per_hour=1.861,  # approximate: AWS g6e.xlarge on-demand (1 GPU)
        compute_capability=(8, 9),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    "l40": GPUSpec(
        name="l40",
        # NVIDIA L40 datasheet columns (read through a reseller's copy of its L40 / L40S table, mullet.se): its
        # tensor cores run bf16 at 181 dense TFLOPS with fp32 accumulation, half the L40S's, 2x its fp32 rate
        bf16_flops_per_s=181.05e12,  # BFLOAT16 Tensor Core 362.1 TFLOPS with sparsity / 2
        fp8_flops_per_s=362e12,  # FP8 Tensor Core 724 TFLOPS with sparsity / 2
        fp32_flops_per_s=90.5e12,  # FP32 90.5 TFLOPS
        hbm_bytes=46068 * _MIB,  # nvidia-smi total memory, "NVIDIA L40" 48GB GDDR6 (as the L40S)
        hbm_bytes_per_s=864e9,  # memory bandwidth 864 GB/s
        interconnect_bytes_per_s=32e9,  # no NVLink: peers talk over PCIe Gen4 x16 (64 GB/s bidirectional)
        host_link_bytes_per_s=32e9,  # PCIe Gen4 x16 64 GB/s bidirectional
        price_per_hour=1.5,  # estimate, edit it: no on-demand list price checked; set below the L40S's
        compute_capability=(8, 9),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    "rtx-pro-6000": GPUSpec(
        name="rtx-pro-6000",  # the RTX PRO 6000 Blackwell Server Edition (600 W), as NVIDIA's tables measured it
        bf16_flops_per_s=467.8e12,  # aiconfigurator-core 0.12.0 systems/rtx_pro_6000_server.yaml ("467.8 TFLOPS dense,
        # scaled to 2430 MHz")
        fp8_flops_per_s=935.6e12,  # same file, fp8_tc_flops
        fp4_flops_per_s=1871.2e12,  # same file, fp4_tc_flops
        hbm_bytes=97887 * _MIB,  # same file, mem_capacity: "97887 MiB reported by nvidia-smi" (GDDR7)
        hbm_bytes_per_s=1.792e12,  # same file, mem_bw
        interconnect_bytes_per_s=64e9,  # no NVLink: peers talk over PCIe Gen5 x16 (same file, intra_node_bw)
        host_link_bytes_per_s=64e9,  # same file, pcie_bw (PCIe Gen5 x16)
        price_per_hour=3.0,  # estimate, edit it: no on-demand list price checked
        compute_capability=(12, 0),  # same file, sm_version 120
    ),
    "l4": GPUSpec(
        name="l4",
        bf16_flops_per_s=121e12,  # NVIDIA L4 datasheet, BF16 Tensor Core 242 TFLOPS with sparsity / 2
        fp8_flops_per_s=242.5e12,  # NVIDIA L4 datasheet, FP8 Tensor Core 485 TFLOPS with sparsity / 2
        fp32_flops_per_s=30.3e12,  # NVIDIA L4 datasheet, FP32
        hbm_bytes=23034 * _MIB,  # nvidia-smi total memory, L4 24GB GDDR6
        hbm_bytes_per_s=300e9,  # NVIDIA L4 datasheet, memory bandwidth
        interconnect_bytes_per_s=32e9,  # no NVLink: peers talk over PCIe Gen4 x16
        host_link_bytes_per_s=32e9,  # NVIDIA L4 datasheet, PCIe Gen4 x16 64 GB/s bidirectional
        price_per_hour=0.805,  # approximate: AWS g6.xlarge on-demand (1 GPU)
        compute_capability=(8, 9),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
    "a10g": GPUSpec(
        name="a10g",
        # NVIDIA publishes no A10G datasheet; the AWS variant of the A10 has a lower tensor rate.
        bf16_flops_per_s=70e12,  # Baseten blog "NVIDIA A10 vs A10G": A10G BF16 tensor 70 TFLOPS
        fp8_flops_per_s=None,  # Ampere has no fp8 tensor cores
        fp32_flops_per_s=None,  # no NVIDIA datasheet: not known (the materialized attention kernel: the bf16 rate)
        hbm_bytes=23028 * _MIB,  # nvidia-smi total memory, A10G 24GB GDDR6
        hbm_bytes_per_s=600e9,  # NVIDIA A10 datasheet (same memory as A10G), 600 GB/s
        interconnect_bytes_per_s=32e9,  # no NVLink on g5 instances: peers talk over PCIe Gen4 x16
        host_link_bytes_per_s=32e9,  # PCIe Gen4 x16, 64 GB/s bidirectional
        price_per_hour=1.006,  # approximate: AWS g5.xlarge on-demand (1 GPU)
        compute_capability=(8, 6),  # NVIDIA CUDA GPUs list (developer.nvidia.com/cuda-gpus)
    ),
}


def canonical_name(name: str) -> str:
    """A catalog name as the catalog keys it: case-insensitive, '_' and '-' interchangeable."""
    return name.strip().lower().replace("_", "-")


def data_owner(gpu: "str | GPUSpec", ships) -> str:
    """The GPU whose measured data (`ships(name)`: kernel tables, whole-step profiles) prices this one: its own where
    they ship, else those of the part its catalog entry is the same silicon as (`GPUSpec.kernels_as`: the H800 is
    the H100 SXM with slower links) where those ship; its own name otherwise (none ships)."""
    name = canonical_name(gpu.name if isinstance(gpu, GPUSpec) else str(gpu))
    spec = gpu if isinstance(gpu, GPUSpec) else GPUS.get(name)
    if ships(name) or spec is None or not spec.kernels_as:
        return name
    twin = canonical_name(spec.kernels_as)
    return twin if ships(twin) else name


# Words that, added to a GPU's name, name another card: the catalog's entries without them are SXM parts
# ('h800-pcie' is the H800 PCIe card, not the h800 entry; 'h200-sxm' is the h200)
OTHER_CARD_WORDS = ("pcie", "nvl")


def _meant(key: str, names, other_card_words: tuple[str, ...] = ()) -> str:
    """' (did you mean ...?)' naming the catalog entries `key` spells with words added or left off at a dash, or ''.
    Only those: a near spelling is often another part or model (h20 is not h200, qwen3-30b not qwen3-32b), so
    'h200-sxm' and 'meta-llama-3.1-8b-instruct' get h200 and llama-3.1-8b, 'a100' both A100s, 'h20' nothing; a
    family name ('qwen3', a dozen entries) no guess either; an entry `key` adds one of `other_card_words` to, none."""
    added = set(key.split("-")) & set(other_card_words)
    inside = [n for n in names if re.fullmatch(rf"(.+-)?{re.escape(n)}(-.+)?", key)
              and added <= set(n.split("-"))]
    longer = [n for n in names if n.startswith(key + "-")]
    found = [max(inside, key=len)] if inside else longer
    return did_you_mean(*found) if key and len(found) <= 3 else ""


# Hugging Face config.json files shipped with the package, named as the catalog names them (a file per model: adding
# one adds a model; sim/model/configs/README.md says where each came from).
MODEL_CONFIGS_DIR = Path(__file__).parent / "configs"


@lru_cache(maxsize=1)
def model_names() -> tuple[str, ...]:
    """Every catalog model name: those written out in MODELS, then the shipped configs' (the package's own files:
    listed once per process)."""
    shipped = sorted(p.stem for p in MODEL_CONFIGS_DIR.glob("*.json"))
    return (*MODELS, *(name for name in shipped if name not in MODELS))


def _catalog_key(name: str) -> str:
    """A model name as the catalog keys it: case-insensitive, '_' and '-' alike, a Hugging Face repo's owner
    dropped ("Qwen/Qwen3-32B" is qwen3-32b; a path is no repo id, and names nothing)."""
    key = canonical_name(name)
    owner, slash, repo = key.partition("/")
    return repo if slash and owner.strip(".") and "/" not in repo else key


def shipped_config(name: str) -> Path | None:
    """The shipped config.json a catalog name reads, or None (a name written out in MODELS, or no such file)."""
    key = _catalog_key(name)
    path = MODEL_CONFIGS_DIR / f"{key}.json"
    return path if key not in MODELS and key and path.parent == MODEL_CONFIGS_DIR and path.is_file() else None


@lru_cache(maxsize=None)
def _read_shipped(key: str) -> tuple[ModelSpec, CheckpointQuantization | None]:
    from sim.model.hf_config import read_hf_config  # reads the file format; imports nothing of the catalog
    spec, _, quant = read_hf_config(MODEL_CONFIGS_DIR / f"{key}.json", key, f"model {key}")
    return spec, quant


def catalog_models() -> dict[str, ModelSpec]:
    """Every catalog model by name (each shipped config read once per process, `_read_shipped`)."""
    return {name: get_model(name) for name in model_names()}


def shipped_quantization(name: str) -> CheckpointQuantization | None:
    """The quantization a shipped config declares (its checkpoint's dtype), None for any other name."""
    return _read_shipped(_catalog_key(name))[1] if shipped_config(name) is not None else None


# Words of a repo's name that leave its architecture as the catalog model's (an instruction-tuned or chat checkpoint,
# the Hugging Face format's copy: meta-llama/Llama-2-7b-chat-hf is llama-2-7b) and a family's leading word
# (Meta-Llama-3.1-8B is llama-3.1-8b). Any other word (FP8, AWQ, a date) may change the weights or the config.
SAME_ARCHITECTURE_WORDS = ("instruct", "chat", "hf")
LEADING_FAMILY_WORDS = ("meta",)


def catalog_model_name(name: str) -> str | None:
    """The catalog's name for a model name or Hugging Face repo id ("Qwen/Qwen3-32B": qwen3-32b; with its
    SAME_ARCHITECTURE_WORDS and LEADING_FAMILY_WORDS left out where the whole name is not in the catalog:
    "meta-llama/Llama-3.1-8B-Instruct" is llama-3.1-8b), None for any other (a local path, a repo the catalog
    lacks, an FP8 copy of a model the catalog has only in bf16)."""
    key = _catalog_key(name) if isinstance(name, str) else None
    if not key:
        return None
    words = [word for word in key.split("-") if word not in SAME_ARCHITECTURE_WORDS]
    while words and words[0] in LEADING_FAMILY_WORDS:
        words = words[1:]
    for candidate in (key, "-".join(words)):
        if candidate in MODELS or shipped_config(candidate) is not None:
            return candidate
    return None


def _checkpoint_weights(name: str) -> str:
    checkpoint = shipped_quantization(name)
    return (checkpoint.weights if checkpoint is not None else None) or "16-bit"


def weights_priced(model: str, weights: str | None) -> str:
    """The weights a scenario of `model` (a name) is priced in: `weights` (quantization.weights, as written) where
    given, bf16 and fp16 alike ("16-bit"), else a catalog checkpoint's own dtype, else 16-bit."""
    if weights is not None:
        return "16-bit" if weights in ("bf16", "fp16") else weights
    name = catalog_model_name(model)
    return _checkpoint_weights(name) if name is not None else "16-bit"


def catalog_mismatch(served: str, given: str, given_weights: str | None) -> tuple[str, str, str, str] | None:
    """How a model named `served` (a launch command's, a benchmark result's) is not the scenario's model `given` in
    `given_weights` (None: its checkpoint's), where both are catalog names: ("model", the served catalog model, ...)
    for another model, ("weights", it, its weights, the scenario's) for the same architecture in other weights
    (Qwen/Qwen3-32B-FP8 beside qwen3-32b in bf16); None where they agree, or where either is no catalog name."""
    served_name, given_name = catalog_model_name(served), catalog_model_name(given)
    if served_name is None or given_name is None or served_name == given_name:
        return None
    served_weights = _checkpoint_weights(served_name)
    if get_model(given_name).model_copy(update={"name": served_name}) != get_model(served_name):
        return ("model", served_name, served_weights, "")
    asked = weights_priced(given_name, given_weights)
    return None if asked == served_weights else ("weights", served_name, served_weights, asked)


# Words of a checkpoint's name that say its weights' dtype (Qwen/Qwen3-8B-FP8, nvidia/Llama-3.3-70B-Instruct-FP4,
# Qwen/Qwen3-8B-GPTQ-Int8, RedHatAI/...-quantized.w4a16), and the weights each allows
NAMED_WEIGHTS = {"fp8": ("fp8",), "fp4": ("nvfp4",), "nvfp4": ("nvfp4",), "mxfp4": ("mxfp4",), "int4": ("int4",),
                 "int8": ("int8",), "w4a16": ("int4",), "w8a16": ("int8",), "w4a8": ("int4",)}
# Words that name a quantization method, read where no dtype word is in the name: AWQ is 4-bit (vLLM's AWQConfig
# refuses other bits), GPTQ's bits are not in the word, and w8a8 is int8 (an FP8 copy says fp8 too)
NAMED_METHODS = {"awq": ("int4",), "gptq": ("int4", "int8"), "w8a8": ("int8",)}


def named_weights(name: str) -> tuple[str, ...] | None:
    """The weights' dtypes a checkpoint's name allows (a word of its last path part in `NAMED_WEIGHTS`, else in
    `NAMED_METHODS`: Qwen/Qwen3-8B-AWQ, int4; Qwen/Qwen3-8B-GPTQ, int4 or int8), or None where it says none."""
    words = re.split(r"[-_.]", name.rsplit("/", 1)[-1].lower())
    for table in (NAMED_WEIGHTS, NAMED_METHODS):
        named = next((table[word] for word in words if word in table), None)
        if named is not None:
            return named
    return None


def named_weights_conflict(served: str, given: str, given_weights: str | None) -> tuple[str, str] | None:
    """(the weights a checkpoint's name says, in words; those the scenario of `given` in `given_weights` is priced
    in) where `served` is no catalog name (a checkpoint the catalog lacks: Qwen/Qwen3-8B-AWQ) and its name says
    other weights (`named_weights`) than the scenario's (`weights_priced`); None otherwise. The catalog's own
    checkpoints are `catalog_mismatch`'s."""
    named = named_weights(served) if catalog_model_name(served) is None else None
    asked = weights_priced(given, given_weights)
    return None if named is None or asked in named else (" or ".join(named), asked)


def names_same_model(a: str, b: str) -> bool:
    """Whether two free-form model names (a benchmark result's label, a scenario's) may name one model: leniently,
    case, punctuation, an owner and a suffix (-Instruct, a path's folders) aside, one name within the other; another
    family or size is not. Where both are catalog names, `catalog_mismatch` says more (the weights too)."""
    def normalized(name: str) -> str:
        return re.sub(r"[^a-z0-9]", "", name.rsplit("/", 1)[-1].lower())
    first, second = normalized(a), normalized(b)
    return not first or not second or first in second or second in first


def get_model(name: str, field: str = "model") -> ModelSpec:
    """Catalog model by id (case-insensitive, '_' and '-' interchangeable, a Hugging Face owner dropped, and an
    instruction-tuned checkpoint's name its base model's: `catalog_model_name`)."""
    key = catalog_model_name(name) or (_catalog_key(name) if isinstance(name, str) else None)
    if key in MODELS:
        return MODELS[key]
    if key is not None and shipped_config(key) is not None:
        return _read_shipped(key)[0]
    raise ConfigError(f"{field}: unknown model {name!r}{_meant(key, model_names()) if key else ''}; allowed: "
                      f"{', '.join(model_names())}, or a config.json "
                      "({hf_config: path})")


def get_gpu(name: str, field: str = "hardware.gpu") -> GPUSpec:
    """Catalog GPU by id (case-insensitive, '_' and '-' interchangeable)."""
    try:
        return GPUS[canonical_name(name) if isinstance(name, str) else None]
    except KeyError:
        meant = _meant(canonical_name(name), GPUS, OTHER_CARD_WORDS) if isinstance(name, str) else ""
        raise ConfigError(f"{field}: unknown gpu {name!r}{meant}; allowed: {', '.join(GPUS)}") from None


def resolve_model(value: str | ModelSpec, field: str = "model") -> ModelSpec:
    """A validated scenario's model: a ModelSpec as it is, a catalog name looked up."""
    return value if isinstance(value, ModelSpec) else get_model(value, field)


def resolve_gpu(value: str | dict | GPUSpec, field: str = "hardware.gpu") -> GPUSpec:
    """A raw scenario's GPU: a catalog name, an inline mapping (validated as a GPUSpec) or a GPUSpec."""
    if isinstance(value, GPUSpec):
        return value
    if not isinstance(value, dict):
        return get_gpu(value, field)
    spec = GPUSpec.model_validate(value)
    problem = kernels_as_problem(spec)
    if problem:
        raise ConfigError(f"{field}.{problem}")
    return spec


def kernels_as_problem(gpu: GPUSpec) -> str | None:
    """Why an inline GPU's `kernels_as` names no catalog GPU (None: it names one, or none is given): one line from the
    field on."""
    if gpu.kernels_as is None or canonical_name(gpu.kernels_as) in GPUS:
        return None
    meant = _meant(canonical_name(gpu.kernels_as), GPUS, OTHER_CARD_WORDS)
    return f"kernels_as: unknown gpu {gpu.kernels_as!r}{meant}; allowed: a catalog GPU ({', '.join(GPUS)}), or null"
