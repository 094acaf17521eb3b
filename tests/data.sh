#!/usr/bin/env bash
# ftc data --tokenizer end to end: the token file a JSONL dataset becomes (ids against
# tokenizers', the mask of each record kind, packing), the summary, and every bad input:
# its exact message, exit 1, and nothing left at -o. Then a tiny model trains on it.
# Preference pairs: each shape's windows and mask, the summary, their errors, and ftc run
# matching paired files with plans that read pairs.
# usage: data.sh FTC SOURCE_DIR
set -u
ftc=$1 src=$2
cd "$src" || exit 2
. tests/lib.sh   # $tmp, ok, bad, losses
tok=tests/fixtures/tok

# The token file as text: "id:info" for every token (info 1 trained, 2 record start),
# read with od (the header: u32 width at 12, u64 count at 16, u64 flags at 24).
dump() {
    local w n flags
    w=$(od -An -tu4 -j12 -N4 "$1" | tr -d ' ')
    n=$(od -An -tu8 -j16 -N8 "$1" | tr -d ' ')
    flags=$(od -An -tu8 -j24 -N8 "$1" | tr -d ' ')
    paste -d: <(od -An -v -tu"$w" -j64 -N$((w * n)) "$1" | tr -s ' ' '\n' | grep .) \
              <(if [ $((flags & 1)) = 1 ]; then od -An -v -tu1 -j$((64 + w * n)) "$1" | tr -s ' ' '\n' | grep .;
                else yes 1 | head -n "$n"; fi) | tr '\n' ' ' | sed 's/ $//'
}

