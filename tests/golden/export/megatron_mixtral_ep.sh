# Megatron-LM launch for mixtral-8x7b on 32 x h100-sxm-80gb
# flags checked against Megatron-LM core_r0.14+ (main @ 000c4ac24f61159c138b0975def722c65245983c)
# run on every node; set NODE_RANK and MASTER_ADDR
CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun \
  --nproc_per_node 8 \
  --nnodes 4 \
  --node_rank $NODE_RANK \
  --master_addr $MASTER_ADDR \
  --master_port 6000 \
  pretrain_gpt.py \
  --num-layers 32 \
  --hidden-size 4096 \
  --ffn-hidden-size 14336 \
  --swiglu \
  --num-experts 8 \
  --moe-router-topk 2 \
  --moe-ffn-hidden-size 14336 \
  --moe-token-dispatcher-type alltoall \
  --moe-grouped-gemm \
  --num-attention-heads 32 \
  --group-query-attention \
  --num-query-groups 8 \
  --seq-length 4096 \
  --max-position-embeddings 32768 \
  --position-embedding-type rope \
  --rotary-base 1000000 \
  --normalization RMSNorm \
  --untie-embeddings-and-output-weights \
  --disable-bias-linear \
  --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 \
  --context-parallel-size 1 \
  --expert-model-parallel-size 8 \
  --expert-tensor-parallel-size 1 \
  --sequence-parallel \
  --tp-comm-overlap \
  --use-distributed-optimizer \
  --micro-batch-size 1 \
  --global-batch-size 128 \
  --recompute-granularity selective \
  --bf16 \
  --optimizer adam \
  --mock-data \
  --tokenizer-type NullTokenizer \
  --vocab-size 32000
