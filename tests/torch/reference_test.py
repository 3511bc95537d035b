#!/usr/bin/env python3
"""trainsim against PyTorch (issue 21): an independent implementation of the same model, outside the project.

As llm.c checks its C/CUDA code against PyTorch, this test runs trainsim's model in PyTorch with autograd, from
the weights trainsim exports in the Hugging Face Llama layout (`trainsim export`: model.safetensors, the
q and k rows permuted for rotate_half), and compares one training step with trainsim's:

- the loss of the step (the mean cross-entropy over its tokens; the data contract of docs/executor.md §2,
  reimplemented here);
- the global gradient norm before clipping (torch.nn.utils.clip_grad_norm_), and every parameter's clipped
  gradient: trainsim's is read back from its AdamW first moment after the step, m1 = (1 - beta1) * g
  (the moment starts at 0), exported with `trainsim export --optimizer`;
- one torch.optim.AdamW step (betas 0.9, 0.95, eps 1e-8, weight decay 0.1 on matrices only), against
  trainsim's weights after the step.

Tolerances (fp32; sums taken in another order differ by rounding only): loss and gradient norm 1e-5 relative;
each parameter's gradient ||g_torch - g_trainsim|| / ||g_torch|| <= 1e-5; the weights after the step, over the
whole model as trainsim's --check compares them, ||w_torch - w_trainsim|| / ||w_torch|| <= 1e-5.

Cases: the tiny model on one rank, and on a 4-rank 3D schedule (TP 2 x PP 2: its checkpoint's TP slices and
pipeline layers gathered by export); the Mixture-of-Experts model tiny-moe (exported as MixtralForCausalLM:
top-2 of 4 experts per block, the gates the softmax of the two largest router logits, as Mixtral's renormalised
top-k) on a 4-rank expert-parallel schedule (gen ep: EP 2, expert-data-parallel groups of 2, real all-to-alls),
and the same with the load-balancing loss (replay --aux-loss-coeff 0.1: each MoE block adds the Switch
Transformer loss alpha * E * sum_e f_e * P_e of each microbatch, f_e the fraction of its (token, expert) pairs at
expert e, P_e the mean of its router softmax; the step's objective is the cross-entropy plus their mean over the
microbatches, and trainsim's aux figure is compared too).
A negative control runs the same comparison with the other rotary pairing (adjacent pairs on the exported
weights), one with Mixtral's gates left unnormalised (the softmax over every expert), and one of the
load-balancing case without the loss, and requires each to FAIL: the comparison can tell.

Usage: reference_test.py TRAINSIM CORPUS WORKDIR. Exit 0: passed; 1: failed; 77: skipped (no torch).
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed (Debian: apt-get install python3-torch, as scripts/install-deps.sh does)")
    sys.exit(77)

TOL_LOSS = 1e-5
TOL_GRAD = 1e-5
TOL_WEIGHTS = 1e-5
BETA1, BETA2, EPS, WD = 0.9, 0.95, 1e-8, 0.1

torch.set_num_threads(1)
torch.manual_seed(0)


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (r.returncode, " ".join(map(str, args)), r.stdout, r.stderr))
    return r.stdout


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file (the format: 8-byte length, JSON header, raw data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        b, e = meta["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(meta["shape"])
        out[name] = t.clone()
    return out


class Llama:
    """LlamaForCausalLM's forward (Hugging Face's names and conventions), fp32, written for this test."""

    def __init__(self, weights, config, pairing="rotate_half", normalize_gates=True, aux_coeff=0.0, microbatches=1):
        self.p = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
        self.c = config
        self.pairing = pairing
        self.normalize_gates = normalize_gates
        self.aux_coeff = aux_coeff
        self.microbatches = microbatches
        self.aux = 0.0  # the load-balancing loss of the last forward: the blocks' sum, the microbatches' mean

    def rope(self, x, T):
        hd = x.shape[-1]
        i = torch.arange(0, hd, 2, dtype=torch.float64)
        freq = self.c["rope_theta"] ** (-i / hd)
        ang = torch.outer(torch.arange(T, dtype=torch.float64), freq)  # T x hd/2, in fp64 as trainsim's tables
        cos, sin = ang.cos().float(), ang.sin().float()
        if self.pairing == "rotate_half":  # pairs (i, i + hd/2)
            cos2, sin2 = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
            x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
            return x * cos2 + torch.cat((-x2, x1), -1) * sin2
        a, b = x[..., 0::2], x[..., 1::2]  # adjacent pairs (2i, 2i + 1)
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)

    def moe(self, h, M):
        """MixtralSparseMoeBlock: softmax over the experts, the top k renormalised; every expert's SwiGLU output
        weighted by its gate (zero for the experts a token does not reach)."""
        p, c = self.p, self.c
        E, k = c["num_local_experts"], c["num_experts_per_tok"]
        probs = torch.softmax(torch.nn.functional.linear(h, p[M + "gate.weight"]), -1)
        top, idx = torch.topk(probs, k, -1)
        if self.aux_coeff > 0:  # Switch Transformer's loss per microbatch (Fedus et al. 2021, eq. 4; f over n*k pairs)
            m = self.microbatches
            pm = probs.reshape(m, -1, E)  # (microbatch, its tokens, experts)
            n = pm.shape[1]
            f = torch.nn.functional.one_hot(idx.reshape(m, n * k), E).sum(1).float() / (n * k)  # counts: no grad
            self.aux = self.aux + (self.aux_coeff * E * (f * pm.mean(1)).sum(-1)).mean()
        if self.normalize_gates:
            top = top / top.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for e in range(E):
            X = M + "experts.%d." % e
            y = torch.nn.functional.linear(torch.nn.functional.silu(torch.nn.functional.linear(h, p[X + "w1.weight"])) *
                                           torch.nn.functional.linear(h, p[X + "w3.weight"]), p[X + "w2.weight"])
            out = out + (top * (idx == e)).sum(-1, keepdim=True) * y
        return out

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"]) * w

    def loss(self, tokens, targets):
        p, c = self.p, self.c
        B, T = tokens.shape
        H, d = c["num_attention_heads"], c["hidden_size"]
        hd = d // H
        x = p["model.embed_tokens.weight"][tokens]
        mask = torch.full((T, T), float("-inf")).triu(1)
        for i in range(c["num_hidden_layers"]):
            L = "model.layers.%d." % i
            h = self.rms(x, p[L + "input_layernorm.weight"])
            q, k, v = (torch.nn.functional.linear(h, p[L + "self_attn.%s_proj.weight" % n]).view(B, T, H, hd).transpose(1, 2)
                       for n in "qkv")
            q, k = self.rope(q, T), self.rope(k, T)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + mask, -1) @ v
            x = x + torch.nn.functional.linear(att.transpose(1, 2).reshape(B, T, d), p[L + "self_attn.o_proj.weight"])
            h = self.rms(x, p[L + "post_attention_layernorm.weight"])
            if L + "block_sparse_moe.gate.weight" in p:
                x = x + self.moe(h, L + "block_sparse_moe.")
                continue
            g = torch.nn.functional.linear(h, p[L + "mlp.gate_proj.weight"])
            u = torch.nn.functional.linear(h, p[L + "mlp.up_proj.weight"])
            x = x + torch.nn.functional.linear(torch.nn.functional.silu(g) * u, p[L + "mlp.down_proj.weight"])
        logits = torch.nn.functional.linear(self.rms(x, p["model.norm.weight"]), p["lm_head.weight"])
        return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))

    def objective(self, tokens, targets):
        """The cross-entropy and the step's objective: it plus the load-balancing loss (when on)."""
        self.aux = 0.0
        ce = self.loss(tokens, targets)
        return ce, ce + self.aux


