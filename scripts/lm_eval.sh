#!/usr/bin/env bash
# Runs lm-eval (`local-completions`, the server's own tokenizer through /tokenize and
# /tokenizer_info) against a running OpenAI-compatible server on two small local tasks:
# tests/lm_eval/tqserve_facts_mc (loglikelihood, multiple choice) and tqserve_capitals_gen
# (generation). Nothing is fetched from the Hugging Face hub.
#   scripts/lm_eval.sh http://127.0.0.1:8000 [MODEL_ID] [OUTPUT_DIR] [lm_eval options, e.g. --log_samples]
# lm-eval comes from build/lm-eval-venv (scripts/setup.sh makes it) or $LM_EVAL.
set -euo pipefail
cd "$(dirname "$0")/.."
URL="${1:?usage: scripts/lm_eval.sh URL [MODEL_ID] [OUTPUT_DIR]}"
MODEL="${2:-$(curl -sf "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')}"
OUT="${3:-build/lm-eval-results}"
LM_EVAL="${LM_EVAL:-build/lm-eval-venv/bin/lm_eval}"
OUT="$(realpath -m "$OUT")"
TASKS="$(realpath tests/lm_eval)"
cd "$TASKS"  # the tasks name their data files relative to here
HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 "$OLDPWD/$LM_EVAL" --model local-completions \
  --model_args "model=$MODEL,base_url=$URL/v1/completions,tokenizer_backend=remote,tokenized_requests=False,num_concurrent=4,max_retries=1" \
  --include_path "$TASKS" --tasks tqserve_facts_mc,tqserve_capitals_gen --batch_size 1 --output_path "$OUT" "${@:4}"
