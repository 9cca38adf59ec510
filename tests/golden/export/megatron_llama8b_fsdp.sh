# Megatron-LM launch for llama-3.1-8b on 16 x h100-sxm-80gb
# flags checked against Megatron-LM core_r0.14+ (main @ 000c4ac24f61159c138b0975def722c65245983c)
# run on every node; set NODE_RANK and MASTER_ADDR
torchrun \
  --nproc_per_node 8 \
  --nnodes 2 \
  --node_rank $NODE_RANK \
  --master_addr $MASTER_ADDR \
  --master_port 6000 \
  pretrain_gpt.py \
  --num-layers 32 \
  --hidden-size 4096 \
  --ffn-hidden-size 14336 \
  --swiglu \
  --num-attention-heads 32 \
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
  --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 \
  --context-parallel-size 1 \
  --use-megatron-fsdp \
  --data-parallel-sharding-strategy optim_grads_params \
  --ckpt-format fsdp_dtensor \
  --micro-batch-size 2 \
  --global-batch-size 64 \
  --recompute-granularity full \
  --recompute-method uniform \
  --recompute-num-layers 1 \
  --bf16 \
  --optimizer adam \
  --mock-data \
  --tokenizer-type NullTokenizer \
  --vocab-size 128256