def step_batch(corpus, step, microbatches, mb, T):
    """Every sequence of training step `step` (docs/executor.md §2): sequence i of microbatch b starts at
    ((step*M + b)*mb + i)*T modulo (training bytes - T - 1); the first 90 % of the corpus trains."""
    train = len(corpus) - len(corpus) // 10
    span = train - T - 1
    toks, tgts = [], []
    for b in range(microbatches):
        for i in range(mb):
            start = (((step * microbatches + b) * mb + i) * T) % span
            seq = corpus[start:start + T + 1]
            toks.append(list(seq[:T]))
            tgts.append(list(seq[1:]))
    return torch.tensor(toks), torch.tensor(tgts)


def rel(a, b):
    """||a - b|| / ||b||, in fp64."""
    a, b = a.double(), b.double()
    n = b.norm().item()
    return (a - b).norm().item() / (n if n > 0 else 1.0)


def compare(case, init, after, opt_state, config, replay, corpus, microbatches, aux_coeff=0.0, pairing="rotate_half",
            verbose=True, normalize_gates=True):
    """One training step in PyTorch against trainsim's; returns the list of failures (empty: it agrees)."""
    mb, T = 2, config["max_position_embeddings"]
    tokens, targets = step_batch(corpus, 0, microbatches, mb, T)
    model = Llama(init, config, pairing, normalize_gates, aux_coeff, microbatches)
    loss, objective = model.objective(tokens, targets)
    objective.backward()
    params = list(model.p.values())
    # (clipping as the replay ran it: a schedule whose first update comes before its last grad runs without)
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0 if replay["grad_clip"] else float("inf")).item()
    failures = []

    def check(what, err, tol):
        ok = err <= tol
        if verbose:
            print("  %-48s %.3g (tolerance %g) %s" % (what, err, tol, "ok" if ok else "FAIL"))
        if not ok:
            failures.append("%s: %.3g > %g" % (what, err, tol))

    check("loss: |torch - trainsim| / |trainsim|", abs(loss.item() - replay["losses"][0]) / abs(replay["losses"][0]), TOL_LOSS)
    if aux_coeff > 0:
        aux = float(model.aux)
        check("load-balancing loss: |torch - trainsim| / |torch|", abs(aux - replay["aux_losses"][0]) / aux, TOL_LOSS)
    check("gradient norm before clipping, relative", abs(norm - replay["grad_norms"][0]) / replay["grad_norms"][0], TOL_LOSS)
    worst, worst_name = 0.0, ""
    for name, t in model.p.items():
        g_trainsim = opt_state["exp_avg." + name] / (1 - BETA1)  # m1 = (1 - beta1) * clipped grad
        e = rel(g_trainsim, t.grad)
        if e > worst:
            worst, worst_name = e, name
    check("gradient, worst parameter (%s)" % worst_name, worst, TOL_GRAD)
    # One AdamW step as torch.optim.AdamW takes it, weight decay on matrices only (nanoGPT's groups).
    decay = [t for t in model.p.values() if t.dim() == 2]
    no_decay = [t for t in model.p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=replay["learning_rates"][0], betas=(BETA1, BETA2), eps=EPS)
    opt.step()
    num = den = 0.0
    for name, t in model.p.items():
        num += (t.detach().double() - after[name].double()).pow(2).sum().item()
        den += t.detach().double().pow(2).sum().item()
    check("weights after one AdamW step, whole model", math.sqrt(num / den), TOL_WEIGHTS)
    return failures


