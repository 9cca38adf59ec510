#!/bin/bash
# torchtitan launch for mixtral-8x7b on 32 x h100-sxm-80gb
# targets torchtitan 0.3.0 (PyPI torchtitan==0.3.0); every flag is a field of its Trainer.Config (torchtitan/config/manager.py parses them with tyro)
# torchtitan has no config function for mixtral-8x7b: write one (see torchtitan/models/*/config_registry.py) and set TITAN_MODULE/TITAN_CONFIG
# training length: set TRAIN_STEPS (no --train-tokens given)
# learning rate: cosine 0.0003 -> 3e-05, 1% warmup (a common starting point; tune it)
# torchrun launcher: run this script on every node, with NODE_RANK and MASTER_ADDR
set -euo pipefail

# ---- set these before launching; the script stops while one is unset ----
HF_ASSETS_PATH=${HF_ASSETS_PATH:?"set HF_ASSETS_PATH to the directory of the model's Hugging Face tokenizer files (torchtitan: scripts/download_hf_assets.py --assets tokenizer)"}
DATASET=${DATASET:?"set DATASET to a dataset registered in torchtitan.hf_datasets (c4 to try)"}
TITAN_MODULE=${TITAN_MODULE:?"set TITAN_MODULE to a Python module whose config function builds this model"}
TITAN_CONFIG=${TITAN_CONFIG:?"set TITAN_CONFIG to that function's name (it returns a torchtitan Trainer.Config)"}
TRAIN_STEPS=${TRAIN_STEPS:?"set TRAIN_STEPS to the run's optimizer steps (262,144 tokens each; or export with --train-tokens)"}
NODE_RANK=${NODE_RANK:?"set NODE_RANK to this node's index, 0 to 3"}
MASTER_ADDR=${MASTER_ADDR:?"set MASTER_ADDR to the address of node 0"}

torchrun \
  --nproc_per_node 8 \
  --nnodes 4 \
  --node_rank "$NODE_RANK" \
  --master_addr "$MASTER_ADDR" \
  --master_port 6000 \
  -m torchtitan.train \
  --module "$TITAN_MODULE" \
  --config "$TITAN_CONFIG" \
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
  --training.local_batch_size 1 \
  --training.global_batch_size 64 \
  --training.seq_len 4096 \
  --training.steps "$TRAIN_STEPS" \
  --training.max_norm 1.0 \
  --training.mixed_precision_param bfloat16 \
  --training.disable_cuda_graphs \
  --parallelism.data_parallel_replicate_degree 1 \
  --parallelism.data_parallel_shard_degree 16 \
  --parallelism.fsdp_reshard_after_forward default \
  --parallelism.tensor_parallel_degree 2 \
  --parallelism.pipeline_parallel_degree 1 \
  --parallelism.context_parallel_degree 1 \
  --parallelism.expert_parallel_degree 8 \
  --compile.no-enable \
  --compile.no-enable-async-tensor-parallel \
  activation-checkpoint:full
