"""CTranslate2 side of bench/cpu_peer: converts gecd's model and runs JFLEG prompts through it.

  ct2_peer.py convert --model DIR --out DIR
      Fills CTranslate2's Transformer decoder spec (RMSNorm, SwiGLU, RoPE sliced in halves,
      grouped-query attention, untied lm_head) from the checkpoint's safetensors tensors, read
      with numpy (bf16 widened to f32: numpy has no bf16, so no safetensors/torch package), and
      saves it in float32; int8 runs quantize it at load (per-row weights, dynamic activations).
      The vocabulary is one name per gecd token id, so ids pass through unchanged.
  ct2_peer.py generate --ct2 DIR --prompts FILE --compute-type int8|float32 --threads N
                       --batch N --repeat N --ids-out FILE --json-out FILE
      Greedy decoding of every prompt (cpu_peer_tool prompts' JSON lines), timed; writes the
      output ids (one line of space-separated ids per prompt, empty for refused/unchanged ones)
      and the timings.
  ct2_peer.py report --dir DIR
      Reads what run.sh left in DIR (prompts, CTranslate2 outputs decoded by gecd's tokenizer,
      `gecd eval`'s report, gecd-load's find-max) and prints the comparison table.
  ct2_peer.py perf-groups --perf perf.txt [--metrics metrics.txt]
      Sums daemon_profile.sh's `perf report` lines by process and, in the engine process, by
      part of the work; with the daemon's /metrics, the batch sizes its steps ran.
"""

import argparse
import json
import os
import re
import statistics
import struct
import sys
import time



def read_safetensors(path):
    """Every tensor of one .safetensors file as float32 numpy arrays, by name."""
    import numpy as np

    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[start:end]
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype == "F16":
            array = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dtype == "F32":
            array = np.frombuffer(raw, dtype="<f4").copy()
        else:
            sys.exit(f"ct2_peer: {path}: tensor {name} has dtype {dtype}; only BF16/F16/F32 convert")
        tensors[name] = array.reshape(info["shape"])
    return tensors


def load_checkpoint(model_dir):
    tensors = {}
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for name in files:
        tensors.update(read_safetensors(os.path.join(model_dir, name)))
    return tensors


def convert(args):
    import ctranslate2
    import numpy as np
    from ctranslate2 import specs

    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "llama":
        sys.exit(f"ct2_peer: {args.model}: model_type {cfg.get('model_type')!r}, expected llama")
    if cfg.get("rope_scaling"):
        sys.exit("ct2_peer: rope_scaling is not handled by this converter")
    t = load_checkpoint(args.model)
    layers = cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim", hidden // heads)
    spec = specs.TransformerDecoderModelSpec.from_config(
        layers,
        heads,
        pre_norm=True,
        activation=specs.Activation.SWISH,
        ffn_glu=True,
        rms_norm=True,
        rotary_dim=0,  # all of head_dim
        rotary_interleave=False,  # HF Llama rotates the two halves of each head
        rotary_base=cfg.get("rope_theta", 10000.0),
        num_heads_kv=kv_heads,
        head_dim=head_dim if head_dim != hidden // heads else None,
    )
    dec = spec.decoder
    dec.scale_embeddings = False
    dec.embeddings.weight = t["model.embed_tokens.weight"]
    dec.layer_norm.gamma = t["model.norm.weight"]
    lm_head = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    dec.projection.weight = t[lm_head]
    for i, layer in enumerate(dec.layer):
        p = f"model.layers.{i}."
        attn = layer.self_attention
        attn.layer_norm.gamma = t[p + "input_layernorm.weight"]
        attn.linear[0].weight = np.concatenate(
            [t[p + f"self_attn.{n}_proj.weight"] for n in ("q", "k", "v")], axis=0
        )
        attn.linear[1].weight = t[p + "self_attn.o_proj.weight"]
        layer.ffn.layer_norm.gamma = t[p + "post_attention_layernorm.weight"]
        layer.ffn.linear_0.weight = t[p + "mlp.gate_proj.weight"]
        layer.ffn.linear_0_noact.weight = t[p + "mlp.up_proj.weight"]
        layer.ffn.linear_1.weight = t[p + "mlp.down_proj.weight"]
    vocab = cfg["vocab_size"]
    bos, eos = cfg.get("bos_token_id", 1), cfg.get("eos_token_id", 2)
    if isinstance(eos, list):
        eos = eos[0]
    names = [f"<id{i}>" for i in range(vocab)]
    names[bos], names[eos] = "<s>", "</s>"
    unk = next(i for i in range(vocab) if i not in (bos, eos))
    names[unk] = "<unk>"
    spec.register_vocabulary(names)
    spec.config.bos_token = "<s>"
    spec.config.eos_token = "</s>"
    spec.config.unk_token = "<unk>"
    spec.config.layer_norm_epsilon = cfg.get("rms_norm_eps", 1e-6)
    spec.validate()
    spec.optimize(quantization="float32")
    os.makedirs(args.out, exist_ok=True)
    spec.save(args.out)
    print(f"ct2_peer: converted {args.model} -> {args.out} (ctranslate2 {ctranslate2.__version__})")