def case(name, trainsim, corpus_path, work, gen_args, model="tiny", aux_coeff=0.0):
    print("%s:" % name)
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sched = os.path.join(d, "s.sched")
    run(trainsim, "gen", *gen_args, "-o", sched)
    run(trainsim, "export", "--model", model, "--seed", "7", "-o", os.path.join(d, "init"))
    replay = json.loads(run(trainsim, "replay", sched, "--model", model, "--seed", "7", "--steps", "2", "--stop-after",
                            "1", "--save", os.path.join(d, "ck"), "--json", "--data", corpus_path,
                            *(["--aux-loss-coeff", str(aux_coeff)] if aux_coeff > 0 else [])))
    assert replay["ok"], replay["error"]
    run(trainsim, "export", "--checkpoint", os.path.join(d, "ck"), "-o", os.path.join(d, "after"), "--optimizer")
    init = read_safetensors(os.path.join(d, "init", "model.safetensors"))
    after = read_safetensors(os.path.join(d, "after", "model.safetensors"))
    opt_state = read_safetensors(os.path.join(d, "after", "optimizer.safetensors"))
    config = json.load(open(os.path.join(d, "init", "config.json")))
    microbatches = int([l for l in open(sched) if l.startswith("microbatches ")][0].split()[1])
    corpus = open(corpus_path, "rb").read()
    failures = compare(name, init, after, opt_state, config, replay, corpus, microbatches, aux_coeff)
    return failures, (init, after, opt_state, config, replay, corpus, microbatches)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    trainsim, corpus, work = (os.path.abspath(a) for a in sys.argv[1:])
    os.makedirs(work, exist_ok=True)
    print("PyTorch %s" % torch.__version__)
    failures = []
    f, one_rank = case("one rank", trainsim, corpus, work, ["1f1b", "--stages", "1", "--microbatches", "2"])
    failures += f
    f, _ = case("3d-tp2-pp2", trainsim, corpus, work, ["3d", "--tp", "2", "--pp", "2", "--microbatches", "2"])
    failures += f
    f, moe = case("moe-ep2-dp4", trainsim, corpus, work, ["ep", "--dp", "4", "--ep", "2", "--layers", "2",
                                                           "--microbatches", "1"], model="tiny-moe")
    failures += f
    f, aux = case("moe-ep2-dp4-aux", trainsim, corpus, work, ["ep", "--dp", "4", "--ep", "2", "--layers", "2",
                                                               "--microbatches", "2"], model="tiny-moe", aux_coeff=0.1)
    failures += f
    # Negative control: the other rotary pairing on the same weights must not pass.
    print("negative control (adjacent rotary pairs on the exported weights, which are laid out for rotate_half):")
    wrong = compare("negative control", *one_rank, pairing="adjacent")
    if not wrong:
        failures.append("the negative control passed: the comparison cannot tell the rotary pairings apart")
    else:
        print("  the comparison fails, as it must: %s" % wrong[0])
    print("negative control (Mixtral's gates not renormalised over the top k: the softmax over every expert):")
    wrong = compare("negative control", *moe, normalize_gates=False)
    if not wrong:
        failures.append("the MoE negative control passed: the comparison cannot tell the gates' normalisation apart")
    else:
        print("  the comparison fails, as it must: %s" % wrong[0])
    print("negative control (the load-balancing case without the loss in PyTorch):")
    wrong = compare("negative control", *aux, aux_coeff=0.0)
    if not wrong:
        failures.append("the load-balancing negative control passed: the comparison cannot tell the loss is there")
    else:
        print("  the comparison fails, as it must: %s" % wrong[0])
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
