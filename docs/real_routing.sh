#!/usr/bin/env bash
# Rebuild, on your own machine, the real routing sets of 64-128-expert models measured in
# docs/real_routing_search.md, from the public repositories that hold them, and print the
# statistics and preset checks that page reports. Nothing here is committed to EcoSim: none of
# these recordings carries a licence, so they are read where they are published and never
# redistributed (see the page). Needs git, and `ecosim` installed (pip install -e .).
#
#   docs/real_routing.sh [WORKDIR]      (default: ./real-routing, created; existing sets are kept)
set -euo pipefail
work=${1:-real-routing}
mkdir -p "$work"
cd "$work"

clone() {  # clone() URL COMMIT DIR: a shallow fetch of the one commit the page measured
  [ -d "$3" ] && return
  git init -q "$3" && git -C "$3" remote add origin "$1"
  git -C "$3" fetch -q --depth 1 origin "$2" && git -C "$3" checkout -q FETCH_HEAD
}

# OLMoE-1B-7B-0924 (64 experts, top-8): greedy decode, 400 prompts x up to 128 tokens, token ids.
clone https://github.com/helloimrizy-pages/opt cdd89062f93bb6e7b04fdd25a602757d542a1ad7 src-olmoe
[ -d olmoe-decode ] || ecosim import-routing src-olmoe/stage3_residency/traces/full/chunks --out olmoe-decode \
  --model olmoe-1b-7b --credit "helloimrizy-pages/opt @ cdd8906 (no licence: local measurement only)"

# DeepSeek-V2-Lite-Chat (64 routed experts, top-6, 2 shared not logged): prefill of 1,000 prompts, 8-bit weights.
clone https://github.com/ngavhane/moe-beyond 4dca2eacb7bc0a3086770a4de7a57cc0b81479bd src-dsv2lite
[ -d dsv2lite-prefill ] || ecosim import-routing src-dsv2lite/expert_activation_scripts/training_data_eamc \
  --out dsv2lite-prefill --num-experts 64 --credit "ngavhane/moe-beyond @ 4dca2ea (no licence: local measurement only)"

# Llama-4-Maverick-17B-128E-Instruct (128 experts, top-1): decode of 387 MMLU answers, a subset of
# core12345/MoE_expert_selection_trace committed in a course project; no token ids.
clone https://github.com/andronius-yang/cse223b-proj c5a3d1720e6acaa637e04a787b0f0b000ebfda79 src-llama4
if [ ! -d llama4-decode ]; then
  mkdir -p llama4-json && cp -r src-llama4/traffic-gen/llama4-mmlu-* llama4-json/
  ecosim import-routing llama4-json --out llama4-decode --num-experts 128 \
    --credit "andronius-yang/cse223b-proj @ c5a3d17, from core12345/MoE_expert_selection_trace (no licence: local measurement only)"
fi

ecosim inspect --routing olmoe-decode dsv2lite-prefill llama4-decode
# the shipped (scaled) olmoe-1b-7b preset against the real OLMoE decode it was not fitted on
ecosim inspect --routing olmoe-decode --check-preset olmoe-1b-7b --seed 1
# a preset fitted to half of it (kept here, not shipped), checked on the other half
[ -f olmoe-1b-7b-real.json ] || ecosim synth olmoe-1b-7b-real.json --model olmoe-1b-7b --calibrate olmoe-decode --seed 1
ecosim inspect --routing olmoe-decode --check-preset olmoe-1b-7b-real.json --seed 1
