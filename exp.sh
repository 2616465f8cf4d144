#!/bin/bash
# The Megatron-DeepSpeed run of sc.json, written by `trainsim export megatron`.
# 16 GPUs: 2 hosts of 8 (dgx-h100, NVIDIA H100 SXM5 80GB). Run this script on every host with NODE_RANK
# (0 .. hosts-1), MASTER_ADDR and MASTER_PORT set, MEGATRON_DEEPSPEED pointing at a Megatron-DeepSpeed checkout,
# DATA_PATH and TOKENIZER_MODEL at your data.

set -euo pipefail

DISTRIBUTED_ARGS=(
    --nproc-per-node 8
    --nnodes 2
    --node-rank "${NODE_RANK:-0}"
    --master-addr "${MASTER_ADDR:-localhost}"
    --master-port "${MASTER_PORT:-6000}"
)

MODEL_ARGS=(
    --num-layers 30
    --hidden-size 1024
    --num-attention-heads 16
    --ffn-hidden-size 4096
    --hidden-dropout 0.1
    --attention-dropout 0.1
    --seq-length 1024
    --max-position-embeddings 1024
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size 4
    --pipeline-model-parallel-size 1
    --no-pipeline-parallel            # DeepSpeed's engine, not its pipeline engine
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 64
    --train-iters 100        # steps to time; a training run's budget is --train-samples
    --bf16
    --lr 3.0e-4              # the optimizer's hyperparameters do not change a step's time: set your own
    --min-lr 3.0e-5
    --lr-decay-style cosine
)

DATA_ARGS=(
    --data-path "${DATA_PATH}"                  # your data
    --tokenizer-type GPTSentencePieceTokenizer
    --tokenizer-model "${TOKENIZER_MODEL}"      # a tokenizer of 50000 tokens (import with --vocab 50000)
)

# DeepSpeed's configuration, written where --deepspeed_config reads it.
DS_CONFIG=./ds_config.json
cat <<EOT > "$DS_CONFIG"
{
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 1,
  "steps_per_print": 1,
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 1, "reduce_scatter": false},
  "bf16": {"enabled": true},
  "communication_data_type": "bf16"
}
EOT

DEEPSPEED_ARGS=(
    --deepspeed
    --deepspeed_config "$DS_CONFIG"
    --zero-stage 1
)

LOGGING_ARGS=(
    --log-interval 1
    --eval-iters 0
)

torchrun "${DISTRIBUTED_ARGS[@]}" "${MEGATRON_DEEPSPEED:-.}/pretrain_gpt.py" \
    "${MODEL_ARGS[@]}" \
    "${PARALLEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${DEEPSPEED_ARGS[@]}" \
    "${LOGGING_ARGS[@]}"