def generate(args):
    import ctranslate2

    with open(args.prompts) as f:
        prompts = [json.loads(line) for line in f]
    runnable = [i for i, p in enumerate(prompts) if "tokens" in p]
    with open(os.path.join(args.ct2, "vocabulary.json")) as f:
        names = json.load(f)
    starts = [[names[t] for t in prompts[i]["tokens"]] for i in runnable]
    max_new = max(prompts[i]["max_new_tokens"] for i in runnable)
    if any(prompts[i]["max_new_tokens"] != max_new for i in runnable):
        sys.exit("ct2_peer: prompts with different max_new_tokens are not supported")
    gen = ctranslate2.Generator(
        args.ct2,
        device="cpu",
        compute_type=args.compute_type,
        inter_threads=1,
        intra_threads=args.threads,
    )

    def run(batch):
        return gen.generate_batch(
            batch,
            max_batch_size=args.batch,
            beam_size=1,
            sampling_topk=1,
            max_length=max_new,
            include_prompt_in_result=False,
        )

    run(starts[:64])  # warm-up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        results = run(starts)
        times.append(time.perf_counter() - t0)
    ids = [""] * len(prompts)
    generated = 0
    for i, r in zip(runnable, results):
        seq = r.sequences_ids[0]
        generated += len(seq)
        ids[i] = " ".join(str(t) for t in seq)
    with open(args.ids_out, "w") as f:
        for line in ids:
            f.write(line + "\n")
    median = statistics.median(times)
    out = {
        "compute_type": args.compute_type,
        "threads": args.threads,
        "batch": args.batch,
        "sentences": len(prompts),
        "runnable": len(runnable),
        "times_s": times,
        "median_s": median,
        "req_per_s": len(prompts) / median,
        "req_per_s_all": [len(prompts) / x for x in times],
        "generated_tokens": generated,
        "hit_max_new_tokens": sum(1 for r in results if len(r.sequences_ids[0]) >= max_new),
        "ctranslate2": ctranslate2.__version__,
    }
    with open(args.json_out, "w") as f:
        json.dump(out, f, indent=2)
    print(
        f"ct2_peer: {args.compute_type}: {len(prompts)} sentences, "
        + ", ".join(f"{x:.2f} s" for x in times)
        + f"; median {out['req_per_s']:.1f} req/s"
    )


def load_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def rounds(d, prefix, required=True):
    """The JSON files PREFIX-r1.json, PREFIX-r2.json, ... that run.sh wrote, in order."""
    out = []
    r = 1
    while os.path.exists(os.path.join(d, f"{prefix}-r{r}.json")):
        with open(os.path.join(d, f"{prefix}-r{r}.json")) as f:
            out.append(json.load(f))
        r += 1
    if not out and required:
        sys.exit(f"ct2_peer: no {prefix}-r1.json in {d}")
    return out