# 1. Every corpus line as a text record: the ids are tokenizers' (NAME.ids), each
# record's first token a start and untrained, the others trained, then the
# end-of-sequence token (trained) unless the record ends with it; a record of the end
# token alone has nothing trained and is dropped.
for case in qwen2:900:'<|endoftext|>' gpt2:0:'<|endoftext|>' llama3:1001:'<|end_of_text|>'; do
    style=${case%%:*} rest=${case#*:} eos=${rest%%:*} name=${rest#*:}
    if ! "$ftc" data --tokenizer "$tok/$style.json" "$tok/corpus.jsonl" --eos "$name" -o "$tmp/$style.bin" \
            > "$tmp/$style.out" 2>&1; then
        bad "ids-$style" "$(cat "$tmp/$style.out")"
        continue
    fi
    want=$(awk -v eos="$eos" 'NF == 1 && $1 == eos { next }
                              { n = split($0, a, " "); s = "";
                                for (i = 1; i <= n; i++) s = s (i > 1 ? " " : "") a[i] ":" (i == 1 ? 2 : 1);
                                if (a[n] != eos) s = s " " eos ":1"; print s }' "$tok/$style.ids" | tr '\n' ' ' | sed 's/ $//')
    got=$(dump "$tmp/$style.bin")
    [ "$got" = "$want" ] && ok "ids-$style ($(wc -w <<<"$got") tokens)" ||
        bad "ids-$style" "$(diff <(tr ' ' '\n' <<<"$got") <(tr ' ' '\n' <<<"$want") | head -5)"
done

# A model directory in place of its tokenizer.json (tokenizer_config.json beside it).
mkdir -p "$tmp/model" && cp "$tok/qwen2.json" "$tmp/model/tokenizer.json"
"$ftc" data --tokenizer "$tmp/model" "$tok/corpus.jsonl" --eos '<|endoftext|>' -o "$tmp/dir.bin" > "$tmp/dir.out" 2>&1 &&
    cmp -s "$tmp/dir.bin" "$tmp/qwen2.bin" && ok tokenizer-model-directory ||
    bad tokenizer-model-directory "$(cat "$tmp/dir.out")"

# 2. The mask of each kind of record, packed for seq 32 (ids from tokenizers, for the
# pieces fixture, whose ByteLevel puts a space before every piece): a prompt is not
# trained, its completion and the end token are; a conversation trains only the
# assistant's content and the template after it; a record that does not fit what is left
# of a window starts the next, the rest padded with untrained end tokens; one token more
# closes the file.
printf '%s\n' '{"prompt": "ab", "completion": "cd"}' \
    '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}' \
    '{"text": "xyz"}' > "$tmp/kinds.jsonl"
want="264:2 65:0 283:1 67:1 0:1 220:2 27:0 84:0 82:0 272:0 220:0 29:0 220:0 71:0 72:0 389:0 220:0 27:0 64:0 310:0"
want="$want 72:0 362:0 336:0 83:0 220:0 29:0 220:1 88:1 78:1 389:1 0:1 0:2 220:2 87:1 88:1 89:1 0:1 0:2"
for i in $(seq 26); do want="$want 0:0"; done
want="$want 0:2"
if "$ftc" data --tokenizer "$tok/pieces.json" "$tmp/kinds.jsonl" --eos '!' --template '<{role}>{content};' \
        --pack 32 -o "$tmp/kinds.bin" > "$tmp/kinds.out" 2>&1 && [ "$(dump "$tmp/kinds.bin")" = "$want" ] &&
   [ "$(od -An -tu8 -j32 -N16 "$tmp/kinds.bin" | tr -s ' ')" = " 32 3" ]; then
    ok mask-and-packing
else
    bad mask-and-packing "$(cat "$tmp/kinds.out"; dump "$tmp/kinds.bin")"
fi

# 3. The summary: records cut (or dropped) for the window, records with nothing trained.
printf '%s\n' '{"text": "a b c d e f g h i j k l m n o p q r s t u v w x y z"}' \
    '{"prompt": "only a prompt that is long enough to fill the window alone", "completion": "x"}' \
    '{"text": "short"}' > "$tmp/long.jsonl"
"$ftc" data --tokenizer "$tok/qwen2.json" "$tmp/long.jsonl" --pack 8 -o "$tmp/long.bin" > "$tmp/long.out" 2>&1
if grep -q '^2 records longer than 8 tokens: cut to the first of them$' "$tmp/long.out" &&
   grep -q '^1 record dropped: no token of it is trained$' "$tmp/long.out" &&
   grep -q "^$tmp/long.bin: 17 tokens, 10 trained, from 2 of 3 records in $tmp/long.jsonl (vocab 903, 2 bytes a token; end of sequence <|endoftext|> = 900)$" "$tmp/long.out" &&
   grep -q '^packed into 2 windows of 8 tokens: 5 padding tokens (29.4%)$' "$tmp/long.out"; then
    ok summary-cut
else
    bad summary-cut "$(cat "$tmp/long.out")"
fi
"$ftc" data --tokenizer "$tok/qwen2.json" "$tmp/long.jsonl" --pack 8 --drop-long -o "$tmp/long.bin" > "$tmp/long.out" 2>&1
grep -q '^2 records longer than 8 tokens: dropped (--drop-long)$' "$tmp/long.out" && grep -q 'from 1 of 3 records' "$tmp/long.out" &&
    ok summary-drop || bad summary-drop "$(cat "$tmp/long.out")"

# 4. Bad input: the exact message, exit 1, nothing on stdout, nothing at -o (a file
# there before is left as it was).
echo keep > "$tmp/out.bin"
expect() {   # name, message, ftc data arguments...
    local name=$1 want=$2; shift 2
    local out err rc
    out=$("$ftc" data "$@" -o "$tmp/out.bin" 2>"$tmp/err"); rc=$?
    err=$(cat "$tmp/err")
    if [ "$rc" = 1 ] && [ -z "$out" ] && [ "$err" = "$want" ] && [ "$(cat "$tmp/out.bin")" = keep ] &&
       [ "$(ls "$tmp" | grep -c '^out\.bin\.tmp')" = 0 ]; then
        ok "bad-$name"
    else
        bad "bad-$name" "exit $rc, stdout '$out', stderr '$err' (want '$want'), out.bin '$(head -c 20 "$tmp/out.bin")'"
    fi
}
q=$tok/qwen2.json
printf '{"text": "a"}\n\n{"text": "b",\n{"text": "c"}\n' > "$tmp/json.jsonl"
expect malformed-json "ftc data: error: $tmp/json.jsonl:3:13: not valid JSON: string or '}' expected near end of file" \
    --tokenizer "$q" "$tmp/json.jsonl"
printf '{"text": "a"}\n{"text": "b"} x\n' > "$tmp/trail.jsonl"
expect trailing-garbage "ftc data: error: $tmp/trail.jsonl:2:15: not valid JSON: end of file expected near 'x'" \
    --tokenizer "$q" "$tmp/trail.jsonl"
: > "$tmp/empty.jsonl"
expect empty-file "ftc data: error: $tmp/empty.jsonl: is empty, there are no records" --tokenizer "$q" "$tmp/empty.jsonl"
printf '\n  \n\r\n' > "$tmp/blank.jsonl"
expect blank-file "ftc data: error: $tmp/blank.jsonl: has no records (3 blank lines)" --tokenizer "$q" "$tmp/blank.jsonl"
printf '{"text": "a"}\n[1, 2]\n' > "$tmp/list.jsonl"
expect not-an-object "ftc data: error: $tmp/list.jsonl:2: a record is a JSON object, this line is a list" \
    --tokenizer "$q" "$tmp/list.jsonl"
printf '{"txt": "a"}\n' > "$tmp/kind.jsonl"
expect no-kind "ftc data: error: $tmp/kind.jsonl:1: a record needs \"text\", \"prompt\" and \"completion\", \"messages\", \"instruction\" and \"output\" (Alpaca) or \"conversations\" (ShareGPT)" \
    --tokenizer "$q" "$tmp/kind.jsonl"
printf '{"text": "a", "prompt": "b", "completion": "c"}\n' > "$tmp/two.jsonl"
expect two-kinds "ftc data: error: $tmp/two.jsonl:1: a record has one of \"text\", \"prompt\" and \"completion\", \"messages\", \"instruction\" or \"conversations\", not several" \
    --tokenizer "$q" "$tmp/two.jsonl"
printf '{"prompt": "a"}\n' > "$tmp/half.jsonl"
expect prompt-alone "ftc data: error: $tmp/half.jsonl:1: a \"prompt\" without a \"completion\"" --tokenizer "$q" "$tmp/half.jsonl"
printf '{"text": ["a"]}\n' > "$tmp/type.jsonl"
expect text-not-string "ftc data: error: $tmp/type.jsonl:1: \"text\" is not a string" --tokenizer "$q" "$tmp/type.jsonl"
printf '{"messages": [{"role": "user", "content": "a"}]}\n' > "$tmp/msg.jsonl"
expect no-template "ftc data: error: $tmp/msg.jsonl:1: a \"messages\" record needs a chat template: --template (chatml, llama3, a string with {role} and {content}, or a .jinja file), or the model's (chat_template in its tokenizer_config.json)" \
    --tokenizer "$q" "$tmp/msg.jsonl"
printf '{"conversations": [{"from": "human", "value": "a"}]}\n' > "$tmp/sg.jsonl"
expect sharegpt-no-template "ftc data: error: $tmp/sg.jsonl:1: a \"conversations\" record needs a chat template: --template (chatml, llama3, a string with {role} and {content}, or a .jinja file), or the model's (chat_template in its tokenizer_config.json)" \
    --tokenizer "$q" "$tmp/sg.jsonl"
printf '{"conversations": [{"from": "bot", "value": "a"}]}\n' > "$tmp/sg2.jsonl"
expect sharegpt-from "ftc data: error: $tmp/sg2.jsonl:1: conversations[0] needs a \"from\" (human, gpt or system) and a \"value\", a string" \
    --tokenizer "$q" "$tmp/sg2.jsonl" --template chatml
printf '{"instruction": "a"}\n' > "$tmp/al.jsonl"
expect alpaca-no-output "ftc data: error: $tmp/al.jsonl:1: an Alpaca record needs \"instruction\" and \"output\" (and \"input\", if any), strings" \
    --tokenizer "$q" "$tmp/al.jsonl"
# Alpaca and ShareGPT records are the records they stand for, token for token: with a
# template, the messages (the instruction, a blank line and the input as the user's);
# Alpaca's without one, its own prompt and the output as the completion.
printf '%s\n' '{"instruction": "Add 2 and 3.", "input": "", "output": "5"}' \
    '{"instruction": "Translate.", "input": "chat", "output": "cat"}' > "$tmp/alpaca.jsonl"
printf '%s\n' '{"messages": [{"role": "user", "content": "Add 2 and 3."}, {"role": "assistant", "content": "5"}]}' \
    '{"messages": [{"role": "user", "content": "Translate.\n\nchat"}, {"role": "assistant", "content": "cat"}]}' > "$tmp/alpaca-msg.jsonl"
printf '%s\n' '{"prompt": "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n### Instruction:\nAdd 2 and 3.\n\n### Response:", "completion": "5"}' \
    '{"prompt": "Below is an instruction that describes a task, paired with an input that provides further context. Write a response that appropriately completes the request.\n\n### Instruction:\nTranslate.\n\n### Input:\nchat\n\n### Response:", "completion": "cat"}' > "$tmp/alpaca-pc.jsonl"
printf '%s\n' '{"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}' > "$tmp/sharegpt.jsonl"
printf '%s\n' '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}' > "$tmp/sharegpt-msg.jsonl"
same_bin() {   # name, jsonl a, jsonl b, extra arguments: the two token files alike
    local name=$1 a=$2 b=$3; shift 3
    "$ftc" data --tokenizer "$q" "$a" --eos '<|endoftext|>' "$@" -o "$tmp/a.bin" > /dev/null 2>"$tmp/e1" &&
        "$ftc" data --tokenizer "$q" "$b" --eos '<|endoftext|>' "$@" -o "$tmp/b.bin" > /dev/null 2>"$tmp/e2" &&
        cmp -s "$tmp/a.bin" "$tmp/b.bin" && ok "$name" || bad "$name" "$(cat "$tmp/e1" "$tmp/e2")"
}
# --show N: the first N records rendered back by the tokenizer, the trained tokens marked
# (a record's first token is never a target; the assistant's turn and the end are).
printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]}' \
    '{"text": "plain text"}' '{"text": "not shown"}' > "$tmp/show.jsonl"
