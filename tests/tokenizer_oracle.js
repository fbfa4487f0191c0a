#!/usr/bin/env node
// tests/tokenizer_oracle.js — an independent reference for ridge's tokenizer:
// @lenml/tokenizers, a JavaScript port of Hugging Face's tokenizers (the one
// transformers.js uses), reading the same tokenizer.json and
// tokenizer_config.json ridge reads.
//
//   node tokenizer_oracle.js NODE_MODULES_DIR < requests.json
//
// stdin is a JSON array of requests, each {"dir": MODEL_DIR, "text": "..."}
// (encoded as Hugging Face's encode(text, add_special_tokens=False) does:
// special tokens written in the text are parsed) or {"dir": MODEL_DIR,
// "chat": "..."} (one user message through the model's own chat template
// with add_generation_prompt, tokenized as apply_chat_template does). Each
// MODEL_DIR holds tokenizer.json and tokenizer_config.json and is loaded once.
// stdout is a JSON array holding one array of ids per request. Texts travel
// as JSON, so they may hold any Unicode, including combining marks and emoji.
//
// The port's Jinja cannot parse Qwen3's template (it slices with [::-1]);
// for one user message without tools that template renders exactly as
// ChatML does, so ChatML stands in for it then, and stderr says so.
"use strict";
const fs = require("fs");
const path = require("path");

const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + " +
  "message['content'] + '<|im_end|>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

function main() {
  const modules = process.argv[2];
  if (!modules) {
    process.stderr.write("usage: tokenizer_oracle.js NODE_MODULES_DIR < requests.json\n");
    process.exit(2);
  }
  const { TokenizerLoader } = require(path.join(modules, "@lenml", "tokenizers"));
  const loaded = new Map();
  const tokenizer = (dir) => {
    if (!loaded.has(dir)) {
      const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
      loaded.set(
        dir,
        TokenizerLoader.fromPreTrained({
          tokenizerJSON: read("tokenizer.json"),
          tokenizerConfig: read("tokenizer_config.json"),
        }),
      );
    }
    return loaded.get(dir);
  };
  const chat = (tok, content) => {
    const opts = { add_generation_prompt: true, tokenize: true, return_tensor: false };
    const msgs = [{ role: "user", content }];
    try {
      return tok.apply_chat_template(msgs, opts);
    } catch (e) {
      if (!String(tok.chat_template || "").includes("<|im_start|>")) throw e;
      process.stderr.write(`the chat template does not parse here (${e.message}); using ChatML\n`);
      return tok.apply_chat_template(msgs, { ...opts, chat_template: CHATML });
    }
  };
  const requests = JSON.parse(fs.readFileSync(0, "utf8"));
  const out = requests.map((r) => {
    const tok = tokenizer(r.dir);
    if (typeof r.chat === "string") return Array.from(chat(tok, r.chat));
    return Array.from(tok.encode(r.text, { add_special_tokens: false }));
  });
  process.stdout.write(JSON.stringify(out) + "\n");
}

main();
