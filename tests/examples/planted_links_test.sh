#!/usr/bin/env bash
# Whoever can write in a run's --out cannot turn `minigpt train` against another file. Under
# every name the run writes there (the checkpoints, the log, the lock, the pictures) and under
# the fixed temporary names it once wrote through (each + ".tmp"), a symbolic link to a file
# outside, a symbolic link to a name outside that does not exist yet, and a hard link to a file
# outside are planted in turn. The run then either
#   - refuses, for the files it writes into where they are (the lock and the log): status 2, a
#     message naming the file and the problem, and the directory as it was; or
#   - runs, and the planted name is replaced by a regular file of its own (or, a temporary name,
#     is left alone);
# and either way the file outside keeps its bytes, nothing is created outside, and the checkpoint,
# when there is one, is a regular file with no other name. Last, the temporary files a killed run
# left are removed by the next run, links among them removed and not followed, and kept by a
# refused one.
# Usage: planted_links_test.sh MINIGPT
set -uo pipefail
minigpt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

for i in $(seq 1 300); do printf 'the cat sat on the mat; a dog lay on the log.\n'; done > "$dir/corpus.txt"
tiny=(--corpus "$dir/corpus.txt" --batch 4 --block 16 --layers 1 --heads 2 --embd 16 --warmup 0 --steps 2
  --eval-interval 2 --eval-batches 1 --sample-tokens 1 --overwrite)
mkdir "$dir/outside"
printf 'precious bytes\n' > "$dir/precious.orig"
snapshot() { (cd "$1" && find . -printf '%p %s %y %n %l\n' | sort && find . -type f -exec md5sum {} + | sort); }

written_in_place=(minigpt.lock train_log.csv)
replaced=(minigpt.safetensors minigpt.train.safetensors loss.png attention_layer0_head0.png attention_layer0_head1.png)
old_temporaries=()
for name in train_log.csv "${replaced[@]}"; do old_temporaries+=("$name.tmp"); done

# plant KIND OUT NAME: a link of KIND (symlink, dangling or hard) at OUT/NAME to the outside.
plant() {
  case $1 in
    symlink) ln -s "$dir/outside/precious" "$2/$3" ;;
    dangling) ln -s "$dir/outside/absent" "$2/$3" ;;
    hard) ln "$dir/outside/precious" "$2/$3" ;;
  esac
}

case_number=0
for name in "${written_in_place[@]}" "${replaced[@]}" "${old_temporaries[@]}"; do
  for kind in symlink dangling hard; do
    case_number=$((case_number + 1))
    out="$dir/out$case_number"
    what="$kind at $name"
    mkdir "$out"
    rm -f "$dir/outside/precious" "$dir/outside/absent"
    cp "$dir/precious.orig" "$dir/outside/precious"
    plant "$kind" "$out" "$name"
    before=$(snapshot "$out")
    code=0
    "$minigpt" train "${tiny[@]}" --out "$out" > "$dir/log" 2> "$dir/err" || code=$?

    cmp -s "$dir/outside/precious" "$dir/precious.orig" || fail "$what: the file outside was changed"
    [ ! -e "$dir/outside/absent" ] || fail "$what: a file was created outside, through the link"
    if [ -e "$out/minigpt.safetensors" ] || [ -L "$out/minigpt.safetensors" ]; then
      [ -f "$out/minigpt.safetensors" ] && [ ! -L "$out/minigpt.safetensors" ] &&
        [ "$(stat -c %h "$out/minigpt.safetensors")" = 1 ] ||
        fail "$what: the checkpoint is not a regular file of its own: $(ls -l "$out/minigpt.safetensors")"
    fi
    case " ${written_in_place[*]} " in
      *" $name "*)
        [ $code -eq 2 ] || { fail "$what: status $code, expected 2 (refused)"; cat "$dir/err"; continue; }
        if [ "$kind" = hard ]; then problem="has 2 hard links"; else problem="is a symbolic link to '$dir/outside/"; fi
        grep -qF "minigpt train: --out: '$out/$name' $problem" "$dir/err" ||
          fail "$what: unclear refusal: $(cat "$dir/err")"
        [ "$(snapshot "$out")" = "$before" ] || fail "$what: the refused run changed its directory"
        ;;
      *)
        [ $code -eq 0 ] || { fail "$what: status $code, expected 0"; cat "$dir/err"; continue; }
        if [[ $name == *.tmp ]]; then
          # Not a name the run writes any more: the link is left as it was planted.
          if [ "$kind" = hard ]; then
            [ -f "$out/$name" ] && [ "$(stat -c %h "$out/$name")" = 2 ] || fail "$what: the planted link was changed"
          else
            [ -L "$out/$name" ] || fail "$what: the planted link was changed"
          fi
        else
          [ -f "$out/$name" ] && [ ! -L "$out/$name" ] && [ "$(stat -c %h "$out/$name")" = 1 ] ||
            fail "$what: not replaced by a regular file of its own: $(ls -l "$out/$name")"
        fi
        ;;
    esac
  done
done
echo "planted links: $case_number runs checked"

# What a killed run leaves: hidden temporary files ".NAME.tmp-" and six letters or digits. A
# refused run keeps them (it changes nothing); the next run removes them, links included (not
# what they point to), and keeps a directory of that name and names that only look similar.
out="$dir/stale"
mkdir "$out"
cp "$dir/precious.orig" "$dir/outside/precious"
printf 'half a checkpoint' > "$out/.minigpt.train.safetensors.tmp-AbC123"
ln -s "$dir/outside/precious" "$out/.loss.png.tmp-zzzzzz"
ln "$dir/outside/precious" "$out/.train_log.csv.tmp-000000"
mkdir "$out/.kept.tmp-AAAAAA"
printf 'notes' > "$out/notes.tmp-abcdef"
before=$(snapshot "$out")
code=0
"$minigpt" train "${tiny[@]}" --out "$out" --steps 0 > /dev/null 2> "$dir/err" || code=$?
[ $code -eq 2 ] && [ "$(snapshot "$out")" = "$before" ] || fail "a refused run changed the leftovers (status $code)"
code=0
"$minigpt" train "${tiny[@]}" --out "$out" > "$dir/log" 2> "$dir/err" || code=$?
[ $code -eq 0 ] || { fail "the run after a killed one: status $code"; cat "$dir/err"; }
grep -qF "removed 3 temporary files a stopped run left in $out: .loss.png.tmp-zzzzzz, .minigpt.train.safetensors.tmp-AbC123, .train_log.csv.tmp-000000" "$dir/log" ||
  fail "no message naming the removed files: $(head -n 3 "$dir/log")"
for name in .minigpt.train.safetensors.tmp-AbC123 .loss.png.tmp-zzzzzz .train_log.csv.tmp-000000; do
  [ ! -e "$out/$name" ] && [ ! -L "$out/$name" ] || fail "the leftover $name was not removed"
done
[ -d "$out/.kept.tmp-AAAAAA" ] && [ -f "$out/notes.tmp-abcdef" ] || fail "the run removed what it did not leave"
cmp -s "$dir/outside/precious" "$dir/precious.orig" || fail "removing the leftovers changed the file outside"
if ls -A "$out" | grep '^\..*\.tmp-......$' | grep -qv '^\.kept\.tmp-AAAAAA$'; then
  fail "temporary files are left: $(ls -A "$out")"
fi
echo "leftovers of a killed run: checked"

[ $failures -eq 0 ] || { echo "$failures failures"; exit 1; }
