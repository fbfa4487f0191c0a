// llama.cpp's side of bench/llamacpp/compare.sh: prefill of PROMPT_LEN tokens
// and greedy decode of N_NEW tokens at batch 1 on THREADS CPU threads, with
// the prebuilt CPU llama.cpp npm's node-llama-cpp ships. Prints one JSON line.
//   node bench.mjs MODEL.gguf [THREADS] [PROMPT_LEN] [N_NEW] [MOD]
// The prompt is the same token ids ridge's side uses: 1 + (i * 37) % MOD
// (default 30000).
import {getLlama} from "node-llama-cpp";
const [modelPath, threadsArg, promptLenArg, nNewArg, modArg] = process.argv.slice(2);
const threads = Number(threadsArg || 2), promptLen = Number(promptLenArg || 512), nNew = Number(nNewArg || 32);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: true});
const ctx = await model.createContext({contextSize: 1024, threads, batchSize: 512, sequences: 1});
const seq = ctx.getSequence();
const mod = Number(modArg || 30000);  // below the vocabulary size
const prompt = Array.from({length: promptLen}, (_, i) => 1 + (i * 37) % mod);
const now = () => Number(process.hrtime.bigint()) / 1e9;
// Warm-up: a short prompt and a few tokens.
{ let n = 0; for await (const t of seq.evaluate(prompt.slice(0, 8), {temperature: 0})) { if (++n >= 4) break; } await seq.clearHistory(); }
let t0 = now();
await seq.evaluateWithoutGeneratingNewTokens(prompt);
const prefill = now() - t0;
await seq.clearHistory();
let n = 0, tFirst = 0;
for await (const t of seq.evaluate(prompt.slice(0, 8), {temperature: 0})) {
  if (n === 0) tFirst = now();
  if (++n > nNew) break;
}
const decode = (now() - tFirst) / nNew;
console.log(JSON.stringify({prefill_tokens_per_s: promptLen / prefill, decode_tokens_per_s: 1 / decode, threads, prompt_len: promptLen}));
await ctx.dispose(); await model.dispose();
