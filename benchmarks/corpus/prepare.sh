#!/usr/bin/env bash
# Copy the public training scripts of the corpus (benchmarks/corpus/README.md) out of the fetched
# mirrors into a git-ignored folder that a device call carries. Run on the development machine,
# before the device call:
#     bash benchmarks/corpus/prepare.sh [DEST]        # DEST default: <repository root>/.corpus
# Needs the bare mirrors made by the search tool's fetch (MIRRORS, default: .mirror beside the
# repository's folder):
#   pytorch/examples -> $MIRRORS/pytorch+examples/repo, karpathy/minGPT -> $MIRRORS/karpathy+minGPT/repo.
# Files are copied one by one from HEAD (git cat-file), so a blob the mirror lacks (the
# wikitext-2 text files of word_language_model, which make_data.py replaces) is skipped
# instead of stopping the copy. Writes DEST/SOURCES.json: each repository's commit and files.
# Nothing here is committed: the scripts stay outside the package and the repository.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dest="${1:-$root/.corpus}"
mirrors="${MIRRORS:-$root/../.mirror}"

# repository name in the corpus | bare git dir | owner/name | folders to copy | files to skip (regex)
specs=(
  "pytorch-examples|$mirrors/pytorch+examples/repo|pytorch/examples|imagenet dcgan mnist siamese_network mnist_rnn super_resolution word_language_model vae distributed/ddp-tutorial-series|^word_language_model/data/|/slurm/"
  "minGPT|$mirrors/karpathy+minGPT/repo|karpathy/minGPT|mingpt projects|\\.ipynb$"
)

rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
json="{"
sep=""
for spec in "${specs[@]}"; do
  IFS='|' read -r name gitdir slug folders skip skip2 <<<"$spec"
  [ -d "$gitdir" ] || { echo "prepare.sh: $gitdir missing: fetch $slug first (search tool: fetch github:$slug)" >&2; exit 2; }
  commit=$(git --git-dir="$gitdir" rev-parse HEAD)
  date=$(git --git-dir="$gitdir" log -1 --format=%cI HEAD)
  n=0
  skipped=""
  # shellcheck disable=SC2086
  while IFS= read -r path; do
    if [[ "$path" =~ $skip ]] || { [ -n "${skip2:-}" ] && [[ "$path" =~ $skip2 ]]; }; then continue; fi
    mkdir -p "$dest.tmp/$name/$(dirname "$path")"
    if git --git-dir="$gitdir" cat-file blob "HEAD:$path" >"$dest.tmp/$name/$path" 2>/dev/null; then
      n=$((n + 1))
    else
      rm -f "$dest.tmp/$name/$path"
      skipped="$skipped $path"
    fi
  done < <(git --git-dir="$gitdir" ls-tree -r --name-only HEAD $folders)
  echo "$slug @ $commit ($date): $n files${skipped:+; missing in the mirror:$skipped}"
  json="$json$sep\"$name\": {\"repo\": \"$slug\", \"commit\": \"$commit\", \"date\": \"$date\", \"files\": $n, \"folders\": \"$folders\"}"
  sep=", "
done
echo "$json}" >"$dest.tmp/SOURCES.json"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
du -sh "$dest"