"$ftc" data --tokenizer "$q" "$tmp/show.jsonl" --template chatml --eos '<|endoftext|>' -o "$tmp/show.bin" --show 2 \
    > "$tmp/show.out" 2>&1
want=$(printf '%s\n' "record 1 of 3: 21 tokens, 8 trained (between ⟦ and ⟧)" '<|im_start|>user' 'Hi<|im_end|>' \
       '<|im_start|>assistant' '⟦Hello there<|im_end|>' '<|endoftext|>⟧' '' \
       "record 2 of 3: 6 tokens, 5 trained (between ⟦ and ⟧)" 'pl⟦ain text<|endoftext|>⟧')
got=$(sed -n '/^record 1 of 3/,$p' "$tmp/show.out")
[ "$got" = "$want" ] && ok show-records || bad show-records "$(diff <(echo "$got") <(echo "$want"))"
# The model's own chat template (tests/fixtures/chat, made by make_chat.py): by default the
# one in tokenizer_config.json beside the tokenizer, rendered as apply_chat_template renders
# it; the ids are transformers' for that text, the trained tokens the assistant's turns
# (content and end of turn, not the header); the record is the rendering alone, no second
# <|im_end|> (the eos) after the template's.
chat=tests/fixtures/chat
for fam in qwen2.5:qwen2 llama3.1:llama3; do
    f=${fam%%:*} style=${fam#*:}
    mkdir -p "$tmp/$f" && cp "$tok/$style.json" "$tmp/$f/tokenizer.json" && cp "$chat/$f.tokenizer_config.json" "$tmp/$f/tokenizer_config.json"
    "$ftc" data --tokenizer "$tmp/$f" "$chat/$f.records.jsonl" -o "$tmp/$f.bin" > "$tmp/$f.out" 2>&1
    got=$(dump "$tmp/$f.bin") want=$(tr '\n' ' ' < "$chat/$f.ids" | sed 's/ $//')
    [ "$got" = "$want" ] && grep -qx "messages through the chat template $tmp/$f/tokenizer_config.json:chat_template" "$tmp/$f.out" &&
        ok "chat-template-$f ($(wc -w <<<"$got") tokens as transformers')" ||
        bad "chat-template-$f" "$(cat "$tmp/$f.out"; diff <(tr ' ' '\n' <<<"$got") <(tr ' ' '\n' <<<"$want") | head -5)"
done
"$ftc" data --tokenizer "$tmp/qwen2.5" "$chat/qwen2.5.records.jsonl" -o "$tmp/show2.bin" --show 2 > "$tmp/show2.out" 2>&1
want=$(printf '%s\n' "record 2 of 3: 73 tokens, 10 trained (between ⟦ and ⟧)" '<|im_start|>system' \
       'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>' '<|im_start|>user' \
       'What is 2 + 3?<|im_end|>' '<|im_start|>assistant' '⟦2 + 3 = 5.<|im_end|>' '⟧')
got=$(sed -n '/^record 2 of 3/,$p' "$tmp/show2.out")
[ "$got" = "$want" ] && ok chat-trained-assistant-turns || bad chat-trained-assistant-turns "$(diff <(echo "$got") <(echo "$want"))"
grep -q 'end of sequence <|im_end|> = 902' "$tmp/show2.out" && [ "$(dump "$tmp/qwen2.5.bin" | grep -c '902:1 198:1 902')" = 0 ] &&
    [ "$(dump "$tmp/qwen2.5.bin" | tr ' ' '\n' | tail -2 | paste -sd' ')" = "902:1 198:1" ] &&
    ok chat-no-doubled-eos || bad chat-no-doubled-eos "$(dump "$tmp/qwen2.5.bin" | tr ' ' '\n' | tail -4 | tr '\n' ' ')"
# A .jinja file is the same template from elsewhere: the same file.
"$ftc" data --tokenizer "$q" "$chat/qwen2.5.records.jsonl" --template "$chat/qwen2.5.jinja" -o "$tmp/file.bin" > "$tmp/file.out" 2>&1 &&
    cmp -s "$tmp/file.bin" "$tmp/qwen2.5.bin" && grep -qx "messages through the chat template $chat/qwen2.5.jinja" "$tmp/file.out" &&
    ok chat-template-file || bad chat-template-file "$(cat "$tmp/file.out")"
# A template that refuses a conversation: its message at its line and column, after the record's.
printf '%s\n' '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}' \
    '{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}' > "$tmp/alt.jsonl"
expect chat-template-raises "ftc data: error: $tmp/alt.jsonl:2: $chat/gemma2.jinja:1:226: Conversation roles must alternate user/assistant/user/assistant/..." \
    --tokenizer "$q" "$tmp/alt.jsonl" --template "$chat/gemma2.jinja"
expect chat-template-syntax "ftc data: error: --template:1:21: expected an expression, not '%}'" \
    --tokenizer "$q" "$tmp/alt.jsonl" --template '{{ messages }}{% if %}'
expect chat-template-none "ftc data: error: --template model: no chat template beside the tokenizer ($tok/chat_template.jinja, or chat_template in $tok/tokenizer_config.json)" \
    --tokenizer "$q" "$tmp/alt.jsonl" --template model
expect chat-template-missing-file "ftc data: error: --template $tmp/none.jinja: No such file or directory" \
    --tokenizer "$q" "$tmp/alt.jsonl" --template "$tmp/none.jinja"
same_bin alpaca-as-messages "$tmp/alpaca.jsonl" "$tmp/alpaca-msg.jsonl" --template chatml
same_bin alpaca-own-prompt "$tmp/alpaca.jsonl" "$tmp/alpaca-pc.jsonl"
same_bin sharegpt-as-messages "$tmp/sharegpt.jsonl" "$tmp/sharegpt-msg.jsonl" --template chatml
printf '{"messages": [{"role": "user"}]}\n' > "$tmp/msg2.jsonl"
expect message-no-content "ftc data: error: $tmp/msg2.jsonl:1: messages[0] needs a \"role\" and a \"content\", both strings" \
    --tokenizer "$q" "$tmp/msg2.jsonl" --template chatml
expect template-no-content "ftc data: error: --template '<{role}>': a template holds {content} exactly once (or is chatml or llama3)" \
    --tokenizer "$q" "$tmp/msg.jsonl" --template '<{role}>'
printf '{"prompt": "a", "completion": ""}\n' > "$tmp/none.jsonl"
expect nothing-trained "ftc data: error: $tmp/none.jsonl: no record has a trained token left (1 without any)" \
    --tokenizer "$q" "$tmp/none.jsonl" --eos '<|im_end|>'
printf '{"text": "aaaaaaaaaaaaaaaaaaaaaaa aaaaaaaaaaa aaaaaaa"}\n' > "$tmp/toolong.jsonl"
expect all-too-long "ftc data: error: $tmp/toolong.jsonl: no record has a trained token left (0 without any, the others longer than --pack)" \
    --tokenizer "$q" "$tmp/toolong.jsonl" --pack 4 --drop-long
expect no-eos "ftc data: error: $q: the end-of-sequence token \"<|nope|>\" (--eos) is not in the tokenizer" \
    --tokenizer "$q" "$tmp/long.jsonl" --eos '<|nope|>'
expect no-input "ftc data: error: $tmp/missing.jsonl: cannot open: No such file or directory" --tokenizer "$q" "$tmp/missing.jsonl"
expect input-directory "ftc data: error: $tmp: not a regular file" --tokenizer "$q" "$tmp"
printf '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}, "pre_tokenizer": {"type": "Metaspace"}}' > "$tmp/unigram.json"
expect unigram-tokenizer "ftc data: error: $tmp/unigram.json: model.type is \"Unigram\"; ftc reads byte-level BPE tokenizers (model.type \"BPE\" with a ByteLevel pre-tokenizer)" \
    --tokenizer "$tmp/unigram.json" "$tmp/long.jsonl"
printf '{"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Metaspace", "replacement": "x"}}' > "$tmp/sp.json"
expect sentencepiece-tokenizer "ftc data: error: $tmp/sp.json: pre_tokenizer Metaspace is not supported (ftc reads byte-level BPE: Split, Digits and ByteLevel)" \
    --tokenizer "$tmp/sp.json" "$tmp/long.jsonl"
printf '{"model": ' > "$tmp/broken.json"
expect tokenizer-not-json "ftc data: error: $tmp/broken.json:1:10: not valid JSON: unexpected token near end of file" \
    --tokenizer "$tmp/broken.json" "$tmp/long.jsonl"

# 5. A tiny model over the tokenizer's vocabulary trains on the packed file (seq 16), and
# refuses a file packed for another seq.
sed 's/vocab    = 256/vocab    = 1024/; s/seq       = 64/seq       = 16/' models/tiny.ft > "$tmp/t1024.ft"
"$ftc" compile "$tmp/t1024.ft" -o "$tmp/t.plan" > /dev/null
"$ftc" data --tokenizer "$q" "$tok/corpus.jsonl" --pack 16 -o "$tmp/p16.bin" > /dev/null
out=$("$ftc" run "$tmp/t.plan" --data "$tmp/p16.bin" --steps 3 2>&1)
first=$(grep '^step 1/' <<<"$out" | awk '{print $4}')
awk -v l="$first" 'BEGIN { exit !(l > 6.7 && l < 7.2) }' && ok "train-on-packed (loss $first, ln 1024 = 6.93)" || bad train-on-packed "$out"
# The summary counts the tokens trained apart (a record's first token, and padding, are not).
d=$(grep '^done: ' <<<"$out")
tt=$(sed -n 's/^done: 3 steps, \([0-9]*\) tokens (\([0-9]*\) trained), .* tok\/s ([0-9]* trained)$/\1 \2/p' <<<"$d")
[ -n "$tt" ] && awk -v t="${tt% *}" -v k="${tt#* }" 'BEGIN { exit !(k > 0 && k < t) }' &&
    ok "trained-tokens-counted ($tt)" || bad trained-tokens-counted "$d"
# ... and says that without packing = true the records attend to each other.
grep -q "^ftc run: warning: $tmp/p16.bin was packed several records a window (ftc data --pack 16), but the plan has no packing: each record attends to those before it in its window; packing = true in the train section masks them apart$" <<<"$out" &&
    ok packed-without-packing-warns || bad packed-without-packing-warns "$(grep -v '^step' <<<"$out")"
"$ftc" data --tokenizer "$q" "$tok/corpus.jsonl" --pack 32 -o "$tmp/p32.bin" > /dev/null
out=$("$ftc" run "$tmp/t.plan" --data "$tmp/p32.bin" --steps 3 2>&1); rc=$?
[ "$rc" = 1 ] && [ "$out" = "ftc run: error: $tmp/p32.bin was packed for seq 32 (ftc data --pack 32), but the plan's seq is 16: records would cross windows" ] &&
    ok run-refuses-other-pack || bad run-refuses-other-pack "exit $rc: $out"

# 6. packing = true: the same model trains on the packed file with the position ids
# restarting at each record and attention kept inside it, and refuses a file that has no
# record starts.
sed 's/^  seq       = 16/  seq       = 16\n  packing   = true/' "$tmp/t1024.ft" > "$tmp/tp.ft"
"$ftc" compile "$tmp/tp.ft" -o "$tmp/tp.plan" > /dev/null
grep -q '^packing 1$' "$tmp/tp.plan/plan" && ok plan-says-packing || bad plan-says-packing "$(head -12 "$tmp/tp.plan/plan")"
# The mask needs no buffer of its own: attention reads the position ids rope reads, one
# i32 [micro_batch, seq] input the planner places (and the plan without packing lacks).
mb=$(awk '$1 == "micro_batch" { print $2 }' "$tmp/tp.plan/plan")
grep -Eq "^buffer [0-9]+ positions io device [0-9]+ $((mb * 16 * 4)) i32 ${mb}x16 .*role=positions" "$tmp/tp.plan/plan" &&
    ! grep -q 'role=positions' "$tmp/t.plan/plan" && ok positions-planned || bad positions-planned "$(grep positions "$tmp/tp.plan/plan")"
out=$("$ftc" run "$tmp/tp.plan" --data "$tmp/p16.bin" --steps 3 2>&1)
first=$(grep '^step 1/' <<<"$out" | awk '{print $4}')
awk -v l="$first" 'BEGIN { exit !(l > 6.7 && l < 7.2) }' && ! grep -q warning <<<"$out" &&
    ok "train-packing (loss $first)" || bad train-packing "$out"
"$ftc" data --bytes tests/data/corpus.txt -o "$tmp/bytes.bin" > /dev/null
out=$("$ftc" run "$tmp/tp.plan" --data "$tmp/bytes.bin" --steps 1 2>&1); rc=$?
[ "$rc" = 1 ] && [ "$out" = "ftc run: error: $tmp/bytes.bin has no record starts, but the plan packs records (packing = true): make it with ftc data --tokenizer" ] &&
    ok packing-needs-records || bad packing-needs-records "exit $rc: $out"

# 7. Preference pairs ({"chosen", "rejected"}, perhaps "prompt"): a paired file (header
# flags 3, info and pairs; the window; the pair count), each sequence a window of its own,
# chosen then rejected. Strings: a prompt and completion record each (the prompt untrained),
# without a prompt a text record; ids of the pieces fixture as in 2.
pieces=$tok/pieces.json
printf '%s\n' '{"prompt": "ab", "chosen": "cd", "rejected": "xyz"}' '{"chosen": "cd", "rejected": "x"}' > "$tmp/pt.jsonl"
want="264:2 65:0 283:1 67:1 0:1 0:2 0:0 0:0 264:2 65:0 220:1 87:1 88:1 89:1 0:1 0:2"
want="$want 283:2 67:1 0:1 0:2 0:0 0:0 0:0 0:0 220:2 87:1 0:1 0:2 0:0 0:0 0:0 0:0 0:2"
"$ftc" data --tokenizer "$pieces" "$tmp/pt.jsonl" --eos '!' --pack 8 -o "$tmp/pt.bin" > "$tmp/pt.out" 2>&1
[ "$(dump "$tmp/pt.bin")" = "$want" ] && [ "$(od -An -tu8 -j24 -N24 "$tmp/pt.bin" | tr -s ' \n' ' ')" = " 3 8 2 " ] &&
    grep -q "^$tmp/pt.bin: 33 tokens, 12 trained, from 2 of 2 pairs in $tmp/pt.jsonl " "$tmp/pt.out" &&
    grep -q '^packed into 4 windows of 8 tokens, a sequence each: 15 padding tokens (45.5%)$' "$tmp/pt.out" &&
    ok pairs-text || bad pairs-text "$(cat "$tmp/pt.out"; dump "$tmp/pt.bin")"
# Messages through the template: prompt + chosen and prompt + rejected, only the
# completion's assistant turn trained, not the prompt's own (--show N shows N pairs).
m() { printf '{"role": "%s", "content": "%s"}' "$1" "$2"; }
pr="$(m user hi), $(m assistant yo), $(m user go)"
printf '{"prompt": [%s], "chosen": [%s], "rejected": [%s]}\n' "$pr" "$(m assistant a)" "$(m assistant b)" > "$tmp/pc.jsonl"
"$ftc" data --tokenizer "$pieces" "$tmp/pc.jsonl" --eos '!' --template '<{role}>{content};' --pack 48 -o "$tmp/pc.bin" --show 1 \
    > "$tmp/pc.out" 2>&1
want=$(printf '%s\n' 'pair 1 of 1:' 'chosen: 48 tokens, 3 trained (between ⟦ and ⟧)' \
       ' <user > hi ; <assistant > yo ; <user > go ; <assistant >⟦ a ;!⟧' '' \
       'rejected: 48 tokens, 3 trained (between ⟦ and ⟧)' ' <user > hi ; <assistant > yo ; <user > go ; <assistant >⟦ b ;!⟧')
got=$(sed -n '/^pair 1 of 1:/,$p' "$tmp/pc.out")
[ "$got" = "$want" ] && ok pairs-messages-show || bad pairs-messages-show "$(diff <(echo "$got") <(echo "$want"))"
# The implicit prompt: chosen and rejected whole conversations, the prompt the messages
# they begin with alike: the same file.
printf '{"chosen": [%s, %s], "rejected": [%s, %s]}\n' "$pr" "$(m assistant a)" "$pr" "$(m assistant b)" > "$tmp/pi.jsonl"
"$ftc" data --tokenizer "$pieces" "$tmp/pi.jsonl" --eos '!' --template '<{role}>{content};' --pack 48 -o "$tmp/pi.bin" > /dev/null 2>&1 &&
    cmp -s "$tmp/pi.bin" "$tmp/pc.bin" && ok pairs-implicit-prompt || bad pairs-implicit-prompt "$(dump "$tmp/pi.bin")"
# The model's own chat template: the prompt's assistant turn not trained there either.
printf '{"prompt": [%s], "chosen": [%s], "rejected": [%s]}\n' "$pr" "$(m assistant Ok)" "$(m assistant No)" > "$tmp/pq.jsonl"
"$ftc" data --tokenizer "$tmp/qwen2.5" "$tmp/pq.jsonl" --pack 80 -o "$tmp/pq.bin" --show 1 > "$tmp/pq.out" 2>&1
got=$(sed -n '/^rejected:/,$p' "$tmp/pq.out")
want=$(printf '%s\n' 'rejected: 76 tokens, 4 trained (between ⟦ and ⟧)' '<|im_start|>system' \
       'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>' '<|im_start|>user' 'hi<|im_end|>' \
       '<|im_start|>assistant' 'yo<|im_end|>' '<|im_start|>user' 'go<|im_end|>' '<|im_start|>assistant' '⟦No<|im_end|>' '⟧')
[ "$got" = "$want" ] && ok pairs-chat-template || bad pairs-chat-template "$(cat "$tmp/pq.out")"
# The summary: sequences cut to the window, pairs dropped (--drop-long; a sequence that
# trains nothing).
printf '%s\n' '{"prompt": "ab", "chosen": "cd", "rejected": "a b c d e f g h i j"}' '{"prompt": "ab", "chosen": "", "rejected": "x"}' \
    '{"chosen": "xy", "rejected": "z"}' > "$tmp/pl.jsonl"
"$ftc" data --tokenizer "$pieces" "$tmp/pl.jsonl" --eos '!' --pack 8 -o "$tmp/pl.bin" > "$tmp/pl.out" 2>&1
grep -q "^$tmp/pl.bin: 33 tokens, .* from 2 of 3 pairs in" "$tmp/pl.out" &&
    grep -q '^1 sequence longer than 8 tokens: cut to the first of them$' "$tmp/pl.out" &&
    grep -q '^1 pair dropped: no token of its chosen or rejected sequence is trained$' "$tmp/pl.out" &&
    ok pairs-summary-cut || bad pairs-summary-cut "$(cat "$tmp/pl.out")"
"$ftc" data --tokenizer "$pieces" "$tmp/pl.jsonl" --eos '!' --pack 8 --drop-long -o "$tmp/pl.bin" > "$tmp/pl.out" 2>&1
grep -q "^$tmp/pl.bin: 17 tokens, .* from 1 of 3 pairs in" "$tmp/pl.out" &&
    grep -q '^1 pair with a sequence longer than 8 tokens: dropped (--drop-long)$' "$tmp/pl.out" &&
    ok pairs-summary-drop || bad pairs-summary-drop "$(cat "$tmp/pl.out")"
# Bad pairs: the exact message, at the line.
printf '{"prompt": "a", "chosen": "b", "rejected": "c"}\n' > "$tmp/p1.jsonl"
expect pairs-need-pack "ftc data: error: $tmp/p1.jsonl:1: preference pairs need --pack SEQ: each sequence is padded to its own window" \
    --tokenizer "$q" "$tmp/p1.jsonl"
printf '{"text": "a"}\n\n{"chosen": "b", "rejected": "c"}\n' > "$tmp/p2.jsonl"
expect pairs-after-records "ftc data: error: $tmp/p2.jsonl:3: a preference record (\"chosen\" and \"rejected\") after records that are not: a file holds preference pairs alone, or none" \
    --tokenizer "$q" "$tmp/p2.jsonl" --pack 8
printf '{"chosen": "b", "rejected": "c"}\n{"prompt": "a", "completion": "b"}\n' > "$tmp/p3.jsonl"
expect records-after-pairs "ftc data: error: $tmp/p3.jsonl:2: a record without \"chosen\" and \"rejected\" after preference records: a file holds preference pairs alone, or none" \
    --tokenizer "$q" "$tmp/p3.jsonl" --pack 8
printf '{"prompt": "a", "chosen": "b"}\n' > "$tmp/p4.jsonl"
expect pairs-no-rejected "ftc data: error: $tmp/p4.jsonl:1: a \"chosen\" without a \"rejected\"" --tokenizer "$q" "$tmp/p4.jsonl" --pack 8
printf '{"prompt": "a", "chosen": [], "rejected": "c"}\n' > "$tmp/p5.jsonl"
expect pairs-mixed-shapes "ftc data: error: $tmp/p5.jsonl:1: \"chosen\", \"rejected\" and \"prompt\" (if any) are all strings or all lists of messages" \
    --tokenizer "$q" "$tmp/p5.jsonl" --pack 8
printf '{"chosen": [], "rejected": [{"role": "assistant", "content": "c"}]}\n' > "$tmp/p6.jsonl"
expect pairs-empty-list "ftc data: error: $tmp/p6.jsonl:1: \"chosen\" is an empty list: a completion holds one message at least" \
    --tokenizer "$q" "$tmp/p6.jsonl" --pack 8 --template chatml
printf '{"chosen": [{"role": "assistant", "content": "b"}], "rejected": [{"role": "assistant"}]}\n' > "$tmp/p7.jsonl"
expect pairs-bad-message "ftc data: error: $tmp/p7.jsonl:1: the rejected conversation: messages[0] needs a \"role\" and a \"content\", both strings" \
    --tokenizer "$q" "$tmp/p7.jsonl" --pack 8 --template chatml
expect pairs-no-template "ftc data: error: $tmp/p7.jsonl:1: a preference record needs a chat template: --template (chatml, llama3, a string with {role} and {content}, or a .jinja file), or the model's (chat_template in its tokenizer_config.json)" \
    --tokenizer "$q" "$tmp/p7.jsonl" --pack 8
printf '{"chosen": "b", "rejected": "c", "completion": "d"}\n' > "$tmp/p8.jsonl"
expect pairs-other-kind "ftc data: error: $tmp/p8.jsonl:1: a preference record holds \"chosen\", \"rejected\" and perhaps \"prompt\", not \"completion\"" \
    --tokenizer "$q" "$tmp/p8.jsonl" --pack 8
# ftc run: a paired file is for a plan that reads pairs (a preference loss) alone (the other
# way round: tests/test_io.c, feed_pairs).
"$ftc" data --tokenizer "$q" "$tmp/pt.jsonl" --pack 16 -o "$tmp/pairs16.bin" > /dev/null
out=$("$ftc" run "$tmp/t.plan" --data "$tmp/pairs16.bin" --steps 1 2>&1); rc=$?
[ "$rc" = 1 ] && [ "$out" = "ftc run: error: $tmp/pairs16.bin holds preference pairs; train it with a preference loss (dpo, ipo, orpo, simpo)" ] &&
    ok run-refuses-pairs || bad run-refuses-pairs "exit $rc: $out"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
