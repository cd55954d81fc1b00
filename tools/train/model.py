"""A small Llama decoder in plain PyTorch whose parameter names and maths match Hugging Face's
LlamaForCausalLM, so the exported safetensors load in gecd (and in transformers) unchanged."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg["num_key_value_heads"]
        self.head_dim = cfg["hidden_size"] // self.heads
        hidden = cfg["hidden_size"]
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             enable_gqa=self.heads != self.kv_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
        self.input_layernorm = RMSNorm(hidden, cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(hidden, cfg["rms_norm_eps"])
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.mlp.up_proj = nn.Linear(hidden, inter, bias=False)
        self.mlp.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(h)) * self.mlp.up_proj(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.model.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.model.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.apply(self._init)
        # Residual-branch outputs start small (GPT-2's scaled init) so deep stacks train stably.
        for block in self.model.layers:
            std = 0.02 / math.sqrt(2 * cfg["num_hidden_layers"])
            nn.init.normal_(block.self_attn.o_proj.weight, std=std)
            nn.init.normal_(block.mlp.down_proj.weight, std=std)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def hidden(self, ids):
        """Final-norm hidden states [batch, time, hidden]; the LM head is applied by the caller
        (training applies it only where there is a loss)."""
        t = ids.shape[1]
        freqs = torch.outer(torch.arange(t, dtype=torch.float32, device=ids.device),
                            self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        x = self.model.embed_tokens(ids)
        for block in self.model.layers:
            x = block(x, cos.to(x.dtype), sin.to(x.dtype))
        return self.model.norm(x)

    def forward(self, ids):
        return self.lm_head(self.hidden(ids))

    @torch.no_grad()
    def greedy(self, prompts, max_new, eos_id):
        """Greedy continuation of each prompt (lists of ids), no cache: for small checks only."""
        device = self.lm_head.weight.device
        outs = []
        for prompt in prompts:
            ids = list(prompt)
            new = []
            for _ in range(max_new):
                logits = self.forward(torch.tensor([ids], device=device))[0, -1]
                nxt = int(torch.argmax(logits))
                if nxt == eos_id:
                    break
                new.append(nxt)
                ids.append(nxt)
            outs.append(new)
        return outs
