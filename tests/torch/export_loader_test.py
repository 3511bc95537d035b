#!/usr/bin/env python3
"""`trainsim export`'s files as a PyTorch user loads them (issue 38): the standalone loader of
examples/hf_llama_torch.py against `trainsim score --logits`, and the byte-level tokenizer's files.

- A tiny model trained 2 steps and saved; `trainsim export` writes it; `trainsim score --text T --logits F`
  gives every predicted byte's log-probability and logits. The example's loader, reading only the exported
  directory, scores the same text: every log-probability within 1e-5 (absolute, nats) and every logit within
  1e-5 relative to the logits' scale (fp32 forwards that sum in another order). Negative control: the loader on
  the initial model's export must disagree (the comparison can tell two models apart).
- tokenizer.json: the vocabulary is GPT-2's bytes_to_unicode (written here from encoder.py, not from trainsim's
  code), id = byte value, one token per byte; with the `tokenizers` library installed, it encodes and decodes a
  text byte for byte; with `transformers`, AutoModelForCausalLM's logits equal the loader's (reported as not run
  where they are missing; Debian has neither).

Usage: export_loader_test.py TRAINSIM CORPUS WORKDIR. Exit 0: passed; 1: failed; 77: skipped (no torch).
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed (Debian: apt-get install python3-torch, as scripts/install-deps.sh does)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import hf_llama_torch  # noqa: E402  (the example under test)

TOL_LOGPROB = 1e-5
TOL_LOGITS = 1e-5
torch.set_num_threads(1)
torch.set_grad_enabled(False)


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (r.returncode, " ".join(map(str, args)), r.stdout, r.stderr))
    return r.stdout


def bytes_to_unicode():
    """GPT-2's encoder.py: printable bytes stand for themselves, the rest for 256 + n in order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    trainsim, corpus, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sched, ck = os.path.join(work, "1f1b.sched"), os.path.join(work, "ck")
    run(trainsim, "gen", "1f1b", "--stages", "2", "--microbatches", "2", "-o", sched)
    run(trainsim, "replay", sched, "--model", "tiny", "--steps", "2", "--lr", "3e-3", "--save", ck, "--data", corpus)
    hf, init = os.path.join(work, "hf"), os.path.join(work, "init")
    run(trainsim, "export", "--checkpoint", ck, "-o", hf)
    run(trainsim, "export", "--model", "tiny", "--seed", "1", "-o", init)
    with open(corpus, "rb") as f:
        text = f.read()[:200] + "é\n\x00\x7f".encode()  # (bytes that are not printable ASCII too)
    text_path, logits_path = os.path.join(work, "text.bin"), os.path.join(work, "logits.json")
    with open(text_path, "wb") as f:
        f.write(text)
    run(trainsim, "score", "--checkpoint", ck, "--text", text_path, "--logits", logits_path)
    with open(logits_path) as f:
        theirs = json.load(f)["tokens"]

    model = hf_llama_torch.Llama(hf)
    ours = model.score(text)
    failures = []
    if [(t["position"], t["token"]) for t in theirs] != [(p, b) for p, b, _ in ours]:
        failures.append("the loader predicts other positions or bytes than trainsim score")
    worst = max(abs(t["log_prob"] - o[2]) for t, o in zip(theirs, ours))
    print("log-probabilities of %d bytes: largest difference %.3g nats (tolerance %g)" % (len(ours), worst, TOL_LOGPROB))
    if not worst <= TOL_LOGPROB:
        failures.append("log-probabilities differ by %.3g" % worst)
    # The first window's logits, position by position.
    seq = model.c["max_position_embeddings"]
    logits = model.logits(torch.tensor([list(text[:seq])]))[0]
    ref = torch.tensor([t["logits"] for t in theirs[:seq]])
    rel = float((logits - ref).abs().max() / ref.abs().max())
    print("logits of the first window: largest difference %.3g of their scale (tolerance %g)" % (rel, TOL_LOGITS))
    if not rel <= TOL_LOGITS:
        failures.append("logits differ by %.3g of their scale" % rel)
    control = max(abs(t["log_prob"] - o[2]) for t, o in zip(theirs, hf_llama_torch.Llama(init).score(text)))
    print("negative control (the initial model): largest difference %.3g nats (must exceed %g)" % (control, TOL_LOGPROB))
    if not control > TOL_LOGPROB:
        failures.append("the initial model scores as the trained one: the comparison cannot tell")

    with open(os.path.join(hf, "tokenizer.json")) as f:
        tok = json.load(f)
    symbols = bytes_to_unicode()
    if tok["model"]["vocab"] != {symbols[b]: b for b in range(256)}:
        failures.append("tokenizer.json's vocabulary is not GPT-2's byte alphabet with id = byte")
    if tok["model"]["merges"] != [] or tok["pre_tokenizer"]["type"] != "ByteLevel" or tok["decoder"]["type"] != "ByteLevel":
        failures.append("tokenizer.json is not a merge-free byte-level BPE")
    try:
        import tokenizers
        t = tokenizers.Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
        ids = t.encode(text.decode("utf-8", "replace")).ids
        if ids != list(text.decode("utf-8", "replace").encode()):
            failures.append("the tokenizers library does not encode one id per byte")
        print("tokenizers %s: encodes %d bytes as their values" % (tokenizers.__version__, len(ids)))
    except ImportError:
        print("not run: the tokenizers library is not installed (the vocabulary was checked above)")
    try:
        import transformers
        m = transformers.AutoModelForCausalLM.from_pretrained(hf)
        hf_logits = m(torch.tensor([list(text[:seq])])).logits[0]
        rel = float((hf_logits - logits).abs().max() / logits.abs().max())
        print("transformers %s: logits within %.3g of the loader's" % (transformers.__version__, rel))
        if not rel <= TOL_LOGITS:
            failures.append("transformers' logits differ by %.3g" % rel)
    except ImportError:
        print("not run: transformers is not installed")

    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
