# Megatron-LM launch for llama-3.1-70b on 64 x h100-sxm-80gb
# flags checked against Megatron-LM core_r0.14+ (main @ 000c4ac24f61159c138b0975def722c65245983c)
# run on every node; set NODE_RANK and MASTER_ADDR
CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun \
  --nproc_per_node 8 \
  --nnodes 8 \
  --node_rank $NODE_RANK \
  --master_addr $MASTER_ADDR \
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
  --mock-data \
  --tokenizer-type NullTokenizer \
  --vocab-size 128256
