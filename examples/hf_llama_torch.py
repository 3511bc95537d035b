#!/usr/bin/env python3
"""Load a model `trainsim export` wrote, in plain PyTorch (no `transformers`), and generate or score text with it.

`trainsim export --checkpoint run1 -o run1-hf` writes run1-hf/model.safetensors (LlamaForCausalLM's names and
layout), config.json and the byte-level tokenizer's files. Where `transformers` is installed, the usual two lines
load it:

    tok = AutoTokenizer.from_pretrained("run1-hf"); model = AutoModelForCausalLM.from_pretrained("run1-hf")
    print(tok.decode(model.generate(**tok("The ", return_tensors="pt"), max_new_tokens=100)[0]))

This file is for machines without it: the safetensors reader, the Llama forward (Hugging Face's conventions:
rotate_half rotary pairs, RMSNorm, SwiGLU, untied head) and the tokenizer (one token per byte, id = byte value)
in about a hundred lines of PyTorch. Usage:

    python3 examples/hf_llama_torch.py run1-hf --prompt "The " --tokens 100 --temperature 0.8 --seed 1
    python3 examples/hf_llama_torch.py run1-hf --score some.txt      # loss, as `trainsim score` computes it

tests/torch/export_loader_test.py checks it against `trainsim score --logits`. Needs Python 3 and PyTorch
(Debian: apt-get install python3-torch).
"""
import argparse
import json
import math
import os
import struct
import sys

import torch


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file: an 8-byte little-endian header length, the JSON header
    (dtype, shape, data_offsets per tensor), then the raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            raise ValueError("%s: %s is %s; this loader reads F32 (what trainsim writes)" % (path, name, meta["dtype"]))
        b, e = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(meta["shape"])
    return out


class Llama:
    """LlamaForCausalLM's forward in fp32 from an exported directory (its config.json and model.safetensors)."""

    def __init__(self, directory):
        with open(os.path.join(directory, "config.json")) as f:
            self.c = json.load(f)
        if self.c.get("model_type") != "llama":
            sys.exit("%s holds a %s model: this loader reads Llama exports only (a Mixture of Experts export is "
                     "MixtralForCausalLM: load it with transformers)" % (directory, self.c.get("model_type")))
        self.w = read_safetensors(os.path.join(directory, "model.safetensors"))

    def logits(self, tokens):
        """tokens: a LongTensor [B, T] (T at most max_position_embeddings); returns logits [B, T, vocab]."""
        c, w = self.c, self.w
        B, T = tokens.shape
        H, d = c["num_attention_heads"], c["hidden_size"]
        hd = d // H
        i = torch.arange(0, hd, 2, dtype=torch.float64)
        ang = torch.outer(torch.arange(T, dtype=torch.float64), c["rope_theta"] ** (-i / hd))
        cos, sin = torch.cat((ang.cos(), ang.cos()), -1).float(), torch.cat((ang.sin(), ang.sin()), -1).float()

        def rope(x):  # rotate_half: the pairs (j, j + hd/2)
            x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
            return x * cos + torch.cat((-x2, x1), -1) * sin

        def rms(x, weight):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["rms_norm_eps"]) * weight

        linear = torch.nn.functional.linear
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = w["model.embed_tokens.weight"][tokens]
        for layer in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % layer
            h = rms(x, w[p + "input_layernorm.weight"])
            q, k, v = (linear(h, w[p + "self_attn.%s_proj.weight" % n]).view(B, T, H, hd).transpose(1, 2) for n in "qkv")
            att = torch.softmax(rope(q) @ rope(k).transpose(-1, -2) / math.sqrt(hd) + mask, -1) @ v
            x = x + linear(att.transpose(1, 2).reshape(B, T, d), w[p + "self_attn.o_proj.weight"])
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            gate, up = linear(h, w[p + "mlp.gate_proj.weight"]), linear(h, w[p + "mlp.up_proj.weight"])
            x = x + linear(torch.nn.functional.silu(gate) * up, w[p + "mlp.down_proj.weight"])
        return linear(rms(x, w["model.norm.weight"]), w["lm_head.weight"])

    def generate(self, prompt, tokens, temperature=1.0, top_k=0, seed=1):
        """`prompt` (bytes) followed by `tokens` drawn bytes; the context keeps the last max_position_embeddings."""
        gen = torch.Generator().manual_seed(seed)
        out = list(prompt) or [ord(" ")]
        for _ in range(tokens):
            ctx = torch.tensor([out[-self.c["max_position_embeddings"]:]])
            last = self.logits(ctx)[0, -1]
            if temperature == 0:
                out.append(int(last.argmax()))
                continue
            if top_k > 0:
                last = torch.where(last < torch.topk(last, top_k).values[-1], torch.tensor(float("-inf")), last)
            out.append(int(torch.multinomial(torch.softmax(last / temperature, -1), 1, generator=gen)))
        return bytes(out)

    def score(self, text):
        """[(position, byte, log-probability)] of every byte but the first, in windows of max_position_embeddings
        bytes as `trainsim score` cuts them (each window's bytes predicted from the ones before them in it)."""
        seq, out = self.c["max_position_embeddings"], []
        for start in range(0, len(text) - 1, seq):
            window = text[start:start + seq + 1]
            logp = torch.log_softmax(self.logits(torch.tensor([list(window[:-1])]))[0].double(), -1)
            out += [(start + j + 1, window[j + 1], float(logp[j, window[j + 1]])) for j in range(len(window) - 1)]
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directory", help="what `trainsim export -o DIR` wrote")
    ap.add_argument("--prompt", default="The ")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--score", metavar="FILE", help="print the loss (nats per byte) of FILE instead of generating")
    a = ap.parse_args()
    model = Llama(a.directory)
    torch.set_grad_enabled(False)
    if a.score:
        with open(a.score, "rb") as f:
            scored = model.score(f.read())
        loss = -sum(s[2] for s in scored) / len(scored)
        print("%d bytes predicted: loss %.4f nats per byte, perplexity %.3f, %.4f bits per byte"
              % (len(scored), loss, math.exp(loss), loss / math.log(2)))
        return
    sys.stdout.buffer.write(model.generate(a.prompt.encode(), a.tokens, a.temperature, a.top_k, a.seed) + b"\n")


if __name__ == "__main__":
    main()
