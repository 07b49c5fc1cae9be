#!/usr/bin/env bash
# The English corpus of `tqserve eval kl` and `eval niah` (docs/FIDELITY.md): quotations from
# literature, science, people, wisdom and humorists in Debian's `fortunes` package
# (/usr/share/games/fortunes), with the '%' separators between fortunes turned into blank lines.
# About 440 kB, ~110k SmolLM2 tokens. Usage: tools/fortune_corpus.sh > corpus.txt
set -euo pipefail
dir=/usr/share/games/fortunes
for f in literature science people wisdom humorists; do
  [ -f "$dir/$f" ] || { echo "missing $dir/$f: apt-get install fortunes" >&2; exit 1; }
done
for f in literature science people wisdom humorists; do sed 's/^%$//' "$dir/$f"; done
