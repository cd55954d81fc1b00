"""Writes a random model in Hugging Face layout and HF `transformers` reference logits for it.

  python3 tools/gpu/hf_reference.py --shape llama-3.2-1b --layers 4 --vocab 32000 --out DIR
  python3 tools/gpu/hf_reference.py --shape qwen2 --layers 4 --vocab 32000 --out DIR

Shapes (per layer exactly the released models'; --layers and --vocab shrink depth and
vocabulary only, so the GEMM, attention and RoPE shapes stay those of the real model):
  llama-3.2-1b  LlamaForCausalLM: hidden 2048, 16 layers, 32 heads, 8 kv heads (head_dim 64),
                intermediate 8192, vocab 128256, llama3 RoPE (theta 500000, factor 32),
                rms_norm_eps 1e-5, tied embeddings
  qwen2         Qwen2ForCausalLM like Qwen2-0.5B: hidden 896, 24 layers, 14 heads, 2 kv heads
                (head_dim 64), intermediate 4864, vocab 151936, q/k/v biases, RoPE theta 1e6,
                rms_norm_eps 1e-6, tied embeddings
--hidden-div N divides hidden, intermediate and the head counts by N (head_dim kept): a
smaller model of the same structure, for rehearsing on a CPU.

DIR gets config.json, generation_config.json, model.safetensors (bf16; gecd needs no tokenizer
to run token ids) and two reference files in the format tests/engine/engine_test_util.h reads:
  reference_logits.json       HF forward in float32 (the bf16 weights upcast: what gecd's CPU
                              backend computes)
  reference_logits_bf16.json  HF forward natively in bfloat16 (--no-bf16 leaves it out)
{"model", "shape", "compute_dtype", "device", "torch", "transformers", "cases": [{"prompt":
[ids], "positions": [p...], "logits": [[vocab floats] per position]}]}; the positions are the
last --positions ones of each prompt, consecutive, so the C++ side can reach them by one prefill
and single-token decode steps. The forward runs on CUDA when torch sees a device (--device).

Weights are seeded (--seed) and scaled so activations keep unit scale through the layers
(linear weights ~ N(0, 1/fan_in), norm weights 1 + N(0, 0.1^2), biases N(0, 0.3^2)) and the tied
logits have a standard deviation of about 4. (A top-1 among 32000 Gaussian logits leads the
runner-up by only ~1/4 std, so bf16 rounding flips it at some positions: the C++ side checks
top-1 agreement where HF's lead is decisive, tests/engine/hf_reference.h.) Heavy-tailed
embedding rows would make every top-1 decisive, but they inflate bf16's and FP8's own error
(the residual stream then carries a few huge rows), so they are not used. Needs only torch,
transformers and safetensors (tools/gpu/requirements.txt).
"""

import argparse
import json
import math
import os
import shutil
import time

import torch
import transformers
from safetensors.torch import save_file
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

SHAPES = {
    "llama-3.2-1b": dict(
        cls=LlamaForCausalLM, config=LlamaConfig, bias=False,
        dims=dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=64, intermediate_size=8192, vocab_size=128256,
                  max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
                  bos_token_id=128000, eos_token_id=128001,
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192})),
    "qwen2": dict(
        cls=Qwen2ForCausalLM, config=Qwen2Config, bias=True,
        dims=dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  bos_token_id=151643, eos_token_id=151643,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}
PROMPT_LENGTHS = (9, 40, 100, 64)
LOGIT_STD = 4.0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", required=True, choices=sorted(SHAPES))
    p.add_argument("--out", required=True, help="model directory to (re)write")
    p.add_argument("--layers", type=int, help="num_hidden_layers (default: the real model's)")
    p.add_argument("--vocab", type=int, help="vocab_size (default: the real model's)")
    p.add_argument("--hidden-div", type=int, default=1,
                   help="divide hidden/intermediate size and head counts (CPU rehearsal)")
    p.add_argument("--positions", type=int, default=16, help="reference positions per prompt")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--no-bf16", action="store_true", help="write only the float32 reference")
    return p.parse_args()


def make_config(args):
    shape = SHAPES[args.shape]
    dims = dict(shape["dims"])
    if args.layers:
        dims["num_hidden_layers"] = args.layers
    if args.vocab:
        dims["vocab_size"] = args.vocab
        if args.vocab <= max(dims["bos_token_id"], dims["eos_token_id"]):
            dims["bos_token_id"], dims["eos_token_id"] = 1, 2
    d = args.hidden_div
    if d > 1:
        head_dim = dims["hidden_size"] // dims["num_attention_heads"]
        for key in ("hidden_size", "intermediate_size", "num_attention_heads",
                    "num_key_value_heads"):
            if dims[key] % d:
                raise SystemExit(f"--hidden-div {d} does not divide {key} {dims[key]}")
            dims[key] //= d
        dims["head_dim"] = head_dim
    return shape["config"](**dims)