def report(args):
    d = args.dir
    prompts = load_jsonl(os.path.join(d, "prompts.jsonl"))
    with open(os.path.join(d, "texts.txt")) as f:
        texts = f.read().split("\n")[: len(prompts)]
    # gecd's rows as run.sh ran them: TAG, LABEL, ENV a line; the first is the reference.
    with open(os.path.join(d, "gecd-rows.txt")) as f:
        gecd_rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    if not gecd_rows:
        sys.exit(f"ct2_peer: no gecd rows in {d}/gecd-rows.txt")
    evals = rounds(d, f"gecd-eval-{gecd_rows[0][0]}")
    gecd_out = [row["model"] for row in evals[0]["outputs"]["jfleg"]]
    n = len(prompts)
    if len(gecd_out) != n:
        sys.exit(f"ct2_peer: gecd eval has {len(gecd_out)} outputs for {n} prompts")
    rows = []
    outputs = {}
    for ct in ("int8", "float32"):
        timings = rounds(d, f"ct2-{ct}")
        decoded = load_jsonl(os.path.join(d, f"ct2-{ct}.txt.jsonl"))
        # What gecd answers for prompts it never runs: the text itself, or nothing.
        out = [
            texts[i] if p.get("unchanged") else ("" if "error" in p else decoded[i])
            for i, p in enumerate(prompts)
        ]
        outputs[ct] = out
        same = sum(1 for a, b in zip(out, gecd_out) if a == b)
        t = timings[0]
        backend = ""
        log = os.path.join(d, f"ct2-{ct}-r1.log")
        if os.path.exists(log):
            with open(log) as f:
                text = f.read()
            kind = "SGEMM" if ct == "float32" else "GEMM_S8"
            m = re.search(kind + r" backend: (\w+)", text)
            isa = re.search(r"Selected ISA: (\w+)", text)
            if m and isa:
                backend = f" ({m.group(1)}, {isa.group(1)})"
        rows.append(
            (
                f"CTranslate2 {t['ctranslate2']} {ct}{backend}, batch {t['batch']}, "
                f"{t['threads']} threads, offline",
                [x["req_per_s"] for x in timings],
                f"{same} / {n}",
                t,
            )
        )
    for i, (tag, label, env) in enumerate(gecd_rows):
        runs = rounds(d, f"gecd-eval-{tag}")
        out = [row["model"] for row in runs[0]["outputs"]["jfleg"]]
        same = sum(1 for a, b in zip(out, gecd_out) if a == b)
        same_ct = sum(1 for a, b in zip(out, outputs["int8"]) if a == b)
        rows.append(
            (
                f"gecd eval, in-process engine, {label}, offline{', ' + env if env else ''}",
                [e["throughput"]["model"]["sentences_per_s"] for e in runs],
                "(reference)" if i == 0 else f"{same} / {n} ({same_ct} / {n} with CTranslate2 int8's)",
                None,
            )
        )
    for name in sorted(os.listdir(d)):
        if not (name.startswith("gecd-findmax") and name.endswith(".json")):
            continue
        with open(os.path.join(d, name)) as f:
            fm = json.load(f)
        with open(os.path.join(d, name[: -len(".json")] + ".label")) as f:
            label = f.read().strip()
        rows.append(
            (
                f"gecd serve {label}, gecd-load --find-max, p99 < {fm['slo_p99_s']:g} s",
                [fm["max_qps"]],
                "",
                None,
            )
        )
    print()
    print(f"| system | req/s (each round) | median | outputs identical to gecd {gecd_rows[0][1]}'s |")
    print("|---|---|---:|---|")
    for name, rates, same, _ in rows:
        print(
            f"| {name} | {' / '.join(f'{r:.1f}' for r in rates)} | "
            f"{statistics.median(rates):.1f} | {same} |"
        )
    same_ct = sum(1 for a, b in zip(outputs["int8"], outputs["float32"]) if a == b)
    print(f"\nCTranslate2 int8 vs its float32: {same_ct} / {n} identical.")
    load = os.path.join(d, "loadavg.txt")
    if os.path.exists(load):
        with open(load) as f:
            print("load average (1, 5, 15 min) at the start of each round: "
                  + "; ".join(line.strip() for line in f))
    toks = [len(p["tokens"]) for p in prompts if "tokens" in p]
    print(
        f"{n} JFLEG dev sources: {len(toks)} run through the model "
        f"({sum(toks) / max(1, len(toks)):.1f} prompt tokens on average), "
        f"{sum(1 for p in prompts if p.get('unchanged'))} only whitespace, "
        f"{sum(1 for p in prompts if 'error' in p)} refused by the pipeline."
    )
    for name, _, _, timing in rows:
        if timing:
            print(
                f"{name}: {timing['generated_tokens'] / max(1, len(toks)):.1f} generated tokens "
                f"on average, {timing['hit_max_new_tokens']} outputs at max_new_tokens"
            )
    for ct in ("float32", "int8"):
        shown = 0
        for i, (a, b) in enumerate(zip(outputs[ct], gecd_out)):
            if a != b and shown < args.diffs:
                print(f"{ct} differs, line {i + 1}:\n  gecd: {b!r}\n  ct2:  {a!r}")
                shown += 1


