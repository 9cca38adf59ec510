#!/bin/bash
# torchtitan launch for llama-3.1-70b on 64 x h100-sxm-80gb
# targets torchtitan 0.3.0 (PyPI torchtitan==0.3.0); every flag is a field of its Trainer.Config (torchtitan/config/manager.py parses them with tyro)
# training length: set TRAIN_STEPS (no --train-tokens given)
# learning rate: cosine 0.0003 -> 3e-05, 1% warmup (a common starting point; tune it)
# torchrun launcher: run this script on every node, with NODE_RANK and MASTER_ADDR
set -euo pipefail

# ---- set these before launching; the script stops while one is unset ----
HF_ASSETS_PATH=${HF_ASSETS_PATH:?"set HF_ASSETS_PATH to the directory of the model's Hugging Face tokenizer files (torchtitan: scripts/download_hf_assets.py --assets tokenizer)"}
DATASET=${DATASET:?"set DATASET to a dataset registered in torchtitan.hf_datasets (c4 to try)"}
TRAIN_STEPS=${TRAIN_STEPS:?"set TRAIN_STEPS to the run's optimizer steps (524,288 tokens each; or export with --train-tokens)"}
NODE_RANK=${NODE_RANK:?"set NODE_RANK to this node's index, 0 to 7"}
MASTER_ADDR=${MASTER_ADDR:?"set MASTER_ADDR to the address of node 0"}

torchrun \
  --nproc_per_node 8 \
  --nnodes 8 \
  --node_rank "$NODE_RANK" \
  --master_addr "$MASTER_ADDR" \
  --master_port 6000 \
  -m torchtitan.train \
  --module llama3 \
  --config llama3_70b \
  --hf_assets_path "$HF_ASSETS_PATH" \
  --dump_folder ./outputs \
  --dataloader.dataset "$DATASET" \
  --optimizer.param_groups.0.optimizer_name AdamW \
  --optimizer.param_groups.0.optimizer_kwargs.lr 0.0003 \
  --optimizer.param_groups.0.optimizer_kwargs.weight_decay 0.1 \
  --lr_scheduler.warmup_steps "$(( (TRAIN_STEPS + 50) / 100 > 1 ? (TRAIN_STEPS + 50) / 100 : 1 ))" \
  --lr_scheduler.decay_type cosine \
  --lr_scheduler.min_lr_factor 0.1 \
  --checkpoint.enable \
  --checkpoint.folder checkpoint \
  --checkpoint.interval "$(( TRAIN_STEPS < 500 ? TRAIN_STEPS : 500 ))" \
  --training.local_batch_size 32 \
  --training.global_batch_size 64 \
  --training.seq_len 8192 \
  --training.steps "$TRAIN_STEPS" \
  --training.max_norm 1.0 \
  --training.mixed_precision_param bfloat16 \
  --training.disable_cuda_graphs \
  --parallelism.data_parallel_replicate_degree 1 \
  --parallelism.data_parallel_shard_degree 2 \
  --parallelism.fsdp_reshard_after_forward default \
  --parallelism.tensor_parallel_degree 8 \
  --parallelism.pipeline_parallel_degree 4 \
  --parallelism.module_fqns_per_model_part tok_embeddings,layers.0,layers.1,layers.2,layers.3,layers.4,layers.5,layers.6,layers.7,layers.8,layers.9 layers.10,layers.11,layers.12,layers.13,layers.14,layers.15,layers.16,layers.17,layers.18,layers.19 layers.20,layers.21,layers.22,layers.23,layers.24,layers.25,layers.26,layers.27,layers.28,layers.29 layers.30,layers.31,layers.32,layers.33,layers.34,layers.35,layers.36,layers.37,layers.38,layers.39 layers.40,layers.41,layers.42,layers.43,layers.44,layers.45,layers.46,layers.47,layers.48,layers.49 layers.50,layers.51,layers.52,layers.53,layers.54,layers.55,layers.56,layers.57,layers.58,layers.59 layers.60,layers.61,layers.62,layers.63,layers.64,layers.65,layers.66,layers.67,layers.68,layers.69 layers.70,layers.71,layers.72,layers.73,layers.74,layers.75,layers.76,layers.77,layers.78,layers.79,norm,lm_head \
  --parallelism.pipeline_parallel_schedule Interleaved1F1B \
  --parallelism.pipeline_parallel_microbatch_size 1 \
  --parallelism.context_parallel_degree 1 \
  --parallelism.expert_parallel_degree 1 \
  --compile.no-enable \
  --compile.no-enable-async-tensor-parallel \
  activation-checkpoint:selective
