#!/bin/bash
# Megatron-LM launch for llama-3.1-70b on 64 x h100-sxm-80gb
# targets Megatron-LM core_r0.14+ (main @ 000c4ac24f61159c138b0975def722c65245983c)
# every flag is defined in its megatron/training/arguments.py
# run from the Megatron-LM checkout (pretrain_gpt.py is at its top level)
# training length: set TRAIN_ITERS (no --train-tokens given)
# learning rate: cosine 0.0003 -> 3e-05, 1% warmup (a common starting point; tune it)
# torchrun launcher: run this script on every node, with NODE_RANK and MASTER_ADDR
set -euo pipefail

# ---- set these before launching; the script stops while one is unset ----
DATA_PATH=${DATA_PATH:?"set DATA_PATH to your tokenized data prefix (tools/preprocess_data.py output, no .bin/.idx)"}
TOKENIZER_MODEL=${TOKENIZER_MODEL:?"set TOKENIZER_MODEL to the Hugging Face tokenizer name or path of that data"}
CHECKPOINT_DIR=${CHECKPOINT_DIR:?"set CHECKPOINT_DIR to a shared directory for checkpoints (saved to and resumed from)"}
TRAIN_ITERS=${TRAIN_ITERS:?"set TRAIN_ITERS to the run's optimizer steps (524,288 tokens each; or export with --train-tokens)"}
NODE_RANK=${NODE_RANK:?"set NODE_RANK to this node's index, 0 to 7"}
MASTER_ADDR=${MASTER_ADDR:?"set MASTER_ADDR to the address of node 0"}
export CUDA_DEVICE_MAX_CONNECTIONS=1

torchrun \
  --nproc_per_node 8 \
  --nnodes 8 \
  --node_rank "$NODE_RANK" \
  --master_addr "$MASTER_ADDR" \
  --master_port 6000 \
  pretrain_gpt.py \
  --num-layers 80 \
  --hidden-size 8192 \
  --ffn-hidden-size 28672 \
  --swiglu \
  --num-attention-heads 64 \
  --group-query-attention \
  --num-query-groups 8 \
  --seq-length 8192 \
  --max-position-embeddings 131072 \
  --position-embedding-type rope \
  --rotary-base 500000 \
  --use-rope-scaling \
  --rope-scaling-factor 8.0 \
  --normalization RMSNorm \
  --untie-embeddings-and-output-weights \
  --disable-bias-linear \
  --tensor-model-parallel-size 8 \
  --pipeline-model-parallel-size 4 \
  --num-virtual-stages-per-pipeline-rank 2 \
  --context-parallel-size 1 \
  --sequence-parallel \
  --tp-comm-overlap \
  --use-distributed-optimizer \
  --micro-batch-size 1 \
  --global-batch-size 64 \
  --recompute-granularity selective \
  --bf16 \
  --optimizer adam \
  --train-iters "$TRAIN_ITERS" \
  --lr 0.0003 \
  --min-lr 3e-05 \
  --lr-decay-style cosine \
  --lr-warmup-fraction 0.01 \
  --weight-decay 0.1 \
  --adam-beta1 0.9 \
  --adam-beta2 0.95 \
  --clip-grad 1.0 \
  --save "$CHECKPOINT_DIR" \
  --load "$CHECKPOINT_DIR" \
  --save-interval 1000 \
  --log-interval 10 \
  --data-path "$DATA_PATH" \
  --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$TOKENIZER_MODEL"