def random_weights(config, bias: bool, seed: int) -> dict:
    """The checkpoint's tensors (bf16, HF names), drawn on the CPU so the seed alone fixes them."""
    g = torch.Generator().manual_seed(seed)
    h, inter = config.hidden_size, config.intermediate_size
    hd = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q_dim, kv_dim = config.num_attention_heads * hd, config.num_key_value_heads * hd

    def normal(shape, std):
        return (torch.randn(shape, generator=g) * std).to(torch.bfloat16)

    def linear(out_dim, in_dim):
        return normal((out_dim, in_dim), 1.0 / math.sqrt(in_dim))

    def norm():
        return (1.0 + 0.1 * torch.randn((h,), generator=g)).to(torch.bfloat16)

    # Tied logits = embed . rmsnorm(x) with rmsnorm(x) ~ unit per element: std LOGIT_STD.
    t = {"model.embed_tokens.weight": normal((config.vocab_size, h), LOGIT_STD / math.sqrt(h))}
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm()
        t[p + "post_attention_layernorm.weight"] = norm()
        for name, out_dim in (("q_proj", q_dim), ("k_proj", kv_dim), ("v_proj", kv_dim)):
            t[p + f"self_attn.{name}.weight"] = linear(out_dim, h)
            if bias:
                t[p + f"self_attn.{name}.bias"] = normal((out_dim,), 0.3)
        t[p + "self_attn.o_proj.weight"] = linear(h, q_dim)
        t[p + "mlp.gate_proj.weight"] = linear(inter, h)
        t[p + "mlp.up_proj.weight"] = linear(inter, h)
        t[p + "mlp.down_proj.weight"] = linear(h, inter)
    t["model.norm.weight"] = norm()
    if not config.tie_word_embeddings:
        t["lm_head.weight"] = linear(config.vocab_size, h)
    return t


def write_model(args, out: str):
    config = make_config(args)
    config.architectures = [SHAPES[args.shape]["cls"].__name__]
    config.dtype = torch.bfloat16
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    config.save_pretrained(out)
    GenerationConfig.from_model_config(config).save_pretrained(out)
    tensors = random_weights(config, SHAPES[args.shape]["bias"], args.seed)
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    return config


def prompts(vocab: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed + 1)
    # Ids from 3 up: no BOS/EOS (1/2 once the vocabulary is shrunk).
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def reference(args, out: str, dtype: torch.dtype, device: str, config) -> dict:
    cls = SHAPES[args.shape]["cls"]
    # From the saved files, as a user loads them: a cast live model would also round
    # non-persistent buffers such as RoPE's inv_freq.
    model, info = cls.from_pretrained(out, dtype=dtype, output_loading_info=True)
    unexpected = [k for k in info.get("missing_keys", []) if k != "lm_head.weight"]
    unexpected += list(info.get("unexpected_keys", []))
    if unexpected:
        raise SystemExit(f"{out}: transformers did not load the written weights as such: "
                         f"{unexpected[:5]}")
    model.to(device).eval()
    cases = []
    with torch.no_grad():
        for prompt in prompts(config.vocab_size, args.seed):
            logits = model(torch.tensor([prompt], device=device)).logits[0].float().cpu()
            positions = list(range(max(0, len(prompt) - args.positions), len(prompt)))
            cases.append({"prompt": prompt, "positions": positions,
                          "logits": [[float(f"{v:.8g}") for v in logits[p].tolist()]
                                     for p in positions]})
    del model
    return {"model": os.path.basename(out), "shape": args.shape,
            "compute_dtype": str(dtype).removeprefix("torch."), "device": device,
            "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "cases": cases}


def main() -> None:
    args = parse_args()
    transformers.utils.logging.disable_progress_bar()
    # A float32 reference in float32: no TF32 matmuls on the GPU.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    out = os.path.abspath(args.out)
    t0 = time.time()
    config = write_model(args, out)
    t1 = time.time()
    files = [("reference_logits.json", torch.float32)]
    if not args.no_bf16:
        files.append(("reference_logits_bf16.json", torch.bfloat16))
    for name, dtype in files:
        with open(os.path.join(out, name), "w") as f:
            json.dump(reference(args, out, dtype, device, config), f)
    size = os.path.getsize(os.path.join(out, "model.safetensors"))
    print(f"hf_reference: {args.shape} {config.num_hidden_layers} layers hidden "
          f"{config.hidden_size} vocab {config.vocab_size}: {size / 2**20:.0f} MiB written in "
          f"{t1 - t0:.1f}s, references ({', '.join(n for n, _ in files)}) on {device} in "
          f"{time.time() - t1:.1f}s -> {out}")


if __name__ == "__main__":
    main()
