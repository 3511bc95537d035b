#!/usr/bin/env python3
"""PyTorch eager training of trainsim's executor model, for trainsim_bench_exec --vs-pytorch (bench/README.md).

The same model as exec/model_config.h, written the way an eager PyTorch user writes it: token embedding ->
blocks -> final RMSNorm -> untied LM head, each block pre-norm with a fused q|k|v linear, rotary embedding on
adjacent pairs (Meta's Llama, as complex multiplication), causal softmax attention (PyTorch 1.13 has no
scaled_dot_product_attention), a fused gate|up linear, SwiGLU, and no biases. A step is M microbatches of
B x T tokens (gradients accumulated, the loss scaled by 1/M), the global-norm clipping at 1 and AdamW
(betas 0.9, 0.95, weight decay 0.1 on matrices), as `trainsim replay` trains. One thread (torch.set_num_threads).

Prints one line: `tokens/s N best-step M`, N over the steps after the first (the first warms the allocator and
caches), M over the fastest of them, and exits 3 with a message when torch cannot be imported (Debian: python3-torch).

  python3 bench/torch_eager.py --dim 256 --heads 4 --blocks 4 --ffn 768 --seq 128 --batch 8 --microbatches 4 --steps 4
"""
import argparse
import math
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the caller prints the skip
    print(f"torch not available ({e}); install Debian's python3-torch", file=sys.stderr)
    sys.exit(3)


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.h, self.hd, self.f = a.heads, a.dim // a.heads, a.ffn
        self.attn_norm = RMSNorm(a.dim, 1e-5)
        self.wqkv = torch.nn.Linear(a.dim, 3 * a.dim, bias=False)
        self.wo = torch.nn.Linear(a.dim, a.dim, bias=False)
        self.ffn_norm = RMSNorm(a.dim, 1e-5)
        self.wgu = torch.nn.Linear(a.dim, 2 * a.ffn, bias=False)
        self.wdown = torch.nn.Linear(a.ffn, a.dim, bias=False)

    def forward(self, x, freqs, mask):
        B, T, d = x.shape
        q, k, v = self.wqkv(self.attn_norm(x)).split(d, dim=-1)
        q, k, v = (t.view(B, T, self.h, self.hd) for t in (q, k, v))
        q, k = rope(q, freqs), rope(k, freqs)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        o = (att @ v).transpose(1, 2).contiguous().view(B, T, d)
        x = x + self.wo(o)
        g, u = self.wgu(self.ffn_norm(x)).split(self.f, dim=-1)
        return x + self.wdown(F.silu(g) * u)


def rope(x, freqs):  # x (B, T, H, hd), pairs (2i, 2i+1) rotated by t * theta^(-2i/hd)
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(3)


class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.dim)
        self.blocks = torch.nn.ModuleList(Block(a) for _ in range(a.blocks))
        self.norm = RMSNorm(a.dim, 1e-5)
        self.head = torch.nn.Linear(a.dim, a.vocab, bias=False)
        hd = a.dim // a.heads
        inv = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(a.seq, dtype=torch.float64), inv)
        self.freqs = torch.polar(torch.ones_like(ang), ang).to(torch.complex64).view(1, a.seq, 1, hd // 2)
        self.mask = torch.triu(torch.ones(a.seq, a.seq, dtype=torch.bool), diagonal=1)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, tokens, targets):
        x = self.emb(tokens)
        for b in self.blocks:
            x = b(x, self.freqs, self.mask)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    for name, v in [("vocab", 256), ("dim", 256), ("heads", 4), ("blocks", 4), ("ffn", 768), ("seq", 128),
                    ("batch", 8), ("microbatches", 4), ("steps", 4)]:
        p.add_argument(f"--{name}", type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Model(a)
    decay = [q for q in model.parameters() if q.dim() == 2]
    other = [q for q in model.parameters() if q.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1)
    data = torch.randint(0, a.vocab, (a.steps * a.microbatches, a.batch, a.seq + 1), generator=gen)
    later, tokens, fastest = 0.0, 0, None
    for step in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for m in range(a.microbatches):
            batch = data[step * a.microbatches + m]
            loss = model(batch[:, :-1], batch[:, 1:]) / a.microbatches
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step > 0 or a.steps == 1:
            later += dt
            tokens += a.microbatches * a.batch * a.seq
            fastest = dt if fastest is None else min(fastest, dt)
    print(f"tokens/s {tokens / later:.1f} best-step {a.microbatches * a.batch * a.seq / fastest:.1f}")


if __name__ == "__main__":
    main()