# Engine-process symbols by part of the work: the first pattern that matches (dso or symbol).
PERF_GROUPS = [
    ("matmuls: OpenBLAS sgemm (all projections, lm_head)", r"openblas"),
    ("attention", r"CpuBackend::Attention"),
    ("sampling and copy bias (argmax over the vocabulary)", r"BiasedArgmax|AdvanceCopy|CopyCandidate"),
    ("RMSNorm", r"RmsNorm"),
    ("expf (SiLU, softmax)", r"libm[.-]"),
    ("RoPE and KV store", r"Rope"),
    ("rest of Forward (embeddings, SiLU loop, checks)", r"CpuBackend::|CpuLinear|CheckSequence|CheckTokenIds"),
    ("engine scheduling (plan, commit, blocks, compute thread)",
     r"engine::(Engine|PipelinedEngine|Block|StepBatch|OutputCollector|ComputeThread|KvCache)"),
    ("ring I/O and engine host (ipc, requests, replies)", r"ipc::|Ring|[Ee]ngine_?[Hh]ost|EngineProcess|Generator|server::|worker::"),
    ("kernel: sched_yield (OpenBLAS threads waiting for work)", r"sched_yield|do_sched_yield"),
    ("kernel (other syscalls, futex, scheduling, page faults)", r"\[kernel|\[k\]"),
    ("libc / libstdc++ (memcpy, malloc, locks)", r"libc[.-]|libstdc|ld-linux|libpthread"),
]


def perf_groups(args):
    line_re = re.compile(r"^\s*([\d.]+)%\s+(\d+):(.+?)\s{2,}(\S+)\s+\[(.)\]\s+(.*?)\s*$")
    by_proc = {}
    groups = {}
    other = {}
    thread_proc = {}
    if args.threads:
        with open(args.threads) as f:
            for line in f:
                tid, _, name = line.strip().partition(" ")
                thread_proc[tid] = name
    with open(args.perf) as f:
        for line in f:
            m = line_re.match(line)
            if not m:
                continue
            pct, comm, dso, kind, sym = float(m[1]), m[3].strip(), m[4], m[5], m[6]
            comm = thread_proc.get(m[2], comm)
            proc = "engine" if "engine" in comm else ("worker" if "worker" in comm else comm)
            by_proc[proc] = by_proc.get(proc, 0) + pct
            if proc != "engine":
                continue
            key = f"{dso} [{kind}] {sym}"
            for name, pattern in PERF_GROUPS:
                if re.search(pattern, key):
                    groups[name] = groups.get(name, 0) + pct
                    break
            else:
                other[sym] = other.get(sym, 0) + pct
    total = sum(by_proc.values())
    if total == 0:
        sys.exit(f"ct2_peer: no samples parsed from {args.perf}")
    print("| process | share of the daemon's on-CPU samples |\n|---|---:|")
    for proc, pct in sorted(by_proc.items(), key=lambda x: -x[1]):
        print(f"| {proc} | {100 * pct / total:.1f}% |")
    engine = by_proc.get("engine", 0)
    if engine:
        print("\n| engine process: part | share of its on-CPU samples |\n|---|---:|")
        for name, _ in PERF_GROUPS:
            if name in groups:
                print(f"| {name} | {100 * groups[name] / engine:.1f}% |")
        rest = sum(other.values())
        top = ", ".join(f"{k} {100 * v / engine:.1f}%" for k, v in sorted(other.items(), key=lambda x: -x[1])[:4])
        if rest:
            print(f"| other ({top}) | {100 * rest / engine:.1f}% |")
    if args.metrics and os.path.exists(args.metrics):
        buckets, total_sum, count = [], 0.0, 0
        with open(args.metrics) as f:
            for line in f:
                m = re.match(r'gecd_batch_size_bucket\{le="([^"]+)"\} (\S+)', line)
                if m:
                    buckets.append((m[1], float(m[2])))
                elif line.startswith("gecd_batch_size_sum "):
                    total_sum = float(line.split()[1])
                elif line.startswith("gecd_batch_size_count "):
                    count = int(float(line.split()[1]))
        if count:
            cells, prev = [], 0.0
            for le, c in buckets:
                if c > prev:
                    cells.append(f"<= {le}: {100 * (c - prev) / count:.0f}%")
                prev = c
            print(f"\nengine steps: {count}, mean batch {total_sum / count:.1f} sequences; " + ", ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--model", required=True)
    c.add_argument("--out", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--ct2", required=True)
    g.add_argument("--prompts", required=True)
    g.add_argument("--compute-type", required=True)
    g.add_argument("--threads", type=int, default=2)
    g.add_argument("--batch", type=int, default=128)
    g.add_argument("--repeat", type=int, default=3)
    g.add_argument("--ids-out", required=True)
    g.add_argument("--json-out", required=True)
    pg = sub.add_parser("perf-groups")
    pg.add_argument("--perf", required=True)
    pg.add_argument("--metrics")
    pg.add_argument("--threads", help="lines of 'thread-id process-name'")
    r = sub.add_parser("report")
    r.add_argument("--dir", required=True)
    r.add_argument("--diffs", type=int, default=3, help="differing outputs to show per type")
    args = ap.parse_args()
    {"convert": convert, "generate": generate, "report": report, "perf-groups": perf_groups}[
        args.cmd
    ](args)


if __name__ == "__main__":
    main()
